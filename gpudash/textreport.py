"""Plain-text rendering of a snapshot for `gpudash snapshot` without --json.

Text from the host is printed with control characters made visible, so a hostile
process name cannot move the operator's cursor or clear the terminal.
"""

from __future__ import annotations

from gpudash.model import HostSnapshot
from gpudash.triage import triage
from gpudash.untrusted import clean


def na(value: object, unit: str = "") -> str:
    return "N/A" if value is None else f"{value}{unit}"


def snapshot_text(snap: HostSnapshot) -> str:
    t = triage(snap)
    degraded = ", degraded" if snap.degraded else ""
    lines = [f"{clean(snap.host)}  ({snap.source.value}{degraded})"]
    lines += [f"  ! {clean(e)}" for e in snap.errors]
    for g in snap.gpus:
        lines.append(
            f"  GPU{g.index} {clean(g.name or 'N/A'):<32} "
            f"{na(g.memory_used_mib):>7} / {na(g.memory_total_mib)} MiB  "
            f"util {na(g.utilization_pct, '%')}  {na(g.temperature_c, 'C')}  "
            f"{na(g.power_w, 'W')}" + (f"  [{clean(g.error)}]" if g.error else "")
        )
    for group in t.groups:
        flags = " ".join(sorted(f.value for f in group.flags))
        lines.append(f"  {clean(group.key)}  {group.total_gpu_memory_mib} MiB  {flags}")
        for w in group.warnings:
            lines.append(f"    ! {w}")
        for node in group.nodes():
            p = node.process
            mem = " ".join(f"GPU{k}:{na(v)}" for k, v in sorted(p.gpu_memory_mib.items()))
            f = " ".join(sorted(x.value for x in node.flags))
            lines.append(
                f"    {p.pid:>8} {na(p.state):1} {clean(p.user or '?'):<10} {mem:<16} "
                f"{f:<10} {clean(p.cmdline or p.name)[:80]}"
            )
    return "\n".join(lines)
