"""A process a plan will signal, pinned by its identity on the host."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpudash.domain.model import HostSnapshot, Process
from gpudash.domain.triage import label
from gpudash.record import record


@record
class Target:
    """A process the plan will signal, pinned by (pid, start time)."""

    pid: int
    start_ticks: int | None
    user: str | None
    label: str
    cmdline: str
    gpu_memory_mib: Mapping[int, int | None]
    device_gpus: tuple[int, ...] = ()  # holds these GPUs' device files; the driver lists it not
    boot_id: str | None = None  # start ticks count from this boot of the host
    unit: str | None = None  # the unit its cgroup names (what it learns of its stops)

    @classmethod
    def of(cls, p: Process, boot_id: str | None = None) -> Target:
        return cls(
            p.pid,
            p.start_ticks,
            p.user,
            label(p) or p.name or "?",
            p.cmdline,
            dict(p.gpu_memory_mib),
            p.device_gpus,
            boot_id,
            p.unit,
        )

    @property
    def identity(self) -> tuple[int, int | None]:
        return (self.pid, self.start_ticks)

    def seen_in(self, snapshot: HostSnapshot) -> bool:
        """Whether ``snapshot`` comes from the boot this target was pinned in."""
        return self.boot_id is None or snapshot.boot_id in (None, self.boot_id)


def mem_sum(targets: Iterable[Target]) -> dict[int, int]:
    """GPU memory per GPU that ``targets`` hold (N/A counts as nothing)."""
    out: dict[int, int] = {}
    for t in targets:
        for gpu, mib in t.gpu_memory_mib.items():
            if mib:
                out[gpu] = out.get(gpu, 0) + mib
    return out


DEVICE_SLACK_MIB = 1024  # what the driver itself may keep on a GPU nobody holds


def expected_free(snapshot: HostSnapshot, targets: Iterable[Target]) -> dict[int, int]:
    """Memory per GPU that signalling ``targets`` should bring back.

    Listed memory adds up. A process that holds a GPU only through its device files has
    no listed memory; the GPU's unlisted memory (used less every listed holder's, less a
    driver slack) is expected back only when every such process on that GPU is a target.
    """
    targets = list(targets)
    out = mem_sum(targets)
    pinned = {t.pid for t in targets}
    for gpu in sorted({g for t in targets for g in t.device_gpus}):
        holders = [p for p in snapshot.processes if gpu in p.device_gpus]
        g = snapshot.gpu(gpu)
        if g is None or g.memory_used_mib is None or any(p.pid not in pinned for p in holders):
            continue
        listed = sum(p.gpu_memory_mib.get(gpu) or 0 for p in snapshot.processes)
        unlisted = g.memory_used_mib - listed - DEVICE_SLACK_MIB
        if unlisted > 0:
            out[gpu] = out.get(gpu, 0) + unlisted
    # A GPU gives back at most what it reports used less what the others listed on it keep:
    # drivers over-list (a respawned server's workers listed at full size beside the orphans
    # that still fill the GPU), and a target above that can never be met.
    for gpu in list(out):
        g = snapshot.gpu(gpu)
        if g is None or g.memory_used_mib is None:
            continue
        others = sum(
            p.gpu_memory_mib.get(gpu) or 0 for p in snapshot.processes if p.pid not in pinned
        )
        out[gpu] = max(0, min(out[gpu], g.memory_used_mib - others))
    return out
