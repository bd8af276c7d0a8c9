"""A plan: exactly what will be sent, to whom, and what should come back.

A plan names the commands, the PIDs with their start times and the GiB expected back per
GPU, so the operator confirms facts, not intentions. It is built by an action's spec
(``gpudash.engine.actions``) from one snapshot; before it runs it is built again from a
fresh one and any difference is shown (``plan_changes``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from enum import StrEnum

from gpudash.domain.lint import Learned
from gpudash.domain.model import Container, Unit
from gpudash.domain.owners import OwnerRef
from gpudash.domain.units import gib, gib_number
from gpudash.engine.steps import (
    Command,
    ContainerCommand,
    DaemonReload,
    DropIn,
    GpuReset,
    NodeCommand,
    OwnerCommand,
    Signal,
    Step,
    Systemctl,
)
from gpudash.engine.target import Target
from gpudash.record import record


class ActionKind(StrEnum):
    STOP = "stop"
    DISABLE = "disable"
    STOP_DISABLE = "stop+disable"
    TERMINATE = "terminate"
    KILL = "kill"
    REAP = "reap"
    RECLAIM = "reclaim"
    START = "start"
    RESTART = "restart"
    ENABLE = "enable"
    SWAP = "swap"
    REMOVE = "remove"  # a stopped container: docker rm
    FIX = "fix"  # gpudash's drop-in of a unit: written (or, reverting, removed), reloaded
    SIGNAL = "signal"  # one signal the operator picked, to one pinned process
    GPU_RESET = "gpu-reset"  # nvidia-smi --gpu-reset of a GPU nothing holds
    DRAIN = "drain"  # a Slurm node: no new job starts there; the running ones finish
    RESUME = "resume"  # a drained Slurm node takes jobs again


STOPPING = frozenset({ActionKind.STOP, ActionKind.STOP_DISABLE, ActionKind.RECLAIM})
DISABLING = frozenset({ActionKind.DISABLE, ActionKind.STOP_DISABLE, ActionKind.RECLAIM})
STARTING = frozenset({ActionKind.START, ActionKind.RESTART, ActionKind.SWAP})
NODE_STATES = frozenset({ActionKind.DRAIN, ActionKind.RESUME})  # a Slurm node's own state
# they change a configuration or a state, and free no memory: no "Expected back" line
FREE_NOTHING = frozenset({ActionKind.FIX}) | NODE_STATES


COMMANDS = (Systemctl, ContainerCommand, DropIn, DaemonReload, OwnerCommand, GpuReset,
            NodeCommand)


ROLLBACK_HEADING = "if it does not serve:"  # a swap plan's last part: what puts it back


class PlanError(ValueError):
    """The action makes no sense for this selection; the message says why, in one line.
    ``lines``, where given, says it over several (a refused fit: the owners in the way,
    what is short, their processes), each one line of its own: the front ends show them
    so, never by splitting a message that may hold host text."""

    def __init__(self, message: str, lines: tuple[str, ...] = (), *,
                 forceable: bool = False) -> None:
        super().__init__(message)
        self.lines = lines or (message,)
        self.forceable = forceable  # a start that does not fit: the operator may force it


@record
class Selection:
    """What the operator pointed at (an owner, a process, or neither) and, for starting a
    model, what to start and how to know it serves."""

    # which owner, of whatever kind: (kind, key), as its kind's rules name it (a system
    # service by its unit, a container by its name or id, a pod by its UID, a Slurm job by
    # its id); the kind picks the action's planner (``ActionSpec.planners``)
    owner: OwnerRef | None = None
    pid: int | None = None
    target: str | None = None  # swap: the unit to start once ``owner`` is reclaimed
    enable: bool = False  # start/swap: also enable the started unit (boot)
    ready_url: str | None = None  # probed on the host; None: from the unit's port, if known
    footprint: Mapping[int, int] | None = None  # learned MiB per GPU of what is started
    force: bool = False  # start even where the fit check says it will not fit
    rollback: bool = True  # swap: start the old unit again if the new one does not serve
    revert: bool = False  # fix: remove gpudash's drop-in instead of writing it
    unit_text: str | None = None  # fix: ``systemctl cat UNIT`` as read before planning
    learned: Learned | None = None  # fix: what gpudash saw of its stops here (the lint)
    # a container's start: the restart policy to put back (what it had before gpudash
    # turned it off, from the audit); None: leave it as it is
    restart_policy: str | None = None
    signal: int | None = None  # signal: the one picked (``gpudash.engine.signals``)
    # reap of an owner's leftovers: its GPUs, where the caller knows them better than the
    # host's facts (a Slurm epilog's SLURM_JOB_GPUS); and whether what strays on them
    # outside any running job is signalled too (else only reported)
    gpus: tuple[int, ...] | None = None
    strays: bool = True
    # terminate / kill / a signal of the processes tagged (htop's Space): one plan signals
    # each, pinned; empty: ``pid`` alone
    pids: tuple[int, ...] = ()
    gpu: int | None = None  # a GPU reset: the GPU (its index)
    # a Slurm node's drain: the reason Slurm is given, exactly (the session makes it of the
    # operator's words and who they are: ``slurm_node.drain_reason``)
    reason: str | None = None


@record
class Serving:
    """What proves a started unit serves: active and steady, memory at its footprint, and
    its ready URL answering (each part that is known)."""

    unit: str
    ready_url: str | None = None
    footprint: Mapping[int, int] = field(default_factory=dict)  # learned; {}: unknown

    def describe(self) -> str:
        parts = [f"{self.unit} active, not restarting"]
        if self.footprint:
            per = max(self.footprint.values())
            parts.append(f"memory steady near its learned footprint (up to {gib(per)} per GPU)")
        else:
            parts.append("memory steady (footprint not learned yet on this host)")
        parts.append(f"{self.ready_url} answers 200" if self.ready_url else
                     "no ready URL known: not proven by a health check")
        return "Serving when: " + "; ".join(parts)


@record
class Phase:
    """Part of a plan with its own steps and its own proof (a swap has two)."""

    name: str  # "reclaim", "start", ...
    kind: ActionKind  # what this phase does, as a one-phase action of that kind would
    steps: tuple[Step, ...]
    serving: Serving | None = None  # this phase is proven when the unit serves

    @property
    def commands(self) -> tuple[Command, ...]:
        return tuple(s for s in self.steps if isinstance(s, COMMANDS))

    @property
    def signals(self) -> tuple[Signal, ...]:
        return tuple(s for s in self.steps if isinstance(s, Signal))


@record
class ActionPlan:
    kind: ActionKind
    title: str
    host: str
    subject: str  # the unit name or "pid N"
    selection: Selection  # what it was planned for, to plan it again
    steps: tuple[Step, ...] = ()
    expected_free_mib: Mapping[int, int] = field(default_factory=dict)  # per GPU
    used_before_mib: Mapping[int, int | None] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    untouched: tuple[Target, ...] = ()  # other holders the plan leaves alone, for the record
    unit_before: Unit | None = None
    container_before: Container | None = None  # the container acted on, as planned
    simulated: bool = False  # planned on the demo host: nothing real is touched
    phases: tuple[Phase, ...] = ()  # (): one phase, ``steps``, proven by the kind's goals
    fit: tuple[str, ...] = ()  # how what is started fits beside what stays (swap)
    preview: tuple[str, ...] = ()  # fix: the unified diff of the unit's configuration
    settings: tuple[tuple[str, str, str], ...] = ()  # fix: the drop-in's directives
    rollback: Phase | None = None  # swap: run when the new unit does not serve

    @property
    def run_phases(self) -> tuple[Phase, ...]:
        """The phases to run, in order (one for the actions that have no others)."""
        return self.phases or (Phase(self.kind.value, self.kind, self.steps),)

    @property
    def commands(self) -> tuple[Command, ...]:
        return tuple(s for s in self.steps if isinstance(s, COMMANDS))

    @property
    def signals(self) -> tuple[Signal, ...]:
        return tuple(s for s in self.steps if isinstance(s, Signal))

    @property
    def targets(self) -> tuple[Target, ...]:
        return tuple(s.target for s in self.signals)

    @property
    def expected_free_total_mib(self) -> int:
        return sum(self.expected_free_mib.values())

    def target_used_mib(self) -> dict[int, int]:
        """The used memory per GPU that proves the action worked."""
        out: dict[int, int] = {}
        for gpu, before in self.used_before_mib.items():
            if before is not None and self.expected_free_mib.get(gpu):
                out[gpu] = max(0, before - self.expected_free_mib[gpu])
        return out

    def describe(self, term_timeout: float = 10.0) -> list[str]:
        """The plan as lines of plain text, for a confirmation dialog or a terminal."""
        lines = [f"{self.title}  on {self.host}"]
        numbered = len(self.phases) > 1
        for i, phase in enumerate(self.run_phases, 1):
            indent = "    " if numbered else "  "
            if numbered:
                lines.append(f"  {i}. {phase.name}")
            lines += [f"{indent}$ {s.describe(term_timeout)}" for s in phase.steps]
            if phase.serving is not None:
                lines.append(f"{indent}{phase.serving.describe()}")
        if self.rollback is not None:
            lines.append(f"  {ROLLBACK_HEADING} {self.rollback.name}, the old one again")
            lines += [f"    $ {s.describe(term_timeout)}" for s in self.rollback.steps]
        if not self.steps and not self.phases:
            lines.append("  (nothing to send)")
        if self.kind in FREE_NOTHING:
            pass  # a configuration or a node's state changed frees nothing: no such line
        elif self.kind is ActionKind.SIGNAL:
            held = sum(m for t in self.targets for m in t.gpu_memory_mib.values() if m)
            lines.append("  Expected: delivered; what it does then is up to the process "
                         f"({gib(held)} of GPU memory comes back only if it exits)")
        elif self.kind in STARTING and not self.expected_free_mib:
            pass  # starting frees nothing: no "Expected back" line
        elif self.expected_free_mib:
            per = ", ".join(
                f"GPU{g} {gib_number(m)}" for g, m in sorted(self.expected_free_mib.items()) if m
            )
            lines.append(f"  Expected back: {gib(self.expected_free_total_mib)} ({per} GiB)")
        else:
            lines.append("  Expected back: no GPU memory")
        lines += [f"  Fit: {f}" for f in self.fit]
        lines += [f"  | {line}" for line in self.preview]
        lines += [f"  ! {n}" for n in self.notes]
        if self.untouched:
            shown = self.untouched[:4]
            people = ", ".join(f"{t.pid} ({t.user or '?'}, {t.label})" for t in shown)
            more = len(self.untouched) - len(shown)
            lines.append(f"  Left alone: {people}" + (f" and {more} more" if more else ""))
        return lines


CHANGE_SLACK_MIB = 512  # expected-back differences below this are driver noise, not news


def plan_changes(old: ActionPlan, new: ActionPlan) -> list[str]:
    """The differences between two plans of one action that the operator must see."""
    out: list[str] = []
    old_t = {t.identity: t for t in old.targets}
    new_t = {t.identity: t for t in new.targets}
    gone = [t for key, t in old_t.items() if key not in new_t]
    added = [t for key, t in new_t.items() if key not in old_t]
    if gone:
        out.append("no longer signalled (exited or changed): "
                   + ", ".join(f"{t.pid} ({t.label})" for t in gone))
    if added:
        out.append("newly signalled: " + ", ".join(f"{t.pid} ({t.label})" for t in added))
    if old.commands != new.commands:
        out.append("commands changed: "
                   + ("; ".join(s.describe(0) for s in new.commands) or "none"))
    if abs(new.expected_free_total_mib - old.expected_free_total_mib) > CHANGE_SLACK_MIB:
        out.append(f"expected back: {gib(old.expected_free_total_mib)} -> "
                   f"{gib(new.expected_free_total_mib)}")
    out += [f"new warning: {n}" for n in new.notes if n not in old.notes]
    return out
