"""Keys in order on a loaded machine (``gpudash.ui.keyhold``).

Seen in a run of the suite on every core: ``/k`` in one burst opened the filter, and its
``k`` never reached it. A key was let go after a fixed second whether or not it had come
back from its widget; on a loaded machine ``/`` was still on its way, so ``k`` overtook it
and went to the table. Here a widget takes longer than that second with each key, as a
busy event loop does; the ``k`` must still wait for ``/`` and go to what ``/`` opened. These
wait in real time: the slowness is the point.
"""

from __future__ import annotations

import asyncio
import time

from test_ui import wait_for
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from gpudash.ui.keyhold import HoldsKeys, hold, release

SLOW_S = 1.5  # longer than the second a key used to be given


class Slow(Static, can_focus=True):
    """Takes a while with each key before it goes up to the bindings."""

    async def on_key(self, event: events.Key) -> None:
        await asyncio.sleep(SLOW_S)


class Vanishing(Static, can_focus=True):
    """Takes the first key and goes away with it (the key's way back is cut)."""

    async def on_key(self, event: events.Key) -> None:
        event.stop()
        await self.remove()


class Catch(Static, can_focus=True):
    def __init__(self) -> None:
        super().__init__("catch")
        self.keys: list[str] = []

    def on_key(self, event: events.Key) -> None:
        event.stop()
        self.keys.append(event.key)


class Ask(ModalScreen[None]):
    def compose(self) -> ComposeResult:
        yield Input()

    def on_mount(self) -> None:
        self.query_one(Input).focus()
        release(self.app)  # the keys typed after / are its


class Keys(HoldsKeys):
    BINDINGS = [Binding("slash", "ask", "ask"), Binding("k", "kill", "kill")]

    def __init__(self, first: Static) -> None:
        super().__init__()
        self.first = first
        self.catch = Catch()
        self.killed = 0

    def compose(self) -> ComposeResult:
        yield self.first
        yield self.catch

    def on_mount(self) -> None:
        self.first.focus()

    def action_ask(self) -> None:
        hold(self)
        self.push_screen(Ask())

    def action_kill(self) -> None:
        self.killed += 1


def burst(app: Keys, keys: list[tuple[str, str]]) -> None:
    """One read of a terminal: every key posted before the first is handled."""
    for key, char in keys:
        app.post_message(events.Key(key, char))


async def test_a_key_slower_than_a_second_on_its_way_is_not_overtaken() -> None:
    app = Keys(Slow("slow"))
    async with app.run_test() as pilot:
        await wait_for(pilot, lambda: app.focused is app.first, 5)
        burst(app, [("slash", "/"), ("k", "k")])
        await wait_for(pilot, lambda: isinstance(app.screen, Ask)  # k in the input / opened
                       and app.screen.query_one(Input).value == "k", 3 * SLOW_S + 5)
        assert app.killed == 0  # k went to the input, never to the kill binding


async def test_a_key_whose_widget_went_away_does_not_hold_the_next() -> None:
    app = Keys(Vanishing("vanishing"))
    async with app.run_test() as pilot:
        await wait_for(pilot, lambda: app.focused is app.first, 5)
        burst(app, [("a", "a")])
        await wait_for(pilot, lambda: not app.first.is_attached, 5)
        app.catch.focus()
        t0 = time.monotonic()
        burst(app, [("x", "x")])
        await wait_for(pilot, lambda: app.catch.keys == ["x"], 5)
        assert time.monotonic() - t0 < 1.0  # let go once its widget was gone, not later
