"""What proves an action worked: goals the engine checks on every sample.

Verification polls every goal of a plan with each fresh snapshot until all the *waited*
goals are met, one fails for good, or time runs out; then every goal's last status goes
into the report. Memory back and processes gone are waited for; the unit's state is read
once at the end (systemctl has returned by then); a respawn ends the wait at once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from gpudash.engine.target import Target
from gpudash.model import HostSnapshot, Process, Unit


class GoalState(StrEnum):
    PENDING = "pending"
    MET = "met"
    FAILED = "failed"  # for good: waiting longer cannot help


@dataclass(frozen=True, slots=True)
class GoalStatus:
    title: str
    state: GoalState
    detail: str = ""


def alive(snapshot: HostSnapshot, t: Target) -> Process | None:
    """``t`` as the snapshot shows it, if it is still that process and not a zombie."""
    if not t.seen_in(snapshot):  # the host rebooted: every planned process is gone
        return None
    p = snapshot.process(t.pid)
    if p is None or p.start_ticks != t.start_ticks or p.state == "Z":
        return None
    return p


class Goal(ABC):
    title: str
    waited = True  # verification waits for it; otherwise it is read at the end only

    @abstractmethod
    def check(self, snap: HostSnapshot, elapsed: float) -> GoalStatus:
        """The goal's status in this sample (``elapsed`` seconds into verification)."""


class MemoryAtMost(Goal):
    """Every GPU at or below its target for ``settle`` consecutive samples."""

    title = "memory back"

    def __init__(self, targets_mib: Mapping[int, int], settle: int, slack_mib: int) -> None:
        self.targets_mib = dict(targets_mib)
        self.settle = settle
        self.slack_mib = slack_mib
        self.stable = dict.fromkeys(self.targets_mib, 0)

    def check(self, snap: HostSnapshot, elapsed: float) -> GoalStatus:
        used = snap.used_by_gpu()
        for gpu, target in self.targets_mib.items():
            now = used.get(gpu)
            ok = now is not None and now <= target + self.slack_mib
            self.stable[gpu] = self.stable[gpu] + 1 if ok else 0
        waiting = self.waiting()
        if not waiting:
            return GoalStatus(self.title, GoalState.MET, "memory back on every GPU")
        return GoalStatus(self.title, GoalState.PENDING,
                          f"waiting for GPU {', '.join(map(str, waiting))}")

    def waiting(self) -> list[int]:
        return [g for g, v in self.stable.items() if v < self.settle]

    def confirmed(self, gpu: int) -> bool:
        return self.stable.get(gpu, 0) >= self.settle


class ProcessesGone(Goal):
    """Every planned process has exited: memory alone is not the proof."""

    title = "planned processes gone"

    def __init__(self, targets: Iterable[Target]) -> None:
        self.targets = tuple(targets)
        self.left: tuple[int, ...] = tuple(t.pid for t in self.targets)

    def check(self, snap: HostSnapshot, elapsed: float) -> GoalStatus:
        self.left = tuple(t.pid for t in self.targets if alive(snap, t))
        if not self.left:
            return GoalStatus(self.title, GoalState.MET)
        return GoalStatus(self.title, GoalState.PENDING,
                          f"waiting for {len(self.left)} planned process(es) to exit")


class NoRespawn(Goal):
    """After killing a unit's main process: systemd must not start a new one."""

    title = "no respawn"

    def __init__(self, unit_before: Unit, watch_s: float) -> None:
        self.unit_before = unit_before
        self.watch_s = watch_s

    def check(self, snap: HostSnapshot, elapsed: float) -> GoalStatus:
        u = snap.unit(self.unit_before.name)
        if u is not None and respawned(self.unit_before, u):
            return GoalStatus(
                self.title, GoalState.FAILED,
                f"systemd respawned {u.name}: new MainPID {u.main_pid}, NRestarts "
                f"{u.n_restarts} (stop the unit instead)",
            )
        if elapsed < self.watch_s:
            return GoalStatus(self.title, GoalState.PENDING,
                              "watching whether systemd respawns the unit")
        return GoalStatus(self.title, GoalState.MET)


class UnitDown(Goal):
    """After ``systemctl stop``: the unit is inactive (or failed)."""

    title = "unit stopped"
    waited = False

    def __init__(self, name: str) -> None:
        self.name = name

    def check(self, snap: HostSnapshot, elapsed: float) -> GoalStatus:
        u = snap.unit(self.name)
        if u is None or u.is_down:
            return GoalStatus(self.title, GoalState.MET)
        return GoalStatus(self.title, GoalState.PENDING, f"{u.name} is {u.active_state} after stop")


class UnitNotEnabled(Goal):
    """After ``systemctl disable``: it will not start at boot.

    static/indirect/generated/transient units cannot be disabled and do not start at boot
    by themselves: only an enabled (or linked) unit file is a problem.
    """

    title = "unit disabled"
    waited = False

    def __init__(self, name: str) -> None:
        self.name = name

    def check(self, snap: HostSnapshot, elapsed: float) -> GoalStatus:
        u = snap.unit(self.name)
        if u is None or not (u.unit_file_state or "").startswith(("enabled", "linked")):
            return GoalStatus(self.title, GoalState.MET)
        return GoalStatus(self.title, GoalState.PENDING,
                          f"{u.name} is still {u.unit_file_state} after disable")


def respawned(before: Unit, now: Unit) -> bool:
    return now.main_pid not in (None, before.main_pid)
