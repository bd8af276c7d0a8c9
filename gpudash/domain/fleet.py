"""One host of a fleet in one row: what the fleet table and the exporter both say about it.

Pure functions of a snapshot's triage, no I/O and no Textual, so that the dashboard's
fleet view and anything that exports the triage (Prometheus) share one definition of
*reclaimable*, *orphan* and *crash-looping*.

- **reclaimable**: GPU memory held by processes that are ORPHAN, or that belong to a
  service which is down (inactive/failed) or respawning (systemd restarted it by itself:
  RESPAWNED). Each process counts once, and a GPU never gives back more than it reports
  used less what its other holders keep; memory the driver does not report (a device
  holder's N/A) counts as nothing, and ``unknown_holders`` says how many such there are.
- **crash-looping**: a service that died again after systemd restarted it (``SubState=
  auto-restart`` with ``NRestarts`` >= 1: one ``kill -9`` is not a loop), that systemd
  has restarted by itself ``CRASH_LOOP_RESTARTS`` times or more, or (seen by the host's
  follower, ``crashloop.RestartWatch``) restarted twice within five minutes.
"""

from __future__ import annotations

from gpudash.domain.triage import Flag, HostTriage, holds
from gpudash.record import record


@record
class HostSummary:
    """A host's row in the fleet, from one triaged snapshot."""

    gpus_in_use: int  # GPUs on which some process holds memory
    gpus_total: int
    used_mib: int | None  # None: a GPU did not report its memory
    total_mib: int | None
    reclaimable_mib: int
    reclaimable_by_gpu: dict[int, int]
    orphans: int  # ORPHAN processes
    crash_looping: tuple[str, ...]  # unit names, sorted
    unknown_holders: int  # reclaimable holders whose memory the driver does not report
    degraded: bool
    errors: tuple[str, ...]
    strays: int = 0  # STRAY processes: memory their scheduler did not allocate (Slurm)


def crash_looping(result: HostTriage) -> tuple[str, ...]:
    """The services of the host that systemd keeps restarting (the triage's verdict: its
    follower's, from the samples it saw)."""
    return tuple(sorted(result.crash_looping))


def reclaimable_by_gpu(result: HostTriage) -> tuple[dict[int, int], int]:
    """(MiB per GPU that reclaim would give back, holders whose memory is unknown)."""
    down_or_respawning = {
        g.key for g in result.groups
        if g.service is not None and g.flags & {Flag.UNIT_INACTIVE, Flag.RESPAWNED}
    }
    per_gpu: dict[int, int] = {}
    others: dict[int, int] = {}  # what stays: the memory of every other holder, per GPU
    unknown = 0
    for p in result.snapshot.processes:
        if not holds(p):
            continue
        flags = result.flags.get(p.pid, frozenset())
        if Flag.ORPHAN not in flags and (p.unit or "") not in down_or_respawning:
            for gpu, mib in p.gpu_memory_mib.items():
                others[gpu] = others.get(gpu, 0) + (mib or 0)
            continue
        if any(mib is None for mib in p.gpu_memory_mib.values()) or (
            set(p.device_gpus) - set(p.gpu_memory_mib)
        ):
            unknown += 1
        for gpu, mib in p.gpu_memory_mib.items():
            if mib:
                per_gpu[gpu] = per_gpu.get(gpu, 0) + mib
    # Never more than the GPU says is used, less what the other holders keep: a driver
    # may list more per process than the GPU holds (a respawned worker "holding" a model
    # on a full GPU), and memory that is not used cannot come back.
    for g in result.snapshot.gpus:
        if g.index in per_gpu and g.memory_used_mib is not None:
            room = max(0, g.memory_used_mib - others.get(g.index, 0))
            per_gpu[g.index] = min(per_gpu[g.index], room)
    return dict(sorted(per_gpu.items())), unknown


def summarize(result: HostTriage) -> HostSummary:
    """The fleet row of one triaged snapshot."""
    snap = result.snapshot
    used = [g.memory_used_mib for g in snap.gpus]
    total = [g.memory_total_mib for g in snap.gpus]
    per_gpu, unknown = reclaimable_by_gpu(result)
    in_use = sum(1 for g in snap.gpus if result.holders_by_gpu.get(g.index))
    return HostSummary(
        gpus_in_use=in_use,
        gpus_total=len(snap.gpus),
        used_mib=None if any(u is None for u in used) else sum(u or 0 for u in used),
        total_mib=None if any(t is None for t in total) else sum(t or 0 for t in total),
        reclaimable_mib=sum(per_gpu.values()),
        reclaimable_by_gpu=per_gpu,
        orphans=len(result.orphans()),
        crash_looping=crash_looping(result),
        unknown_holders=unknown,
        degraded=snap.degraded,
        errors=tuple(snap.errors),
        strays=len(result.strays),
    )
