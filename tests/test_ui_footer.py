"""The key footer over a session: one widget that draws the keys, not a widget per key.

Moving the cursor changes which keys are enabled: the line is drawn again with them greyed
or not. Textual's footer made a widget per key (15 at 160 columns, 0.8 MB of the
dashboard's memory) and drew them all again on each change (each left its style cache in
Textual's own cache: RSS grew by 57 MB in 30 s of cursor moves, before the keys were
updated in place). A click runs the key under the pointer; a greyed one rings the bell."""

from __future__ import annotations

from support import settled
from test_ui import NOTEBOOK, SIZE, make_app, select

from gpudash.demo.host import MINIMAX, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.ui.widgets.footer import DashboardFooter


def enabled(app) -> dict[str, bool]:  # type: ignore[no-untyped-def]
    """What the screen says each shown action is now."""
    return {b.action: on for _n, b, on, _t in app.screen.active_bindings.values() if b.show}


def line(app) -> str:  # type: ignore[no-untyped-def]
    """The footer's line as the terminal shows it."""
    footer = app.screen.query_one(DashboardFooter)
    return "".join(s.text for s in app.screen._compositor.render_strips()[footer.region.y])


async def test_a_cursor_move_draws_the_keys_greyed_as_the_screen_says() -> None:
    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await settled(pilot)
        footer = app.screen.query_one(DashboardFooter)
        states = []
        for key in [f"p:{NOTEBOOK}", f"u:{MINIMAX}", f"p:{NOTEBOOK}"]:
            await select(pilot, app, key)
            await settled(pilot)
            now = enabled(app)
            drawn = {k.action: k.disabled for k, _a, _b in footer.shown() if not k.palette}
            assert drawn and all(drawn[a] is not now[a] for a in drawn), (drawn, now)
            states.append(drawn)
            assert list(footer.children) == []  # no widget per key
        assert states[0] == states[2] != states[1]
        for spec, start, end in footer.shown():  # each key where the line says it is
            assert spec.display in line(app)[start:end]
            assert not spec.description or spec.description in line(app)[start:end]


async def test_at_80_columns_the_keys_fit_and_help_and_quit_stay() -> None:
    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=(80, 24)) as pilot:
        drawn = []
        for key in [f"u:{MINIMAX}", f"p:{NOTEBOOK}"]:
            await select(pilot, app, key)
            await settled(pilot)
            footer = app.screen.query_one(DashboardFooter)
            assert footer.compact and list(footer.children) == []
            shown = footer.shown()
            assert {"help", "quit"} <= {k.action for k, _a, _b in shown}
            assert max(end for _k, _a, end in shown) <= 80
            drawn.append([k.action for k, _a, _b in shown])
        assert drawn[0] != drawn[1]  # greyed keys go first: others fit for another one


async def test_a_click_runs_the_key_under_the_pointer_and_a_greyed_one_rings() -> None:
    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, f"p:{NOTEBOOK}")
        await settled(pilot)
        footer = app.screen.query_one(DashboardFooter)
        shown = {k.action: (k, a) for k, a, _b in footer.shown()}
        bells: list[None] = []
        app.bell = lambda: bells.append(None)  # type: ignore[method-assign]
        greyed = next(k for k, _a in shown.values() if k.disabled)
        await pilot.click(DashboardFooter, offset=(shown[greyed.action][1] + 1, 0))
        await settled(pilot)
        assert bells and app.screen is app.main  # nothing opened
        await pilot.hover(DashboardFooter, offset=(shown["help"][1] + 1, 0))
        assert footer.tooltip == shown["help"][0].tooltip
        await pilot.click(DashboardFooter, offset=(shown["help"][1] + 1, 0))
        await settled(pilot)
        assert type(app.screen).__name__ == "HelpScreen"
