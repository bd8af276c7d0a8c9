"""Plain-text rendering of a snapshot for `gpudash snapshot` without --json.

Text from the host is printed with control characters made visible, so a hostile
process name cannot move the operator's cursor or clear the terminal.
"""

from __future__ import annotations

from gpudash.domain.model import HostSnapshot
from gpudash.domain.triage import triage
from gpudash.domain.units import NA, celsius, gib, gib_of, percent, watts
from gpudash.domain.untrusted import clean


def gpu_memory(per_gpu: dict[int, int | None]) -> str:
    """``GPU1 94.5 GiB``, as the dashboard's holders table writes it."""
    return " ".join(f"GPU{k} {gib(v)}" for k, v in sorted(per_gpu.items()))


def snapshot_text(snap: HostSnapshot) -> str:
    return "\n".join(snapshot_lines(snap))


def snapshot_lines(snap: HostSnapshot) -> list[str]:
    """The snapshot's lines, each host text in them ``clean`` (its newlines escaped)."""
    t = triage(snap)
    degraded = ", degraded" if snap.degraded else ""
    lines = [f"{clean(snap.host)}  ({snap.source.value}{degraded})"]
    lines += [f"  ! {clean(e)}" for e in snap.errors]
    for g in snap.gpus:
        lines.append(
            f"  GPU{g.index} {clean(g.name or NA):<32} "
            f"{gib_of(g.memory_used_mib, g.memory_total_mib):>15}  "
            f"util {percent(g.utilization_pct):>5}  {celsius(g.temperature_c):>5}  "
            f"{watts(g.power_w, g.power_limit_w)}" + (f"  [{clean(g.error)}]" if g.error else "")
        )
    for group in t.groups:
        flags = " ".join(sorted(f.value for f in group.flags))
        lines.append(f"  {clean(group.key)}  {gib(group.total_gpu_memory_mib)}  {flags}".rstrip())
        for w in group.warnings:
            lines.append(f"    ! {clean(w)}")
        for node in group.nodes():
            p = node.process
            mem = gpu_memory(dict(p.gpu_memory_mib))
            f = " ".join(sorted(x.value for x in node.flags))
            lines.append(
                f"    {p.pid:>8} {p.state or NA:1} {clean(p.user or '?'):<10} {mem:<13} "
                f"{f:<10} {clean(p.cmdline or p.name)[:80]}"
            )
    return lines
