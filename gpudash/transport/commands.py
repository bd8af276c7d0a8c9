"""Checking every argument before any command that acts on a host is built."""

from __future__ import annotations

import re
import signal

from gpudash.collector.host.protocol import MAX_GPUS
from gpudash.domain.dropin import drop_in_dir, drop_in_path
from gpudash.domain.model import UNIT_SUFFIXES
from gpudash.domain.owners import OwnerCapability, rules_of

SYSTEMCTL_VERBS = frozenset({"stop", "disable", "start", "enable"})
_UNIT_NAME = re.compile(r"[A-Za-z0-9:_.\\@-]{1,250}\.([a-z]+)")
_SIGNALS = frozenset(int(s) for s in signal.Signals)


def validate_unit(unit: str) -> str:
    """A systemd unit name with a known suffix, or ``ValueError``.

    Names come from hosts (untrusted) and from operators; neither may smuggle in an
    option (``--now``) or a shell word.
    """
    # fullmatch: with match and `$`, "x.service\n" would pass (`$` matches before a
    # final newline)
    match = _UNIT_NAME.fullmatch(unit) if isinstance(unit, str) else None
    if match is None or unit.startswith("-") or match.group(1) not in UNIT_SUFFIXES:
        raise ValueError(f"not a systemd unit name: {unit!r}")
    return unit


def validate_verb(verb: str) -> str:
    if verb not in SYSTEMCTL_VERBS:
        raise ValueError(f"systemctl verb not allowed: {verb!r}")
    return verb


def validate_pid(pid: int) -> int:
    if isinstance(pid, bool) or not isinstance(pid, int) or not 1 < pid < 2**22 + 1:
        raise ValueError(f"not a process id that may be signalled: {pid!r}")
    return pid


def validate_signal(sig: int) -> int:
    if isinstance(sig, bool) or not isinstance(sig, int) or sig not in _SIGNALS:
        raise ValueError(f"not a signal number: {sig!r}")
    return sig


CONTAINER_VERBS = {  # verb -> the runtime's arguments before the container
    "stop": ("stop", "-t", "{timeout}"),
    "no-restart": ("update", "--restart=no"),
    "rm": ("rm",),
    "start": ("start",),
    "restart": ("restart", "-t", "{timeout}"),
    "restart-policy": ("update", "--restart={policy}"),  # put back as it was before
}
# Docker's restart policies (``on-failure`` with its optional retry count)
_RESTART_POLICY = re.compile(r"(no|always|unless-stopped|on-failure(:[0-9]{1,4})?)")


def validate_policy(policy: str) -> str:
    """A Docker restart policy, or ``ValueError``: the only text put after ``--restart=``."""
    if not isinstance(policy, str) or _RESTART_POLICY.fullmatch(policy) is None:
        raise ValueError(f"not a restart policy: {policy!r}")
    return policy
CONTAINER_RUNTIMES = frozenset({"docker", "podman"})
# Docker's and Podman's own rule for names ([a-zA-Z0-9][a-zA-Z0-9_.-]*), or a hex id
_CONTAINER_REF = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,253}")


def validate_container(ref: str) -> str:
    """A container name or id, or ``ValueError``: no option, no shell word, no path."""
    if not isinstance(ref, str) or _CONTAINER_REF.fullmatch(ref) is None:
        raise ValueError(f"not a container name or id: {ref!r}")
    return ref


def container_argv(runtime: str, verb: str, ref: str, *, sudo: bool,
                   stop_timeout: int = 10, policy: str | None = None) -> list[str]:
    """``[sudo -n] docker|podman VERB... -- CONTAINER`` after validating every part."""
    if runtime not in CONTAINER_RUNTIMES:
        raise ValueError(f"container runtime not allowed: {runtime!r}")
    if verb not in CONTAINER_VERBS:
        raise ValueError(f"container verb not allowed: {verb!r}")
    if isinstance(stop_timeout, bool) or not isinstance(stop_timeout, int) or not (
        0 <= stop_timeout <= 3600
    ):
        raise ValueError(f"stop timeout out of range: {stop_timeout!r}")
    if runtime == "podman" and verb in ("no-restart", "restart-policy"):
        raise ValueError("podman: changing a restart policy is not supported")
    if verb == "restart-policy":
        policy = validate_policy(policy or "")
    words = [w.format(timeout=stop_timeout, policy=policy) for w in CONTAINER_VERBS[verb]]
    argv = [runtime, *words, "--", validate_container(ref)]
    return ["sudo", "-n", *argv] if sudo else argv


def container_logs_argv(runtime: str, ref: str, *, lines: int, follow: bool) -> list[str]:
    """``docker|podman logs [--follow] --tail N --timestamps -- CONTAINER`` (no sudo: it
    is run as the collector runs, as root where the host's collector is)."""
    if runtime not in CONTAINER_RUNTIMES:
        raise ValueError(f"container runtime not allowed: {runtime!r}")
    if isinstance(lines, bool) or not isinstance(lines, int):
        raise ValueError(f"not a line count: {lines!r}")
    argv = [runtime, "logs", *(["--follow"] if follow else []),
            "--tail", str(min(max(lines, 0), 10000)), "--timestamps", "--",
            validate_container(ref)]
    return argv


def systemctl_argv(verb: str, unit: str, *, sudo: bool) -> list[str]:
    """``[sudo -n] systemctl VERB -- UNIT`` after validating both."""
    argv = ["systemctl", validate_verb(verb), "--", validate_unit(unit)]
    return ["sudo", "-n", *argv] if sudo else argv


def _service(unit: str) -> str:
    unit = validate_unit(unit)
    if not unit.endswith(".service"):
        raise ValueError(f"gpudash writes drop-ins of services only, not {unit!r}")
    return unit


def drop_in_argvs(unit: str, writing: bool, *, sudo: bool) -> list[list[str]]:
    """The commands that write gpudash's drop-in of ``unit`` (its text on the last one's
    stdin: ``install -d DIR``, ``tee PATH``) or remove exactly that file; no shell, the
    path built here from the validated name."""
    unit = _service(unit)
    path = drop_in_path(unit)
    if writing:
        argvs = [["install", "-d", "-m", "0755", "--", drop_in_dir(unit)],
                 ["tee", "--", path]]
    else:
        argvs = [["rm", "-f", "--", path]]
    return [["sudo", "-n", *a] if sudo else a for a in argvs]


def daemon_reload_argv(*, sudo: bool) -> list[str]:
    argv = ["systemctl", "daemon-reload"]
    return ["sudo", "-n", *argv] if sudo else argv


def cat_argv(unit: str) -> list[str]:
    """``systemctl cat -- UNIT``: reading needs no root (unit files are world-readable)."""
    return ["systemctl", "--no-pager", "cat", "--", _service(unit)]


def gpu_reset_argv(gpu: int, *, sudo: bool) -> list[str]:
    """``[sudo -n] nvidia-smi --gpu-reset -i GPU``: the index checked to be one."""
    if type(gpu) is not int or not 0 <= gpu < MAX_GPUS:
        raise ValueError(f"not a GPU index: {gpu!r}")
    return [*(["sudo", "-n"] if sudo else []), "nvidia-smi", "--gpu-reset", "-i", str(gpu)]


def owner_argv(kind: str, verb: str, key: str) -> tuple[str, ...] | None:
    """The command of owner kind ``kind`` doing ``verb`` to ``key``, as its rules build and
    validate it (``scancel JOBID``); None where the kind has none."""
    rules = rules_of(kind)
    try:
        capability = OwnerCapability(verb)
    except ValueError:
        return None
    return None if rules is None else rules.command(capability, key)
