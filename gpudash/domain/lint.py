"""The unit lint: what in a service's configuration sets the seed's trap, and the setting
that removes it.

The incident's cause was the service layer: ``Restart=always`` respawned the killed server,
``KillMode=process`` left its tensor-parallel workers alive after ``systemctl stop``. The
lint reads what ``systemctl show`` reported (never the unit files: drop-ins, templates and
defaults are systemd's to resolve) and says, per finding, why it matters and what
``gpudash fix`` would write in its drop-in.
"""

from __future__ import annotations

import math
import shlex
import time

from gpudash.domain.model import Container, Unit
from gpudash.record import record
from gpudash.serving.processes import server_process

# systemd's Restart= values that bring a dead main process back by themselves
RESTARTING = ("always", "on-failure", "on-abnormal", "on-abort", "on-watchdog")
# ... and those of them that leave a main process that exited 0 dead (systemd.service(5))
NOT_ON_CLEAN_EXIT = ("on-failure", "on-abnormal", "on-abort", "on-watchdog")
# What gpudash's drop-in sets for each finding. KillMode=mixed: the server gets SIGTERM
# and shuts its own workers down; whatever is left when TimeoutStopSec ends is SIGKILLed
# with the whole cgroup (control-group would SIGTERM the workers under the server's feet).
FIX_KILL_MODE = "mixed"
FIX_START_LIMIT_INTERVAL_S = 600  # at most FIX_START_LIMIT_BURST starts in 10 minutes
FIX_START_LIMIT_BURST = 5
FIX_RESTART_S = 10  # time for the driver to give the dead server's memory back
MIN_RESTART_S = 1.0
# A model server's stop: the engine drains, workers free their memory. Shorter than this
# and systemd SIGKILLs a server that was shutting down cleanly.
MIN_TIMEOUT_STOP_S = 30.0
FIX_TIMEOUT_STOP_S = 120
# Against a stop gpudash timed on this host (systemctl stop until the memory was back):
# half as long again, and at least 15 s more, in whole tens of seconds. A stop is not
# always as quick as the one that was seen.
STOP_MARGIN = 1.5
STOP_MARGIN_MIN_S = 15.0


def needed_timeout_stop(learned_stop_s: float) -> int:
    """The ``TimeoutStopSec`` (seconds) a unit whose stop took ``learned_stop_s`` needs."""
    need = max(learned_stop_s * STOP_MARGIN, learned_stop_s + STOP_MARGIN_MIN_S)
    return int(math.ceil(need / 10.0) * 10)


@record
class Learned:
    """What gpudash saw of a unit on this host when it acted on it, as its state store
    keeps it (``gpudash.state.footprints``; the caller reads it: the lint reads no file)."""

    stop_s: float | None = None  # its last stop: systemctl stop until its memory was back
    # the last time some of its processes ignored gpudash's SIGTERM (epoch seconds), and
    # how many did: gpudash waited its TERM timeout and sent SIGKILL
    term_ignored_at: float | None = None
    term_ignored: int = 0


@record
class Finding:
    """One setting that sets a trap: ``setting`` as systemd names it, ``why`` in words,
    ``fix``: the directives (section, key, value) gpudash's drop-in writes to remove it."""

    setting: str
    why: str
    fix: tuple[tuple[str, str, str], ...] = ()

    def as_dict(self) -> dict[str, object]:
        return {"setting": self.setting, "why": self.why,
                "fix": [f"[{section}] {key}={value}" for section, key, value in self.fix]}


def is_model_server(unit: Unit) -> bool:
    """The unit's ExecStart is a model server's (vLLM, SGLang, TGI, ...)."""
    return server_of(unit) is not None


def server_of(unit: Unit) -> str | None:
    """The model server the unit's ExecStart starts ("vLLM", "SGLang", ...), or None."""
    if not unit.exec_start:
        return None
    argv = unit.exec_start
    try:
        words = shlex.split(argv)
    except ValueError:
        words = argv.split()
    found = server_process(_shell_command(words) or argv)
    return found.server if found is not None else None


def _shell_command(words: list[str]) -> str | None:
    """The command string of ``sh -c '…'`` (bash, dash too), else None. systemctl show
    joins argv with spaces, quoting or not by version: the rest of the words, joined."""
    if len(words) >= 3 and words[0].rsplit("/", 1)[-1] in ("sh", "bash", "dash", "zsh") \
            and words[1] == "-c":
        return " ".join(words[2:])
    return None


