"""What an action did and what came of it: live progress, and the report at the end.

The report is filled in as the action runs (every command and signal the moment it is
sent), so whatever stops an action — a lost link, Ctrl+C, the operator quitting — leaves a
truthful record of what reached the host.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import field

from gpudash.domain.model import Container, Unit
from gpudash.domain.units import gib
from gpudash.engine.plan import ActionPlan
from gpudash.engine.series import MemorySeries
from gpudash.protocol.source import CommandResult, SignalOutcome
from gpudash.record import record

# A signal in these states reached the host or may have: only GONE/MISMATCH/DENIED did not.
MAY_HAVE_SENT = frozenset({SignalOutcome.SENT, SignalOutcome.UNKNOWN})


@record
class Progress:
    """What the engine is doing now, and where each GPU's memory stands (every sample)."""

    phase: str  # commands | signals | waiting | verifying | done
    message: str
    used_mib: Mapping[int, int | None]
    target_mib: Mapping[int, int]
    stable: Mapping[int, int]  # consecutive samples at target, per GPU
    alive_pids: tuple[int, ...] = ()  # planned processes still alive at the last sample
    term_left_s: float | None = None  # while waiting after TERM: seconds until KILL
    escalated: tuple[int, ...] = ()  # pids that ignored TERM and were sent KILL
    step: str = ""  # the plan's phase running now ("reclaim", "start"), for multi-phase plans
    loading: tuple[str, ...] = ()  # while a started unit loads: its goals' state, log progress
    log_tail: tuple[str, ...] = ()  # the started unit's latest journal lines (host text)
    taken_at: float | None = None  # host time of the sample ``used_mib`` is from (None: plan)


@record
class GpuOutcome:
    index: int
    before_mib: int | None
    target_mib: int
    after_mib: int | None
    confirmed: bool

    @property
    def freed_mib(self) -> int | None:
        if self.before_mib is None or self.after_mib is None:
            return None
        return self.before_mib - self.after_mib


@record
class Leftover:
    """Something that still holds memory the plan expected back, and why."""

    pid: int | None
    gpu: int | None  # None: a planned process still alive, on no GPU in particular
    mib: int | None
    reason: str  # alive | D state | zombie | respawned | unknown holder | not signalled ...
    detail: str = ""

    @property
    def where(self) -> str:
        return "no GPU named" if self.gpu is None else f"GPU{self.gpu}"

    def describe(self) -> str:
        who = "unknown holder" if self.pid is None else f"pid {self.pid}"
        mib = "?" if self.mib is None else gib(self.mib)
        return f"{self.where} {mib} held by {who}: {self.reason} {self.detail}".rstrip()


@record
class PhaseOutcome:
    name: str
    confirmed: bool
    summary: str
    seconds: float


@record(frozen=False)
class ServingOutcome:
    """How a started unit came up: serving, or why not (the log line that says it)."""

    unit: str
    serving: bool = False
    ready_url: str | None = None
    ready_status: int | None = None
    ready_error: str | None = None  # why there was no status (host text: "connection refused")
    ready_s: float | None = None  # from start to serving

    @property
    def ready_answer(self) -> str:
        """What the ready URL answered, in words: its status, or why it gave none."""
        if self.ready_status is not None:
            return str(self.ready_status)
        return f"no answer: {self.ready_error}" if self.ready_error else "no answer"
    mib_per_gpu: dict[int, int] = field(default_factory=dict)  # at serving: the footprint
    failure_line: str | None = None  # host text, as the journal had it
    failure_advice: str | None = None
    stopped: bool = False  # it crash-looped and gpudash stopped it
    log_tail: tuple[str, ...] = ()
    container: bool = False  # a container started: running, and ready where it has a URL


