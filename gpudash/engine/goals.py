"""What proves an action worked: goals the engine checks on every sample.

Verification polls every goal of a plan with each fresh snapshot until all the *waited*
goals are met, one fails for good, or time runs out; then every goal's last status goes
into the report. Memory back and processes gone are waited for; the unit's state is read
once at the end (systemctl has returned by then); a respawn ends the wait at once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from enum import StrEnum

from gpudash.domain.model import Container, HostSnapshot, Process, Unit
from gpudash.domain.owners import container_members
from gpudash.domain.units import gib
from gpudash.engine.target import Target
from gpudash.protocol.source import Capability, HostControl, ListenerOwner
from gpudash.record import record


class GoalState(StrEnum):
    PENDING = "pending"
    MET = "met"
    FAILED = "failed"  # for good: waiting longer cannot help


@record
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

    async def observe(self, control: HostControl) -> None:  # noqa: B027 - most need no I/O
        """Look at the host beyond the snapshot before ``check`` (a probe, say)."""

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


class UnitEnabled(Goal):
    """After ``systemctl enable``: it starts at boot."""

    title = "unit enabled"
    waited = False

    def __init__(self, name: str) -> None:
        self.name = name

    def check(self, snap: HostSnapshot, elapsed: float) -> GoalStatus:
        u = snap.unit(self.name)
        if u is None or (u.unit_file_state or "").startswith(("enabled", "static")):
            return GoalStatus(self.title, GoalState.MET)
        return GoalStatus(self.title, GoalState.PENDING,
                          f"{u.name} is {u.unit_file_state} after enable")


class ContainerNoRespawn(Goal):
    """After killing a container's main process: its runtime must not restart it."""

    title = "no respawn"

    def __init__(self, before: Container, watch_s: float) -> None:
        self.before = before
        self.watch_s = watch_s

    def check(self, snap: HostSnapshot, elapsed: float) -> GoalStatus:
        c = snap.container(self.before.id)
        if c is not None and container_respawned(self.before, c):
            return GoalStatus(
                self.title, GoalState.FAILED,
                f"{c.runtime} restarted container {c.label}: new main pid {c.main_pid}, "
                f"RestartCount {self.before.restart_count or 0} -> {c.restart_count} "
                f"(stop the container instead)",
            )
        if elapsed < self.watch_s:
            return GoalStatus(self.title, GoalState.PENDING,
                              f"watching whether {self.before.runtime} restarts the container")
        return GoalStatus(self.title, GoalState.MET)


def container_respawned(before: Container, now: Container) -> bool:
    return (now.restart_count or 0) > (before.restart_count or 0) or (
        now.main_pid not in (None, before.main_pid))


class ContainerDown(Goal):
    """After ``docker stop``: the container is exited (or gone)."""

    title = "container stopped"
    waited = False

    def __init__(self, container: Container) -> None:
        self.container = container

    def check(self, snap: HostSnapshot, elapsed: float) -> GoalStatus:
        c = snap.container(self.container.id)
        if c is None or c.is_down:
            return GoalStatus(self.title, GoalState.MET)
        return GoalStatus(self.title, GoalState.PENDING, f"{c.label} is {c.state} after stop")


class ContainerPolicyOff(Goal):
    """After ``docker update --restart=no``: the daemon will not restart it by itself."""

    title = "restart policy off"
    waited = False

    def __init__(self, container: Container) -> None:
        self.container = container

    def check(self, snap: HostSnapshot, elapsed: float) -> GoalStatus:
        c = snap.container(self.container.id)
        if c is None or (c.restart_policy or "no") == "no":
            return GoalStatus(self.title, GoalState.MET)
        return GoalStatus(self.title, GoalState.PENDING,
                          f"{c.label} still has restart policy {c.restart_policy}")


class ContainerRemoved(Goal):
    """After ``docker rm``: the runtime no longer knows it."""

    title = "container removed"
    waited = False

    def __init__(self, container: Container) -> None:
        self.container = container

    def check(self, snap: HostSnapshot, elapsed: float) -> GoalStatus:
        c = snap.container(self.container.id)
        if c is None or c.state == "removed":
            return GoalStatus(self.title, GoalState.MET)
        return GoalStatus(self.title, GoalState.PENDING, f"{c.label} is still {c.state}")