def lint_unit(unit: Unit, *, holds_gpu_memory: bool = False,
              learned: Learned | None = None) -> tuple[Finding, ...]:
    """What in ``unit``'s configuration sets the trap; () for a unit that is neither a
    model server nor holds GPU memory (gpudash has no business with its settings).

    ``learned``: what gpudash timed and saw when it last stopped the unit on this host
    (how long until its memory was back; processes that ignored SIGTERM)."""
    if not (holds_gpu_memory or is_model_server(unit)):
        return ()
    learned = learned or Learned()
    out: list[Finding] = []
    kill_mode = (unit.kill_mode or "").lower()
    if kill_mode in ("process", "none"):
        out.append(Finding(
            f"KillMode={unit.kill_mode}",
            "systemctl stop (and a restart) signals only the main process: its workers "
            "outlive it and keep their GPU memory",
            (("Service", "KillMode", FIX_KILL_MODE),)))
    out += _sigterm_findings(unit, learned)
    out += _exit_zero_findings(unit)
    out += _restart_findings(unit)
    out += _timeout_stop_findings(unit, learned.stop_s)
    shell = _shell_without_exec(unit.exec_start)
    if shell:
        out.append(Finding(
            "ExecStart=" + shell,
            "the main process is the shell, not the server: SIGTERM and the MainPID reach "
            "the shell; start the server with `exec` (the unit's own file: gpudash does "
            "not rewrite ExecStart)"))
    return tuple(out)


def _sigterm_findings(unit: Unit, learned: Learned) -> list[Finding]:
    """What a stop does to processes that ignore SIGTERM: under ``KillMode=mixed`` or
    ``control-group`` systemd SIGKILLs them when ``TimeoutStopSec`` ends (mixed: at once
    once the server has exited), unless ``SendSIGKILL=no``: then never."""
    out: list[Finding] = []
    kill_mode = (unit.kill_mode or "").lower()
    ignored = learned.term_ignored_at is not None and learned.term_ignored > 0
    if (unit.send_sigkill or "").lower() == "no":
        out.append(Finding(
            "SendSIGKILL=no",
            "a process that ignores SIGTERM is never SIGKILLed: it outlives systemctl stop "
            "with its GPU memory" + (" (some of this unit's did, here)" if ignored else ""),
            (("Service", "SendSIGKILL", "yes"),)))
    if not ignored or kill_mode not in ("mixed", "control-group"):
        return out
    assert learned.term_ignored_at is not None
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(learned.term_ignored_at))
    seen = (f"{learned.term_ignored} of its processes ignored SIGTERM when gpudash stopped "
            f"them here ({when}; it sent SIGKILL)")
    limit = ("TimeoutStopSec=infinity: the stop never ends" if unit.timeout_stop_s is None
             else f"the stop lasts until TimeoutStopSec ({_secs(unit.timeout_stop_s)}) ends "
                  "and systemd SIGKILLs them, their GPU memory held all that time")
    how = ("only the server is sent SIGTERM; should it wait for those workers, "
           if kill_mode == "mixed" else "each is sent SIGTERM and ignores it: ")
    out.append(Finding(
        f"KillMode={unit.kill_mode}, workers ignore SIGTERM",
        f"{seen}: {how}{limit}; make the workers exit on SIGTERM (the server's own "
        "shutdown), or bound TimeoutStopSec"))
    return out


def _timeout_stop_findings(unit: Unit, learned_stop_s: float | None) -> list[Finding]:
    timeout = unit.timeout_stop_s
    if timeout is None:
        return []
    need = None if learned_stop_s is None else needed_timeout_stop(learned_stop_s)
    fix = (("Service", "TimeoutStopSec", f"{max(FIX_TIMEOUT_STOP_S, need or 0)}s"),)
    if need is not None and learned_stop_s is not None and timeout < need:
        return [Finding(
            f"TimeoutStopSec={_secs(timeout)}",
            f"its last stop here took {_secs(learned_stop_s)} until its GPU memory was back "
            f"(gpudash timed it; with a margin {_secs(need)}): systemd SIGKILLs it "
            "mid-shutdown", fix)]
    if timeout < MIN_TIMEOUT_STOP_S:
        return [Finding(
            f"TimeoutStopSec={_secs(timeout)}",
            f"a model server takes longer to shut down (under {_secs(MIN_TIMEOUT_STOP_S)}): "
            "systemd SIGKILLs it mid-shutdown", fix)]
    return []


# the restart policies under which the daemon brings a container back by itself, whatever
# state its server is in (on-failure gives up after its count, and only on a failure)
ALWAYS_POLICIES = ("always", "unless-stopped")


