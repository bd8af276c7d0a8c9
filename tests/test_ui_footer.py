"""The key footer over a session. Moving the cursor changes which keys are enabled: the
drawn keys are updated, not drawn again (each key drawn left its style cache in Textual's
own cache: RSS grew by 57 MB in 30 s of cursor moves). When the keys do change (which fit at
80 columns), the keys drawn before are let go (Textual's data binding kept every one)."""

from __future__ import annotations

import gc
import weakref

from support import settled
from test_ui import NOTEBOOK, SIZE, make_app, select
from textual.widgets._footer import FooterKey

from gpudash.demo.host import MINIMAX, DemoHost
from gpudash.domain.clock import SteppedClock


def enabled(app) -> dict[str, bool]:  # type: ignore[no-untyped-def]
    """What the screen says each shown action is now."""
    return {b.action: on for _n, b, on, _t in app.screen.active_bindings.values() if b.show}


async def test_a_cursor_move_updates_the_drawn_keys() -> None:
    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await settled(pilot)
        first = list(app.screen.query(FooterKey))
        before = {k.action: k._disabled for k in first}
        states = []
        for key in [f"p:{NOTEBOOK}", f"u:{MINIMAX}", f"p:{NOTEBOOK}"]:
            await select(pilot, app, key)
            await settled(pilot)
            keys = list(app.screen.query(FooterKey))
            assert keys == first  # the same widgets
            now = enabled(app)
            for k in keys:
                assert ("-disabled" in k.classes) is k._disabled
                if k.action in now:
                    assert k._disabled is not now[k.action], k.action
            states.append({k.action: k._disabled for k in keys})
        assert states[0] != states[1] == before == {k: not on for k, on in enabled(app).items()
                                                    if k in before} | before


async def test_keys_drawn_again_are_let_go() -> None:
    app = make_app(DemoHost(clock=SteppedClock()))
    drawn: list[weakref.ref[FooterKey]] = []  # every key the footer drew, once
    most = 0  # the most keys drawn at once
    async with app.run_test(size=(80, 24)) as pilot:
        # at 80 columns greyed-out keys are left out: a cursor move draws other keys
        for key in [f"u:{MINIMAX}", f"p:{NOTEBOOK}"] * 3:
            await select(pilot, app, key)
            await settled(pilot)
            keys = list(app.screen.query(FooterKey))
            most = max(most, len(keys))
            drawn += [weakref.ref(k) for k in keys if not any(ref() is k for ref in drawn)]
        shown = list(app.screen.query(FooterKey))
        assert shown and len(drawn) >= 3 * len(shown)  # drawn again, and again
        assert all("-compact" in k.classes for k in shown)
        gc.collect()
        alive = [ref() for ref in drawn if ref() is not None]
        # the keys shown, and at most one drawing before: Textual's list of a widget's
        # displayed children is refreshed when next read, not when they go
        assert len(alive) <= len(shown) + most, (len(alive), len(shown), most)