def container_memory(snapshot: HostSnapshot, c: Container) -> dict[int, int]:
    """GPU memory per GPU held by the container's processes (N/A counts as nothing)."""
    out: dict[int, int] = {}
    for p in container_members(snapshot, c):
        for gpu, mib in p.gpu_memory_mib.items():
            out[gpu] = out.get(gpu, 0) + (mib or 0)
    return {g: m for g, m in out.items() if m}


class ContainerRunning(Goal):
    """After ``docker start`` / ``restart``: running with a main process for ``settle``
    samples in a row, and its runtime did not have to restart it meanwhile (a crash)."""

    title = "container running"

    def __init__(self, before: Container, settle: int) -> None:
        self.before = before
        self.settle = settle
        self.stable = 0
        self.first_pid: int | None = None

    def check(self, snap: HostSnapshot, elapsed: float) -> GoalStatus:
        c = snap.container(self.before.id)
        if c is None or c.state == "removed":
            return GoalStatus(self.title, GoalState.FAILED, f"{self.before.label} is gone")
        if (c.restart_count or 0) > (self.before.restart_count or 0) and (
                self.first_pid is not None and c.main_pid != self.first_pid):
            return GoalStatus(self.title, GoalState.FAILED,
                              f"{c.label} crashed and {c.runtime} restarted it (RestartCount "
                              f"{self.before.restart_count or 0} -> {c.restart_count})")
        if c.state in ("exited", "dead") and self.first_pid is not None:
            return GoalStatus(self.title, GoalState.FAILED, f"{c.label} exited again")
        up = c.state == "running" and c.main_pid is not None
        if up and self.first_pid is None:
            self.first_pid = c.main_pid
        self.stable = self.stable + 1 if up and c.main_pid == self.first_pid else 0
        if self.stable >= self.settle:
            return GoalStatus(self.title, GoalState.MET,
                              f"{c.label} running, main pid {c.main_pid}")
        return GoalStatus(self.title, GoalState.PENDING, f"{c.label} is {c.state}")


