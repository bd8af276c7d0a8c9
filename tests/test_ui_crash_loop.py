"""A unit systemd keeps restarting is named on the host screen, with its journal's reason
(issue 20: it showed only as RESPAWNED, though the fleet table and the swap knew both)."""

from __future__ import annotations

import pytest
from support import until
from test_ui import make_app, wait_for

from gpudash.demo.host import DEEPSEEK, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.ui.widgets.holders import HoldersTable


@pytest.mark.parametrize("size", [(120, 35), (80, 24)])
async def test_a_crash_loop_is_named_with_the_line_that_says_why(size: tuple[int, int]) -> None:
    demo = DemoHost(clock=SteppedClock())
    demo.watch_unit(DEEPSEEK)
    await demo.systemctl("start", DEEPSEEK)  # too big beside MiniMax: dies, again and again
    app = make_app(demo)
    async with app.run_test(size=size) as pilot:
        table = app.query_one(HoldersTable)
        key = f"u:{DEEPSEEK}"
        await wait_for(pilot, lambda: key in [str(k.value) for k in table.rows], within=20)
        table.select_key(key)
        await wait_for(pilot, lambda: app.selected_key == key)
        await until(pilot, lambda: app.view.crashes.reason(DEEPSEEK) is not None
                    and app.view.crashes.reason(DEEPSEEK).failure is not None,
                    what="the crash's reason")
        reason = app.view.crashes.reason(DEEPSEEK)
        assert reason is not None and reason.failure is not None
        assert reason.failure.kind == "memory-held"
        assert "Free memory on device" in reason.failure.line
        # its first restart is a respawn (one kill -9 looks the same); then a loop
        await until(pilot, lambda: key in [str(k.value) for k in table.rows] and any(
            "LOOP" in str(c) for c in table.get_row(key)), what="LOOP")
        if size == (120, 35):  # the unit panel has room: the loop and its reason
            await until(pilot, lambda: "why: ValueError: Free memory on device" in str(
                app.query_one("#unit").render()).replace("\n", " "), what="the reason shown")
            panel = str(app.query_one("#unit").render())
            assert "CRASH LOOP: systemd restarted it" in panel, panel
        else:  # too thin: the gist on Holders' border names it
            assert "CRASH LOOP" in str(table.border_subtitle), table.border_subtitle
