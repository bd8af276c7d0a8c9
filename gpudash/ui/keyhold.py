"""Keys never overtake a mode switch.

Seen: ``tmux send-keys '/k'`` (a fast typist, a paste) opened the filter empty *and* the
"Kill process" dialog; ``/mini`` typed fast left the filter empty. Textual takes each key
from the terminal at once and hands it to the focused widget; bindings are looked up only
when it has bubbled back up to the App, so the ``k`` typed with ``/`` had gone through the
table and the host screen (which explains a greyed-out action's key) before ``/`` opened
anything.

Here keys go one at a time: the next is handed on only once the one before has been dealt
with (its binding run, or taken by a widget). And a key that opens an input (the filter, a
picker, an action's confirm dialog) *holds* the keys after it until that input has the
focus; they are then given to it, in order. Where nothing opens after all (the plan was
refused), they are dropped and the operator told: no action binding fires on a key meant
for an input. Quitting (``ctrl+q``, ``ctrl+c``) is never held.
"""

from __future__ import annotations

import time
from collections import deque

from textual import events
from textual.app import App
from textual.message import Message
from textual.message_pump import MessagePump
from textual.timer import Timer

PASS_THROUGH = frozenset({"ctrl+q", "ctrl+c"})
HOLD_MAX_S = 30.0  # a screen that never opens does not keep the keyboard
# A key whose way was cut (the widget it was given to removed: the KeyDone behind it is
# lost with it) does not either: a key on its way is looked at every KEY_CHECK_S, let go
# once its widget is gone, or after KEY_MAX_S whatever happened. (A fixed second was
# tried: on a loaded machine a key still on its way was overtaken by the next one, which
# went to the table instead of the filter that key opened.)
KEY_CHECK_S = 0.1
KEY_MAX_S = 10.0


class KeyDone(Message):
    """Follows a key on its way up from the widget it was given to: when the App gets it,
    that key has been dealt with."""


class KeysReleased(Message):
    """The held keys go to the screen now on top (``deliver``), or are dropped."""

    def __init__(self, deliver: bool, why: str = "") -> None:
        super().__init__()
        self.deliver = deliver
        self.why = why


class HoldsKeys(App[int]):
    """The App's side: keys in order; ``hold_keys`` when a key opens an input,
    ``release_keys`` once it has the focus (``deliver=False`` when nothing opened)."""

    _pending: deque[events.Key] | None = None
    _in_flight: Timer | None = None  # a key handed on, not yet dealt with: watched
    _in_flight_to: MessagePump | None = None  # where it went
    _in_flight_until = 0.0  # (monotonic) let go then, whatever happened
    _holding: Timer | None = None  # an input is opening

    @property
    def holding_keys(self) -> bool:
        return self._holding is not None

    def hold_keys(self) -> None:
        """From now on keys wait (an input is opening); idempotent."""
        if self._holding is None:
            self._holding = self.set_timer(
                HOLD_MAX_S, lambda: self.release_keys(False, "the screen did not open"))

    def release_keys(self, deliver: bool = True, why: str = "") -> None:
        """Give the held keys to the screen on top, in the App's own turn (behind a focus
        change that was asked for before this call)."""
        if self._holding is not None:
            self.post_message(KeysReleased(deliver, why))

    async def on_event(self, event: events.Event) -> None:
        if (isinstance(event, events.Key) and not event.is_forwarded
                and event.key not in PASS_THROUGH):
            if self._pending is None:
                self._pending = deque()
            self._pending.append(event)
            await self._next_key()
            return
        await super().on_event(event)

    async def _next_key(self) -> None:
        """Hand on the next key, if none is on its way and no input is opening."""
        pending = self._pending
        if self._in_flight is not None or self._holding is not None or not pending:
            return
        key = pending.popleft()
        self._in_flight_to = self.screen
        self._in_flight_until = time.monotonic() + KEY_MAX_S
        self._in_flight = self.set_interval(KEY_CHECK_S, self._check_in_flight)
        await super().on_event(key)  # priority bindings, else to the focused widget
        target = self.focused or self.screen
        self._in_flight_to = target
        target.post_message(KeyDone())  # behind the key, the same way up

    async def _check_in_flight(self) -> None:
        """The key on its way still has a widget to come back from (else let it go)."""
        target = self._in_flight_to
        if (target is not None and target.is_running and target.is_attached
                and time.monotonic() < self._in_flight_until):
            return
        await self._key_done()

    async def _key_done(self) -> None:
        if self._in_flight is not None:
            self._in_flight.stop()
            self._in_flight = None
            self._in_flight_to = None
        await self._next_key()

    async def on_key_done(self, message: KeyDone) -> None:
        message.stop()
        await self._key_done()

    async def on_keys_released(self, message: KeysReleased) -> None:
        if self._holding is None:
            return
        self._holding.stop()
        self._holding = None
        pending, self._pending = self._pending or deque(), deque()
        if message.deliver:
            self._pending = pending
        elif pending:
            typed = "".join(k.character or f"<{k.key}>" for k in pending)
            self.notify(f"{len(pending)} key(s) typed meanwhile were dropped "
                        f"({message.why or 'nothing opened'}): {typed[:40]!r}",
                        severity="warning", markup=False)
        await self._next_key()


def holding(app: App[int]) -> bool:
    """Whether keys are held now (an input is opening)."""
    return isinstance(app, HoldsKeys) and app.holding_keys


def hold(app: App[int]) -> None:
    """``app`` holds the keys typed from now on (a key of it opens an input)."""
    if isinstance(app, HoldsKeys):
        app.hold_keys()


def release(app: App[int], deliver: bool = True, why: str = "") -> None:
    """The input opened (``deliver``: it takes the held keys), or nothing will open."""
    if isinstance(app, HoldsKeys):
        app.release_keys(deliver, why)