@record(frozen=False)
class ActionReport:
    plan: ActionPlan
    events: list[tuple[float, str]] = field(default_factory=list)
    commands: list[CommandResult] = field(default_factory=list)
    signals: list[tuple[int, str, SignalOutcome]] = field(default_factory=list)
    escalated: list[int] = field(default_factory=list)  # pids that ignored TERM and got KILL
    term_timeout: float = 10.0  # what the execution used, for describing the plan afterwards
    gpus: list[GpuOutcome] = field(default_factory=list)
    leftovers: list[Leftover] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # true, done, yet worth acting on
    rollback: ServingOutcome | None = None  # a failed swap's old unit, started again
    boots: dict[str, str] = field(default_factory=dict)  # after a rollback: unit -> enablement
    unit_after: Unit | None = None  # the unit as the last sample showed it
    container_after: Container | None = None  # the container, likewise
    confirmed: bool = False
    unknown: bool = False  # the link dropped: the outcome must be re-verified
    reverified: bool = False  # this report comes from reverify(), after a link loss
    interrupted: bool = False  # stopped by the operator (Ctrl+C, quit) before it ended
    phases: list[PhaseOutcome] = field(default_factory=list)  # multi-phase plans, in order
    serving: ServingOutcome | None = None  # a start, restart or swap: how the unit came up
    memory: MemorySeries = field(default_factory=MemorySeries)  # each GPU's, every sample
    stop_s: float | None = None  # a unit's stop: systemctl stop until its memory was back
    summary: str = ""
    sent_order: list[str] = field(default_factory=list, repr=False)  # "command"/"signal"

    def record_command(self, result: CommandResult) -> None:
        self.commands.append(result)
        self.sent_order.append("command")

    def record_signal(self, pid: int, name: str, outcome: SignalOutcome) -> None:
        self.signals.append((pid, name, outcome))
        self.sent_order.append("signal")

    def keep_sent(self, earlier: ActionReport) -> None:
        """A re-verification's report (it sends nothing) takes over what ``earlier``, the
        run whose outcome it re-verifies, sent: one report still says all that went out."""
        self.commands[:0] = earlier.commands
        self.signals[:0] = earlier.signals
        self.sent_order[:0] = earlier.sent_order
        self.escalated[:0] = earlier.escalated

    def log(self, text: str) -> None:
        self.events.append((time.time(), text))

    @property
    def sent_anything(self) -> bool:
        """Something reached the host, or may have (a request interrupted or cut off
        before its answer)."""
        return bool(self.commands) or any(o in MAY_HAVE_SENT for _p, _s, o in self.signals)

    @property
    def verdict(self) -> str:
        """``confirmed`` | ``warning`` (confirmed, with something left to do) | ``failed``
        | ``unknown`` | ``interrupted``."""
        if self.interrupted:
            return "interrupted"
        if self.unknown:
            return "unknown"
        if not self.confirmed:
            return "failed"
        return "warning" if self.warnings else "confirmed"

    def sent_lines(self) -> list[str]:
        """What reached the host (or may have), commands and signals in the order sent."""
        order = self.sent_order
        if len(order) != len(self.commands) + len(self.signals):  # lists filled by hand
            order = ["command"] * len(self.commands) + ["signal"] * len(self.signals)
        commands, signals = iter(self.commands), iter(self.signals)
        lines = []
        for kind in order:
            if kind == "command":
                c = next(commands)
                rc = "no answer" if c.returncode is None else f"exit {c.returncode}"
                lines.append(f"{' '.join(c.argv)}: {rc}")
            else:
                pid, sig, outcome = next(signals)
                lines.append(f"{sig} {pid}: {outcome.value}")
        return lines

    @property
    def exit_status(self) -> int:
        """The command line's exit code for this verdict (gpudash.cli.contract.Exit)."""
        if self.interrupted:
            return 6 if self.sent_anything else 5
        if self.unknown:
            return 4
        return 0 if self.confirmed else 1

    def describe(self) -> list[str]:
        """The report as lines of plain text (host text still to be escaped by the printer)."""
        lines = [f"{self.plan.title} on {self.plan.host}: {self.summary}"]
        u = self.unit_after
        if u is not None:
            lines.append(f"  {unit_state(u)}")
        if self.container_after is not None:
            lines.append(f"  {container_state(self.container_after)}")
        for g in self.gpus:
            freed = "N/A" if g.freed_mib is None else gib(g.freed_mib)
            mark = "ok" if g.confirmed else "NOT FREED"
            lines.append(f"  GPU{g.index}: freed {freed}, now {gib(g.after_mib)} "
                         f"(target <= {gib(g.target_mib)})  {mark}")
        for pid in self.escalated:
            lines.append(f"  pid {pid} ignored SIGTERM: escalated to SIGKILL")
        for lo in self.leftovers:
            lines.append(f"  still held: {lo.describe()}")
        lines += [f"  ! {w}" for w in self.warnings]
        if len(self.phases) > 1:
            lines += [f"  phase {ph.name}: {'ok' if ph.confirmed else 'NOT confirmed'} in "
                      f"{ph.seconds:.0f} s: {ph.summary}" for ph in self.phases]
        if self.serving is not None:
            lines += serving_lines(self.serving)
        back = self.rollback
        if back is not None:
            lines.append(f"  rollback: {back.unit} "
                         + ("SERVING again" if back.serving else "NOT serving either")
                         + (f"; {back.ready_url} -> {back.ready_answer}" if back.ready_url
                            else ""))
        if self.boots:  # what starts at the next boot, as the host said after the rollback
            lines.append("  boots: " + ", ".join(f"{u} {state}"
                                                 for u, state in self.boots.items()))
        if (self.interrupted or self.unknown) and "sent:" not in self.summary:
            sent = self.sent_lines()  # (an interruption's summary says it already)
            lines.append("  sent: " + ("; ".join(sent) if sent else "nothing"))
        return lines


def serving_lines(sv: ServingOutcome) -> list[str]:
    """How a started unit came up, as the report says it."""
    if sv.container:
        up = "READY" if sv.ready_url else "RUNNING"  # READY: its URL answered 200
        state = f"{up}, memory back" if sv.serving else "NOT running"
    else:
        state = "SERVING" if sv.serving else "NOT serving"
    ready = "" if sv.ready_s is None else f" after {sv.ready_s:.0f} s"
    lines = [f"  {sv.unit}: {state}{ready}"
             + (f"; {sv.ready_url} -> {sv.ready_answer}" if sv.ready_url else "")]
    if sv.mib_per_gpu:
        lines.append("  footprint: " + ", ".join(
            f"GPU{g} {gib(m)}" for g, m in sorted(sv.mib_per_gpu.items())))
    if sv.failure_line:
        lines += [f"  log: {sv.failure_line}", f"  -> {sv.failure_advice}"]
    if sv.stopped:
        lines.append(f"  {sv.unit} was stopped: it was crash-looping")
    return lines


def unit_state(u: Unit) -> str:
    """``x.service: inactive (dead), disabled, Restart=always, NRestarts 1``."""
    parts = [f"{u.active_state or 'N/A'} ({u.sub_state or 'N/A'})"]
    if u.unit_file_state:
        parts.append(u.unit_file_state)
    if u.restart:
        parts.append(f"Restart={u.restart}")
    if u.n_restarts:
        parts.append(f"NRestarts {u.n_restarts}")
    return f"{u.name}: " + ", ".join(parts)


def container_state(c: Container) -> str:
    """``docker container vllm: exited, restart policy no, RestartCount 1``."""
    parts = [c.state or "N/A"]
    if c.restart_policy:
        parts.append(f"restart policy {c.restart_policy}")
    if c.restart_count:
        parts.append(f"RestartCount {c.restart_count}")
    return f"{c.runtime} container {c.label}: " + ", ".join(parts)