def lint_container(c: Container) -> tuple[Finding, ...]:
    """What in a container's configuration, as its runtime's inspect said it, sets the
    trap one layer up; each finding's remedy is in words (a container is re-created with
    other flags: gpudash writes nothing for it)."""
    if c.state == "removed":
        return ()
    out: list[Finding] = []
    policy = (c.restart_policy or "").lower()
    if policy in ALWAYS_POLICIES and c.health == "none":
        out.append(Finding(
            f"--restart {c.restart_policy} without a health check",
            f"{c.runtime} sees only whether PID 1 lives: a hung server (a stuck NCCL "
            "barrier, a dead engine) is never restarted, and one that crashes at start "
            "is restarted for ever, each time taking its GPU memory again; re-create it "
            "with --health-cmd (e.g. curl -f http://127.0.0.1:PORT/health), or "
            "--restart on-failure:5"))
    if c.init == "no":
        out.append(Finding(
            "no --init",
            "the server is PID 1 and does not reap: its dead workers stay zombies, and a "
            "SIGTERM it does not handle is ignored (stop waits, then SIGKILLs, leaving "
            "what it had not shut down); re-create it with --init"))
    if (c.pid_mode or "").lower() == "host":
        out.append(Finding(
            "--pid host",
            "it shares the host's PID namespace: a worker that escapes it looks like the "
            f"host's own process, and {c.runtime} stop does not end what was re-parented "
            "to the host's PID 1; re-create it without --pid host"))
    return tuple(out)


def _exit_zero_findings(unit: Unit) -> list[Finding]:
    """vLLM's API server exits 0 when its EngineCore dies (vllm-project/vllm#48966, fix
    PR #52178 open in 2026-12): systemd takes that for a clean stop, and a Restart= that
    skips clean exits leaves the server down. Restart=always brings it back; the start
    limit keeps that from being a crash loop for ever."""
    restart = (unit.restart or "").lower()
    if restart not in NOT_ON_CLEAN_EXIT or server_of(unit) != "vLLM":
        return []
    return [Finding(
        f"Restart={unit.restart}",
        "vLLM's API server exits 0 when its engine dies (vllm #48966): systemd sees a clean "
        "exit and never restarts it; Restart=always does, bounded by a start limit",
        (("Service", "Restart", "always"), *_start_limit_fix(unit)))]


def _start_limit_fix(unit: Unit) -> tuple[tuple[str, str, str], ...]:
    """gpudash's start limit: FIX_START_LIMIT_BURST starts within an interval that starts
    ``RestartSec`` apart do reach (else systemd would never stop a crash loop)."""
    delay = unit.restart_s or 0.0
    interval = max(FIX_START_LIMIT_INTERVAL_S,
                   int(math.ceil(2 * FIX_START_LIMIT_BURST * delay / 60.0)) * 60)
    return (("Unit", "StartLimitIntervalSec", f"{interval}s"),
            ("Unit", "StartLimitBurst", str(FIX_START_LIMIT_BURST)))


def _restart_findings(unit: Unit) -> list[Finding]:
    restart = (unit.restart or "").lower()
    if restart not in RESTARTING:
        return []
    out: list[Finding] = []
    interval, burst = unit.start_limit_interval_s, unit.start_limit_burst
    delay = unit.restart_s or 0.0
    if interval is not None and burst is not None:
        # systemd gives up after `burst` starts within `interval`: starts `delay` apart
        # never get there when burst × delay reaches the interval
        never = interval == 0 or burst == 0 or burst * delay >= interval
        if never:
            limit = ("no start limit (StartLimitIntervalSec=0)" if interval == 0 or burst == 0
                     else f"StartLimitBurst={burst} in StartLimitIntervalSec="
                          f"{_secs(interval)} is never reached with RestartSec={_secs(delay)}")
            out.append(Finding(
                f"Restart={unit.restart}",
                f"{limit}: a server that crashes at start is restarted for ever, each "
                "time taking its GPU memory again", _start_limit_fix(unit)))
    if unit.restart_s is not None and unit.restart_s < MIN_RESTART_S:
        out.append(Finding(
            f"RestartSec={_secs(unit.restart_s)}",
            "restarts before the driver has given the dead server's GPU memory back: the "
            "new server finds it taken",
            (("Service", "RestartSec", f"{FIX_RESTART_S}s"),)))
    return out


def _shell_without_exec(argv: str | None) -> str | None:
    """``/bin/sh -c 'python -m vllm …'`` (no ``exec``): the shortened ExecStart, else None."""
    if not argv:
        return None
    try:
        words = shlex.split(argv)
    except ValueError:
        return None
    command = _shell_command(words)
    if command is None or command.lstrip().startswith("exec "):
        return None
    shown = f"{words[0]} -c {command}"
    return shown if len(shown) <= 80 else shown[:77] + "..."


def _secs(seconds: float) -> str:
    return f"{seconds:g}s"
