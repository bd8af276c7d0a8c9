"""How the dashboard ended, as the command line says it after the terminal is restored:
the exit status, and the verdict of an action it quit during (or waited for)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpudash.domain.model import HostSnapshot
from gpudash.domain.units import gib
from gpudash.engine import ActionReport


@dataclass(frozen=True, slots=True)
class DashboardOutcome:
    """``interrupted``: the action "Quit now" stopped (``still_held``: what of its plan
    still held GPU memory in the host's last sample); ``finished``: the action "Quit when
    done" waited for, whose verdict is the exit status."""

    code: int
    interrupted: ActionReport | None = None
    finished: ActionReport | None = None
    still_held: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        """What the command line prints (stdout) once the dashboard is gone."""
        if self.interrupted is not None:
            out = ["quit while an action was running: stopped where it was"]
            out += self.interrupted.describe()
            out += [f"  still held: {s}" for s in self.still_held] or [
                "  nothing of its plan held GPU memory in the last sample"]
            return out
        if self.finished is not None:
            return ["quit once the action had ended:", *self.finished.describe()]
        return []


def still_held(report: ActionReport, snapshots: Sequence[HostSnapshot | None]) -> tuple[str, ...]:
    """The plan's processes that still held GPU memory in their host's last sample (the
    same process: pid and start time)."""
    snap = next((s for s in snapshots if s is not None and s.host == report.plan.host), None)
    if snap is None:
        return ("not known: no sample of the host",)
    out = []
    for t in report.plan.targets:
        p = snap.process(t.pid)
        if p is None or p.start_ticks != t.start_ticks:
            continue
        for gpu, mib in sorted(p.gpu_memory_mib.items()):
            if mib:
                out.append(f"GPU{gpu} {gib(mib)} by pid {p.pid} ({t.label})")
    return tuple(out)


def exit_code(report: ActionReport | None) -> int:
    """The command line's code for an action's verdict (as ``gpudash reclaim`` has it)."""
    return 1 if report is None else report.exit_status
