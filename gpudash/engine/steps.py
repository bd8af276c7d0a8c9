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


Step = Systemctl | Signal
