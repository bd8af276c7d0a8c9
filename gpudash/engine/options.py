"""How an action is carried out: its timings, and when a lost outcome is looked at again."""

from __future__ import annotations

from collections.abc import Callable

from gpudash.engine.report import Progress
from gpudash.record import record


@record
class ExecOptions:
    term_timeout: float = 10.0  # seconds between TERM and KILL
    verify_timeout: float = 60.0  # give up following memory after this
    poll: float = 0.5
    settle: int = 3  # consecutive samples at target that count as confirmed
    slack_mib: int = 64  # driver bookkeeping noise tolerated above target
    # after signalling a unit's main, watch this long for a respawn; after a picked signal,
    # for what the process did with it
    respawn_watch: float = 5.0
    serve_timeout: float = 1800.0  # a started model has this long to serve (big ones: 10+ min)
    stop_crash_loop: bool = True  # a started unit that crash-loops is stopped


ProgressFn = Callable[[Progress], None]


@record
class ReverifyPolicy:
    """When an outcome a lost link left unknown is looked at again — never re-sent.

    The CLI waits ``delay(n)`` before its n-th look; the dashboard looks when the host's
    samples flow again. Both give up after ``attempts`` and leave it to the log."""

    attempts: int = 3
    first_delay_s: float = 1.0
    max_delay_s: float = 8.0

    def delay(self, attempt: int) -> float:
        return float(min(self.max_delay_s, self.first_delay_s * 2.0 ** (attempt - 1)))


REVERIFY = ReverifyPolicy()
