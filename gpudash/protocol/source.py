"""What the dashboard, the CLI and the engine need from a host, wherever it is.

Three kinds of host implement this: the demo (simulated), local (this machine) and
remote (SSH). The UI and the engine see only these protocols.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from enum import StrEnum
from typing import Protocol, runtime_checkable

from gpudash.collector.host.ready import LOOPBACK_HOSTS
from gpudash.domain.model import HostSnapshot
from gpudash.record import record
from gpudash.serving.modelservers import ModelUnit

__all__ = [
    "LOOPBACK_HOSTS", "Capability", "CommandResult", "ConnectError", "HostControl",
    "HostKeyError", "HostSource", "HttpAnswer", "LinkLost", "LogLine", "ModelUnit", "ProtocolError",
    "SignalOutcome", "SourceError", "round_trip_s",
]


class SourceError(Exception):
    """A host could not be read. The message is shown to the operator as is."""


class ConnectError(SourceError):
    """The host cannot be reached or refused us (auth, host key, timeout)."""


class HostKeyError(ConnectError):
    """The host's key is unknown or changed: never connect silently."""


class LinkLost(SourceError):
    """An established link dropped; the source may be reconnected."""


class ProtocolError(SourceError):
    """The host sent something that is not a snapshot."""


class SignalOutcome(StrEnum):
    SENT = "sent"  # identity verified on the host, signal delivered
    GONE = "gone"  # no such process any more: nothing to do
    MISMATCH = "mismatch"  # pid now belongs to another process: refused
    DENIED = "denied"  # EPERM
    UNKNOWN = "unknown"  # the link dropped while asking: re-verify


@record
class CommandResult:
    """Outcome of a command run on the host (``systemctl stop X``)."""

    argv: tuple[str, ...]
    returncode: int | None  # None: outcome unknown (link lost)
    output: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class Capability(StrEnum):
    """What a host control can do beyond acting and sampling. A caller asks
    ``capabilities`` before calling the method named here; a control that lacks one
    may raise ``SourceError`` from that method."""

    JOURNAL = "journal"  # ``journal``: a unit's log, its tail and then live
    MODEL_UNITS = "model-units"  # ``model_units``: the model-server units installed
    HTTP_PROBE = "http-probe"  # ``probe_http``: a GET on the host's own loopback
    # (``LOOPBACK_HOSTS``: the host program's own list, the one it asks by)
    DROP_IN = "drop-in"  # ``unit_text``, ``drop_in``, ``daemon_reload``: gpudash fix
    CONTAINER_LOGS = "container-logs"  # ``container_logs``: ``docker logs``, then live
    CONTAINER_LOOKUP = "container-lookup"  # ``find_container``: a stopped one, by name
    OWNER_COMMANDS = "owner-commands"  # ``owner_command``: an owner kind's own (scancel)
    GPU_RESET = "gpu-reset"  # ``gpu_reset``: ``nvidia-smi --gpu-reset -i N``
    NODE_STATE = "node-state"  # ``node_state``: a Slurm node drained or resumed


@record
class ContainerOwner:
    """A container whose own listener alone proves its ready URL (its id, its runtime)."""

    id: str
    runtime: str  # docker | podman


# Whose listener a ready URL must come from: a unit's name, or a container.
ListenerOwner = str | ContainerOwner


@record
class HttpAnswer:
    """What a GET of a ready URL on the host got: a status, or the error instead."""

    url: str
    status: int | None = None
    error: str | None = None


@record
class LogLine:
    """One line of a unit's journal (host text: shown literally, never interpreted)."""

    message: str
    time: float | None = None
    unit: str | None = None
    cursor: str | None = None  # where to resume after it (journalctl --after-cursor)
    origin: str | None = None  # who logged it, as journalctl says: "systemd[1]", "python3[4711]"