class ContainerLoaded(Goal):
    """The container's GPU memory is back on its GPUs (90 % of ``footprint`` where known,
    else a loaded context on some GPU) and steady for ``settle`` samples."""

    title = "memory loaded"

    def __init__(self, container: Container, footprint: Mapping[int, int],
                 settle: int) -> None:
        self.container = container
        self.footprint = dict(footprint)
        self.settle = settle
        self.stable = 0
        self.last: dict[int, int] = {}
        self.now: dict[int, int] = {}

    def check(self, snap: HostSnapshot, elapsed: float) -> GoalStatus:
        c = snap.container(self.container.id) or self.container
        now = container_memory(snap, c) if c.main_pid is not None else {}
        moved = any(abs(now.get(g, 0) - self.last.get(g, 0)) > max(256, now.get(g, 0) // 100)
                    for g in set(now) | set(self.last))
        if self.footprint:
            reached = all(now.get(g, 0) >= 0.9 * mib for g, mib in self.footprint.items())
        else:
            reached = bool(now) and max(now.values()) >= LOADED_MIN_MIB // 2
        self.stable = 0 if moved or not reached else self.stable + 1
        self.last, self.now = now, now
        shown = ", ".join(f"GPU{g} {gib(m)}" for g, m in sorted(now.items())) or "nothing"
        if self.footprint:
            shown += " of " + ", ".join(f"GPU{g} {gib(m)}"
                                        for g, m in sorted(self.footprint.items()))
        if self.stable >= self.settle:
            return GoalStatus(self.title, GoalState.MET, f"memory back: {shown}")
        return GoalStatus(self.title, GoalState.PENDING, f"loading: {shown}")


def respawned(before: Unit, now: Unit) -> bool:
    return now.main_pid not in (None, before.main_pid)


# --- a started model serves ------------------------------------------------------------


class UnitUp(Goal):
    """Active and running for ``settle`` samples in a row, never restarted meanwhile.

    A restart (NRestarts above where it started, or ``auto-restart``) or ``failed`` is a
    crash: it fails for good, so a crash loop is caught at its first turn, not after the
    timeout.
    """

    title = "unit up"

    def __init__(self, name: str, restarts_before: int | None, settle: int) -> None:
        self.name = name
        self.restarts_before = restarts_before or 0
        self.settle = settle
        self.stable = 0

    def check(self, snap: HostSnapshot, elapsed: float) -> GoalStatus:
        u = snap.unit(self.name)
        if u is None:
            self.stable = 0
            return GoalStatus(self.title, GoalState.PENDING, f"{self.name}: not reported yet")
        restarts = u.n_restarts or 0
        if restarts > self.restarts_before:
            return GoalStatus(self.title, GoalState.FAILED,
                              f"{u.name} crashed and systemd restarted it (NRestarts "
                              f"{self.restarts_before} -> {restarts})")
        if u.sub_state == "auto-restart":  # NRestarts grows when the restart happens
            return GoalStatus(self.title, GoalState.FAILED,
                              f"{u.name} exited and systemd will restart it "
                              f"(SubState=auto-restart, NRestarts={restarts})")
        if u.active_state == "failed":
            return GoalStatus(self.title, GoalState.FAILED, f"{u.name} failed ({u.sub_state})")
        up = u.active_state == "active" and u.sub_state in ("running", None)
        self.stable = self.stable + 1 if up else 0
        if self.stable >= self.settle:
            return GoalStatus(self.title, GoalState.MET)
        return GoalStatus(self.title, GoalState.PENDING,
                          f"{u.name} is {u.active_state}/{u.sub_state}")


def unit_memory(snap: HostSnapshot, unit: str) -> dict[int, int]:
    """GPU memory per GPU held by the processes of ``unit`` (N/A counts as nothing)."""
    out: dict[int, int] = {}
    for p in snap.processes:
        if p.unit == unit:
            for gpu, mib in p.gpu_memory_mib.items():
                out[gpu] = out.get(gpu, 0) + (mib or 0)
    return out


LOADED_MIN_MIB = 1024  # below this per GPU a server has a CUDA context, not a model


class MemoryLoaded(Goal):
    """The unit's GPU memory has reached its footprint (when learned) and holds steady.

    Steady: no GPU moved more than ``jitter`` (1 % of it, at least 256 MiB) for
    ``settle`` samples. Loading takes minutes on big models: this is waited for, with
    the per-GPU figures shown as they climb.
    """

    title = "memory loaded"

    def __init__(self, unit: str, footprint: Mapping[int, int], settle: int) -> None:
        self.unit = unit
        self.footprint = dict(footprint)
        self.settle = settle
        self.stable = 0
        self.last: dict[int, int] = {}
        self.now: dict[int, int] = {}

    def check(self, snap: HostSnapshot, elapsed: float) -> GoalStatus:
        now = unit_memory(snap, self.unit)
        moved = any(abs(now.get(g, 0) - self.last.get(g, 0)) > max(256, now.get(g, 0) // 100)
                    for g in set(now) | set(self.last))
        if self.footprint:
            reached = all(now.get(g, 0) >= 0.9 * mib for g, mib in self.footprint.items())
        else:  # nothing learned: every GPU it uses holds at least a loaded context
            reached = bool(now) and min(now.values()) >= LOADED_MIN_MIB
        self.stable = 0 if moved or not reached else self.stable + 1
        self.last, self.now = now, now
        shown = f"{gib(max(now.values()) if now else 0)} per GPU on {len(now)} GPU(s)"
        if self.footprint:
            shown += f" of {gib(max(self.footprint.values()))} learned"
        if self.stable >= self.settle:
            return GoalStatus(self.title, GoalState.MET, f"memory steady: {shown}")
        return GoalStatus(self.title, GoalState.PENDING, f"loading: {shown}")


class Ready(Goal):
    """The ready URL answers 200, asked on the host itself (servers listen on loopback)."""

    title = "ready"

    def __init__(self, url: str, timeout_s: float = 3.0,
                 owner: ListenerOwner | None = None) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.owner = owner  # only this unit's or container's own listener counts
        self.status: int | None = None
        self.error: str | None = "not asked yet"
        self.first_ok: float | None = None

    async def observe(self, control: HostControl) -> None:
        if Capability.HTTP_PROBE not in control.capabilities:
            self.status, self.error = None, "this host cannot be probed"
            return
        try:
            answer = await control.probe_http(self.url, self.timeout_s, self.owner)
        except ValueError as exc:  # refused before asking (not a loopback URL)
            self.status, self.error = None, str(exc)
            return
        self.status, self.error = answer.status, answer.error

    def check(self, snap: HostSnapshot, elapsed: float) -> GoalStatus:
        if self.status == 200:
            if self.first_ok is None:
                self.first_ok = elapsed
            return GoalStatus(self.title, GoalState.MET, f"{self.url} answers 200")
        said = self.error if self.status is None else f"HTTP {self.status}"
        return GoalStatus(self.title, GoalState.PENDING, f"{self.url}: {said}")
