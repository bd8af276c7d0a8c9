"""The steps of a plan, typed: a ``systemctl`` verb on a unit, a signal to a pinned
process, a container command, gpudash's own drop-in of a unit and the reload after it, an
owner kind's own command, a GPU reset, or a Slurm node's state."""

from __future__ import annotations

import signal as _signal

from gpudash.engine.target import Target
from gpudash.record import record


@record
class Systemctl:
    """``systemctl VERB UNIT`` on the host."""

    verb: str  # stop | disable | start | enable
    unit: str

    def describe(self, term_timeout: float) -> str:
        return f"systemctl {self.verb} {self.unit}"


@record
class Signal:
    """A signal to one process, sent only if it is still the one that was planned."""

    target: Target
    sig: int = _signal.SIGTERM
    escalate: bool = False  # TERM first, KILL after the timeout if still alive

    @property
    def name(self) -> str:
        return _signal.Signals(self.sig).name

    def describe(self, term_timeout: float) -> str:
        t = self.target
        text = (f"kill -{self.name.removeprefix('SIG')} {t.pid}  "
                f"(start {t.start_ticks}, {t.user or '?'}, {t.label})")
        if t.device_gpus:
            files = ", ".join(f"/dev/nvidia{g}" for g in t.device_gpus)
            text += f" [holds {files}; not listed by the driver]"
        if self.escalate:
            text += f"; -KILL after {term_timeout:g} s if alive"
        return text


@record
class ContainerCommand:
    """``docker VERB CONTAINER`` (or podman) on the host; the id travels, the name is shown."""

    runtime: str  # docker | podman
    verb: str  # stop | no-restart | rm | start | restart | restart-policy
    container: str  # the full id: names can be reused, ids cannot
    name: str  # for the operator
    stop_timeout: int = 10  # stop: seconds docker waits after SIGTERM before SIGKILL
    policy: str | None = None  # restart-policy: the one put back

    @property
    def unit(self) -> str:
        """What the command is about, as a unit command's ``unit`` is (for messages)."""
        return f"{self.runtime}:{self.name}"

    def describe(self, term_timeout: float) -> str:
        verb = {"stop": f"stop -t {self.stop_timeout}", "no-restart": "update --restart=no",
                "rm": "rm", "restart": f"restart -t {self.stop_timeout}",
                "restart-policy": f"update --restart={self.policy}"}.get(self.verb, self.verb)
        return f"{self.runtime} {verb} {self.name}  ({self.container[:12]})"


@record
class DropIn:
    """Write gpudash's drop-in of ``unit`` (``text``), or remove it (``text`` None).

    ``path`` is what the operator is shown; the host control builds the path it writes
    from the validated unit name again, never from this field."""

    unit: str
    path: str
    text: str | None

    @property
    def verb(self) -> str:
        return "write drop-in" if self.text is not None else "remove drop-in"

    def describe(self, term_timeout: float) -> str:
        if self.text is None:
            return f"rm {self.path}"
        return f"install -d {self.path.rsplit('/', 1)[0]} && tee {self.path}  (shown below)"


@record
class DaemonReload:
    """``systemctl daemon-reload``: systemd reads the unit files again (``unit``: the one
    whose properties are then read afresh)."""

    unit: str
    verb = "daemon-reload"

    def describe(self, term_timeout: float) -> str:
        return "systemctl daemon-reload"


@record
class OwnerCommand:
    """An owner kind's own command (a Slurm job's ``scancel``): ``argv`` as the operator is
    shown it; the host control builds it again from the kind, verb and key, never from
    this field."""

    kind: str
    verb: str  # the capability's value: stop
    key: str  # the claim's key: a job id
    argv: tuple[str, ...]

    @property
    def unit(self) -> str:
        """What the command is about, as a unit command's ``unit`` is (for messages)."""
        return f"{self.kind} {self.key}"

    def describe(self, term_timeout: float) -> str:
        return " ".join(self.argv)


@record
class GpuReset:
    """``nvidia-smi --gpu-reset -i INDEX``: the host control builds the argv again from the
    index; the UUID is for the record (indices can move across a reboot)."""

    gpu: int
    uuid: str | None = None
    verb = "gpu-reset"

    @property
    def unit(self) -> str:
        """What the command is about, as a unit command's ``unit`` is (for messages)."""
        return f"GPU {self.gpu}"

    @property
    def argv(self) -> tuple[str, ...]:
        return ("nvidia-smi", "--gpu-reset", "-i", str(self.gpu))

    def describe(self, term_timeout: float) -> str:
        return " ".join(self.argv) + (f"  ({self.uuid})" if self.uuid else "")


@record
class NodeCommand:
    """``scontrol update NodeName=NODE State=DRAIN Reason="..."`` (or ``State=RESUME``):
    the Slurm node's own state. The host control builds the argv again from the verb, the
    node and the reason (``gpudash.domain.owners.slurm_node``), never from ``argv``."""

    verb: str  # drain | resume
    node: str
    reason: str | None  # drain: exactly what Slurm is given; resume: None
    argv: tuple[str, ...]

    @property
    def unit(self) -> str:
        """What the command is about, as a unit command's ``unit`` is (for messages)."""
        return f"node {self.node}"

    def describe(self, term_timeout: float) -> str:
        return " ".join(self.argv)


Command = (Systemctl | ContainerCommand | DropIn | DaemonReload | OwnerCommand | GpuReset
           | NodeCommand)
Step = (Systemctl | ContainerCommand | DropIn | DaemonReload | OwnerCommand | GpuReset
        | NodeCommand | Signal)
