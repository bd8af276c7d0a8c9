"""A confirmation that was seen (issue 19, item 3), with Pilot at 80x24 and 120x35.

Seen before: a `y` typed before the confirm dialog was drawn (1.2 s under load at 80x24)
confirmed a KILL whose plan was never on screen; at 80x24 the dialog showed 7 of 16
`kill -TERM` lines with no word that 9 more were there.
"""

from __future__ import annotations

import re

import pytest
from support import until
from test_ui import make_app, select, wait_for

from gpudash.demo.host import MINIMAX, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.ui.screens import ConfirmModal


@pytest.mark.parametrize("size", [(80, 24), (120, 35)])
async def test_a_key_typed_before_the_plan_was_drawn_does_not_confirm(size, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # The dialog's clock is the test's: under load (the whole suite on 2 cores) even a
    # second's grace passed between the dialog being drawn and the test's key, and the
    # "too soon" key confirmed. Now its grace ends only when the test moves the clock.
    import types

    from gpudash.ui import screens

    now = [1000.0]
    monkeypatch.setattr(screens, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    demo = DemoHost(seed=7, clock=SteppedClock())
    app = make_app(demo)
    async with app.run_test(size=size) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("r", "y")  # typed ahead: the dialog was not on screen yet
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal))
        modal = app.screen
        assert isinstance(modal, ConfirmModal)
        assert app.reports == [] and app.controller.running is None
        await pilot.press("y")  # and at once, in the dialog's first moments: too soon too
        await pilot.pause(0.05)
        assert app.screen is modal and app.reports == [] and app.controller.running is None
        assert modal.refused_early >= 1
        question = str(modal.query_one("#question").render())
        assert question.startswith("Not yet: that key came before the plan was on screen"), \
            question
        # read, then confirmed: it runs
        assert not modal.armed
        now[0] += ConfirmModal.ARM_S
        await wait_for(pilot, lambda: modal.armed)
        await pilot.press("y")
        await until(pilot, lambda: len(app.reports) == 1, what="the reclaim's report")
        assert app.reports[0].confirmed, app.reports[0].describe()


@pytest.mark.parametrize("size", [(80, 24), (120, 35)])
async def test_a_long_plan_says_what_is_out_of_sight_and_scrolls(size) -> None:  # type: ignore[no-untyped-def]
    demo = DemoHost(seed=7, clock=SteppedClock())
    demo.leave_orphans()  # 16 workers under PID 1
    app = make_app(demo)
    async with app.run_test(size=size) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("o")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        modal = app.screen
        assert isinstance(modal, ConfirmModal)
        kills = [ln for ln in modal.lines if ln.lstrip().startswith("$ kill -TERM")]
        assert len(kills) == 16, modal.lines
        await pilot.pause(0.3)  # fitted to the screen, then counted
        plan = modal.query_one("#plan")
        shown = plan.scrollable_content_region.height
        more = str(modal.query_one("#more").render())
        hidden = plan.virtual_size.height - shown
        # the dialog fits the screen: what does not fit of the plan scrolls, never is cut
        # (at 80x24 its region was the whole 32 lines, clipped by the screen, no word of it)
        assert plan.region.bottom <= size[1] - 4, (plan.region, size)
        if size == (80, 24):
            assert hidden > 0
        if hidden > 0:  # 80x24: part of the plan is out of sight, and it says how much
            assert f"↓ {hidden} more line(s)" in more, more
            await pilot.press("pagedown")
            await pilot.pause(0.1)
            assert plan.scroll_y > 0
            more = str(modal.query_one("#more").render())
            assert re.search(r"↑ \d+ ", more), more
            await pilot.press("pagedown", "pagedown", "pagedown")
            await pilot.pause(0.1)
            assert "more line" in str(modal.query_one("#more").render())  # all above now
            assert not re.search(r"↓ \d", str(modal.query_one("#more").render()))
        else:
            assert more == "" and not modal.query_one("#more").display
        # the answer row is always on screen: Confirm can be reached
        confirm = modal.query_one("#confirm")
        assert confirm.region.height == 1 and confirm.region.bottom <= size[1]


async def test_a_dialog_dismissed_before_it_was_mounted_leaves_the_dashboard_running() -> None:
    """Seen under load (4 test workers on 2 cores): a confirm dialog pushed and popped in
    the same turn (a plan replaced by the next at once) ran its on_mount without its
    buttons, and the NoMatches ended the dashboard."""
    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.view.snapshot is not None)
        below = app.screen
        app.push_screen(ConfirmModal("Kill process", ["Kill 1234", "$ kill -9 1234"]))
        app.pop_screen()
        await pilot.pause(0.3)
        assert app.is_running and app._exception is None
        assert app.screen is below
