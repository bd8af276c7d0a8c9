"""A process a plan will signal, pinned by its identity on the host."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpudash.model import Process
from gpudash.triage import label


@dataclass(frozen=True, slots=True)
class Target:
    """A process the plan will signal, pinned by (pid, start time)."""

    pid: int
    start_ticks: int | None
    user: str | None
    label: str
    cmdline: str
    gpu_memory_mib: Mapping[int, int | None]

    @classmethod
    def of(cls, p: Process) -> Target:
        return cls(
            p.pid,
            p.start_ticks,
            p.user,
            label(p) or p.name or "?",
            p.cmdline,
            dict(p.gpu_memory_mib),
        )

    @property
    def identity(self) -> tuple[int, int | None]:
        return (self.pid, self.start_ticks)


def mem_sum(targets: Iterable[Target]) -> dict[int, int]:
    """GPU memory per GPU that ``targets`` hold (N/A counts as nothing)."""
    out: dict[int, int] = {}
    for t in targets:
        for gpu, mib in t.gpu_memory_mib.items():
            if mib:
                out[gpu] = out.get(gpu, 0) + mib
    return out
