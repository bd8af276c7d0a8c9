"""What proves a ``fix``: on a fresh ``systemctl show`` after the reload, the unit reports
the drop-in's values (the lint finds nothing the drop-in covers), and ``systemctl cat``
shows gpudash's file; reverted, the file is gone from ``systemctl cat``."""

from __future__ import annotations

from gpudash.domain import dropin
from gpudash.domain.lint import Learned
from gpudash.domain.model import HostSnapshot
from gpudash.engine.config_plans import findings_of
from gpudash.engine.goals import Goal, GoalState, GoalStatus
from gpudash.protocol.source import HostControl, SourceError


class UnitConfigured(Goal):
    """gpudash's drop-in of ``unit`` is in force (``settings``), or gone (revert)."""

    def __init__(self, unit: str, settings: tuple[dropin.Directive, ...], present: bool,
                 learned: Learned | None = None) -> None:
        self.unit = unit
        self.learned = learned  # the lint it is held to: the plan's
        self.keys = frozenset(k for _s, k, _v in settings)
        self.present = present
        self.title = "drop-in in force" if present else "drop-in removed"
        self.listed: bool | None = None  # whether systemctl cat lists gpudash's file
        self.why = ""

    async def observe(self, control: HostControl) -> None:
        try:
            text = await control.unit_text(self.unit)
        except SourceError as exc:
            self.listed, self.why = None, str(exc)
            return
        self.listed = dropin.ours_in(text, self.unit) is not None

    def uncovered(self, snap: HostSnapshot) -> list[str]:
        """The findings the drop-in was to remove that the unit still shows."""
        u = snap.unit(self.unit)
        if u is None:
            return [f"{self.unit} not reported"]
        return [f.setting for f in findings_of(u, self.learned)
                if any(k in self.keys for _s, k, _v in f.fix)]

    def check(self, snap: HostSnapshot, elapsed: float) -> GoalStatus:
        path = dropin.drop_in_path(self.unit)
        if self.listed is None:
            return GoalStatus(self.title, GoalState.PENDING,
                              f"systemctl cat {self.unit} not read: {self.why}")
        if self.listed != self.present:
            where = "not listed" if self.present else "still listed"
            return GoalStatus(self.title, GoalState.PENDING,
                              f"{path} {where} by systemctl cat {self.unit}")
        if not self.present:
            return GoalStatus(self.title, GoalState.MET, f"{path} removed")
        left = self.uncovered(snap)
        if left:
            return GoalStatus(self.title, GoalState.PENDING,
                              f"systemctl show still reports {', '.join(left)}")
        return GoalStatus(self.title, GoalState.MET,
                          "systemctl show reports the drop-in's values")
