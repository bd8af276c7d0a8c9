"""The signals the operator may pick for one process, and what each usually does.

The list is htop's and nvitop's everyday few, not every number: what a model server, a
notebook kernel or a stuck worker is commonly sent. The pid guard is the same as for TERM
and KILL: the signal goes only to the process that was planned (pid + start time).
"""

from __future__ import annotations

import signal as _signal

from gpudash.record import record


@record
class Pickable:
    sig: int
    what: str  # what it usually does, for the picker
    ends: bool = True  # its default action ends the process (a handler may keep it)

    @property
    def name(self) -> str:
        return _signal.Signals(self.sig).name

    @property
    def short(self) -> str:
        return self.name.removeprefix("SIG")


PICKABLE: tuple[Pickable, ...] = (  # what each does in one line of the picker (80 columns)
    Pickable(_signal.SIGTERM, "ask it to exit (kill's default)"),
    Pickable(_signal.SIGINT, "interrupt, as Ctrl+C (Python: KeyboardInterrupt)"),
    Pickable(_signal.SIGHUP, "hang up: reloads if it handles it, else exits"),
    Pickable(_signal.SIGQUIT, "quit, with a core dump where enabled"),
    Pickable(_signal.SIGUSR1, "user-defined: what it handles it for, else exits"),
    Pickable(_signal.SIGUSR2, "user-defined: as USR1"),
    Pickable(_signal.SIGSTOP, "pause (cannot be caught); CONT resumes", ends=False),
    Pickable(_signal.SIGCONT, "resume a paused process", ends=False),
    Pickable(_signal.SIGKILL, "end at once (cannot be caught or ignored)"),
)
BY_NUMBER = {p.sig: p for p in PICKABLE}


def pickable(sig: int | None) -> Pickable | None:
    return BY_NUMBER.get(sig) if sig is not None else None
