"""How the dashboard ended, as the command line says it after the terminal is restored:
the exit status, and the verdict of an action it quit during (or waited for)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from gpudash.domain.model import HostSnapshot
from gpudash.domain.units import gib
from gpudash.engine import ActionReport
from gpudash.record import record
from gpudash.ui.hosts import HostView
from gpudash.ui.state import LastAction

if TYPE_CHECKING:  # made once, at exit: the fleet's row modules load then
    from gpudash.fleetprom.visit import Visit


@record
class DashboardOutcome:
    """``interrupted``: the action "Quit now" stopped (``still_held``: what of its plan
    still held GPU memory in the host's last sample); ``finished``: the action "Quit when
    done" waited for, whose verdict is the exit status."""

    code: int
    interrupted: ActionReport | None = None
    finished: ActionReport | None = None
    still_held: tuple[str, ...] = ()
    visit: Visit | None = None  # what the host opened from Prometheus' fleet was like

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


def visit_of(views: Sequence[HostView], last_actions: Mapping[str, LastAction]
             ) -> Visit | None:
    """The one host a dashboard showed, as the Prometheus fleet's row tells it afterwards:
    why SSH never reached it, or its last sample's figures and its last action."""
    if len(views) != 1:
        return None
    from gpudash.domain.fleet import summarize
    from gpudash.fleetprom.visit import Visit

    view = views[0]
    last = last_actions.get(view.name)
    action = None if last is None or last.running else (
        f"{_MARK[last.ok]}{last.title}: {last.outcome}")
    if view.snapshot is None or view.triage is None:
        return Visit(time.time(), error=view.error or "no answer", action=action)
    return Visit(time.time(), taken_at=view.snapshot.taken_at,
                 summary=summarize(view.triage), action=action)


_MARK = {True: "✔ ", False: "✘ ", None: ""}


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
