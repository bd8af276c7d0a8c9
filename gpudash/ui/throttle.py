"""One redraw throttle: data may arrive at 10 Hz, a thing is redrawn at most ``MAX_FPS``
times a second, and every sample is still recorded (history and triage miss nothing)."""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.message_pump import MessagePump
from textual.timer import Timer

MAX_FPS = 5  # redraws per second at most, whatever the sample rate


class RedrawThrottle:
    """Redraw now, or once when the frame is over, for everything asked for meanwhile:
    ``draw`` gets the keys (hosts) asked for since the last redraw. Not ``leading``: the
    first ask waits a whole frame too, for the others that come with it."""

    def __init__(self, owner: MessagePump, draw: Callable[[set[int]], None],
                 fps: float = MAX_FPS, *, leading: bool = True) -> None:
        self._owner = owner
        self._draw = draw
        self._period = 1 / fps
        self._leading = leading
        self._timer: Timer | None = None
        self._dirty: set[int] = set()
        self.last = 0.0  # time.monotonic() of the last redraw

    def ask(self, *keys: int) -> None:
        """Ask for a redraw (of ``keys``): now if the last one is a frame ago, else then."""
        self._dirty.update(keys)
        if self._timer is not None:
            return
        wait = self.last + self._period - time.monotonic() if self._leading else self._period
        if wait <= 0:
            self._flush()
        else:
            self._timer = self._owner.set_timer(wait, self._flush)

    @property
    def pending(self) -> bool:
        """A redraw is asked for and waits for its frame."""
        return self._timer is not None

    def _flush(self) -> None:
        self._timer = None
        self.last = time.monotonic()
        dirty, self._dirty = self._dirty, set()
        self._draw(dirty)
