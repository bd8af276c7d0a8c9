"""Ending when told from outside: SIGTERM, SIGHUP, or the terminal gone. Bounded.

Nobody is there to ask, so the front end quits as "Quit now" does (the action in flight
is stopped and audited). These handlers are plain ``signal.signal`` handlers, not the
event loop's: they run even while the loop is stuck, so that

- the first signal (or loss) asks the loop to quit and starts a deadline: a teardown
  that has not ended by then (a terminal that will never take its last bytes, a link
  that does not close) ends the process;
- a second signal ends it at once.

No Textual here: the app passes what to do.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

log = logging.getLogger("gpudash.ui.stopping")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
# From the first signal to the end of the process, whatever the teardown is waiting for
# (docs/GUIDE.md promises a few seconds; the tests allow 5).
DEADLINE_S = 4.0


class OutsideStop:
    """Signal handlers and a deadline for one run of a front end.

    ``quit`` runs in the event loop (``loop``) when a stop is asked; ``exit_code`` says
    the status a forced end uses (it may be asked from any thread).
    """

    def __init__(self, exit_code: Callable[[], int], deadline_s: float = DEADLINE_S) -> None:
        self.exit_code = exit_code
        self.deadline_s = deadline_s
        self.reason: str | None = None  # why it was told to stop (None: it was not)
        self._signalled = False  # a signal came: the next one ends the process at once
        self._loop: asyncio.AbstractEventLoop | None = None
        self._quit: Callable[[str], None] | None = None
        self._at_once: Callable[[], None] | None = None
        self._previous: dict[int, Any] = {}
        self._lock = threading.Lock()

    def install(
        self, loop: asyncio.AbstractEventLoop, quit: Callable[[str], None],
        at_once: Callable[[], None] | None = None,
    ) -> None:
        """Catch the stop signals from now on (main thread only; elsewhere, nothing).

        ``at_once`` runs where the stop is asked (a signal handler, another thread), before
        the loop hears of it: it may only set flags (the loop may be stuck waiting on one).
        """
        self._loop, self._quit, self._at_once = loop, quit, at_once
        if self.reason is not None:  # asked before there was a loop to tell
            loop.call_soon(quit, self.reason)
        for sig in STOP_SIGNALS:
            try:
                self._previous[sig] = signal.signal(sig, self._on_signal)
            except ValueError:  # not the main thread (an embedding test): leave them be
                return

    def uninstall(self) -> None:
        """Give the signals back (the deadline, once started, keeps running)."""
        for sig, handler in self._previous.items():
            try:
                signal.signal(sig, handler)
            except (ValueError, TypeError):
                pass
        self._previous.clear()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self._signalled:
            os._exit(self.exit_code())  # the second: at once, as asked
        # A terminal's loss and its SIGHUP come together, in either order: the loss
        # alone is not a first signal.
        self._signalled = True
        self.ask(f"signal {signal.Signals(signum).name}")

    def ask(self, why: str) -> None:
        """Stop: from a signal handler, the loop, or the thread that saw the terminal go."""
        with self._lock:
            if self.reason is not None:
                return
            self.reason = why
        threading.Thread(target=self._deadline, name="gpudash-deadline", daemon=True).start()
        if self._at_once is not None:
            self._at_once()
        loop, quit = self._loop, self._quit
        if loop is not None and quit is not None:
            try:
                loop.call_soon_threadsafe(quit, why)
            except RuntimeError:  # the loop is closed: the app has ended already
                pass

    def _deadline(self) -> None:
        time.sleep(self.deadline_s)
        code = self.exit_code()
        try:
            log.error("told to stop (%s) and not ended within %.0f s: ended (exit %d)",
                      self.reason, self.deadline_s, code)
        finally:
            os._exit(code)