@runtime_checkable
class HostControl(Protocol):
    """Acting on one host. Every method is safe to call with any validated input."""

    @property
    def capabilities(self) -> frozenset[Capability]:
        """The optional methods this host has (none unless a control says so)."""
        return frozenset()

    async def systemctl(self, verb: str, unit: str) -> CommandResult:
        """Run ``systemctl VERB UNIT`` (verb: stop, disable, start, enable)."""
        ...

    async def container(
        self, runtime: str, verb: str, container: str, stop_timeout: int = 10,
        policy: str | None = None,
    ) -> CommandResult:
        """Run ``docker|podman VERB CONTAINER`` (verb: stop, no-restart, rm, start,
        restart, restart-policy: ``update --restart=POLICY``)."""
        ...

    async def owner_command(self, kind: str, verb: str, key: str) -> CommandResult:
        """``Capability.OWNER_COMMANDS``: the command of owner kind ``kind`` that does
        ``verb`` (an ``OwnerCapability``'s value) to the owner ``key`` (a Slurm job's
        ``scancel JOBID``), as that kind's rules build and validate it."""
        ...

    async def node_state(self, verb: str, node: str, reason: str | None) -> CommandResult:
        """``Capability.NODE_STATE``: ``scontrol update NodeName=NODE State=DRAIN
        Reason="REASON"`` (``verb`` drain) or ``State=RESUME`` (``verb`` resume, no reason),
        as ``gpudash.domain.owners.slurm_node`` builds and checks it: argv, never a shell
        line, the reason one argument whatever it holds."""
        ...

    async def gpu_reset(self, gpu: int) -> CommandResult:
        """``Capability.GPU_RESET``: ``nvidia-smi --gpu-reset -i GPU`` (the driver refuses
        it while anything holds the GPU; the engine plans it only where nothing does)."""
        ...

    async def unit_text(self, unit: str) -> str:
        """``Capability.DROP_IN``: ``systemctl cat UNIT`` (host text); ``SourceError``
        when it cannot be read."""
        ...

    async def drop_in(self, unit: str, text: str | None) -> CommandResult:
        """``Capability.DROP_IN``: write gpudash's drop-in of ``unit`` (its path built
        here from the validated name), or remove exactly that file (``text`` None)."""
        ...

    async def daemon_reload(self, unit: str) -> CommandResult:
        """``Capability.DROP_IN``: ``systemctl daemon-reload``; ``unit``'s properties are
        read afresh in the next sample."""
        ...

    async def signal(
        self, pid: int, start_ticks: int | None, sig: int, *, boot_id: str | None = None
    ) -> SignalOutcome:
        """Send ``sig`` to ``pid`` only if its start time on the host is ``start_ticks``,
        and, given ``boot_id``, the host has not rebooted since (``MISMATCH`` otherwise)."""
        ...

    async def sample(self) -> HostSnapshot:
        """A fresh snapshot, taken now."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait on the host's clock (the demo's runs faster than real time)."""
        ...

    def clock(self) -> float:
        """Seconds on a monotonic clock that ``sleep`` waits on: every deadline of an
        action is measured on it (the demo's is its simulated time)."""
        return time.monotonic()

    def watch_unit(self, unit: str | None) -> None:
        """Report ``unit`` in every sample from now on, even while it has no processes,
        and re-read unit states now (None: only re-read). A host that reports every
        unit anyway does nothing."""
        ...

    def journal(self, unit: str, *, lines: int = 200, follow: bool = True,
                after: str | None = None) -> AsyncIterator[LogLine]:
        """``Capability.JOURNAL``: the unit's last ``lines`` (or, with ``after``, every
        line after that cursor), then (``follow``) each new one as it comes."""
        ...

    async def find_container(self, ref: str) -> tuple[str, str] | None:
        """``Capability.CONTAINER_LOOKUP``: (runtime, full id) of the container ``ref``
        (name or id) names on the host, reported in every sample from now on (a stopped
        one has no process to name it); None: no runtime there knows it."""
        ...

    def container_logs(self, runtime: str, container: str, *, lines: int = 200,
                       follow: bool = True) -> AsyncIterator[LogLine]:
        """``Capability.CONTAINER_LOGS``: the container's last ``lines`` (``docker logs
        --tail N --timestamps``), then (``follow``) each new one, as journal lines."""
        ...

    async def model_units(self, patterns: Sequence[str] = ()) -> tuple[ModelUnit, ...]:
        """``Capability.MODEL_UNITS``: every unit that runs a model server, running or
        not, or whose name matches one of ``patterns``."""
        ...

    async def probe_http(self, url: str, timeout_s: float,
                         owner: ListenerOwner | None = None) -> HttpAnswer:
        """``Capability.HTTP_PROBE``: GET ``url`` on the host's loopback (``ValueError``
        for any other URL): the status, or why there is none. Given ``owner`` (a unit or
        a container), the answer counts only from its own listener (a port another
        process binds proves nothing: the error says whose it is)."""
        ...


@runtime_checkable
class HostSource(Protocol):
    """A stream of snapshots from one host, plus the means to act on it."""

    name: str

    @property
    def route(self) -> str:
        """How gpudash reaches this host, in the words of the command line (never
        anything secret): shown when the host cannot be read."""
        ...

    @property
    def round_trip_s(self) -> float | None:
        """See ``round_trip_s``."""
        ...

    def stream(self, interval: float) -> AsyncIterator[HostSnapshot]:
        """Snapshots every ``interval`` seconds until closed. Raises ``SourceError``."""
        ...

    @property
    def control(self) -> HostControl:
        ...

    async def close(self) -> None:
        ...


def round_trip_s(source: HostSource) -> float | None:
    """The host's request round trip in seconds (writing a request to reading its
    answer, measured on the running stream about once a second), or None where it is
    not known: before the first answer, for the shell fallback, for the demo."""
    value = source.round_trip_s
    return value if isinstance(value, float) else None
