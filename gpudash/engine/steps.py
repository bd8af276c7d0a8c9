"""The steps of a plan, typed: a ``systemctl`` verb on a unit, or a signal to a pinned process."""

from __future__ import annotations

import signal as _signal
from dataclasses import dataclass

from gpudash.engine.target import Target


@dataclass(frozen=True, slots=True)
class Systemctl:
    """``systemctl VERB UNIT`` on the host."""

    verb: str  # stop | disable | start | enable
    unit: str

    def describe(self, term_timeout: float) -> str:
        return f"systemctl {self.verb} {self.unit}"


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class ContainerCommand:
    """``docker VERB CONTAINER`` (or podman) on the host; the id travels, the name is shown."""

    runtime: str  # docker | podman
    verb: str  # stop | no-restart | rm
    container: str  # the full id: names can be reused, ids cannot
    name: str  # for the operator
    stop_timeout: int = 10  # stop: seconds docker waits after SIGTERM before SIGKILL

    @property
    def unit(self) -> str:
        """What the command is about, as a unit command's ``unit`` is (for messages)."""
        return f"{self.runtime}:{self.name}"

    def describe(self, term_timeout: float) -> str:
        verb = {"stop": f"stop -t {self.stop_timeout}", "no-restart": "update --restart=no",
                "rm": "rm"}.get(self.verb, self.verb)
        return f"{self.runtime} {verb} {self.name}  ({self.container[:12]})"


Command = Systemctl | ContainerCommand
Step = Systemctl | ContainerCommand | Signal
