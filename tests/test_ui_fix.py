"""The unit panel's fix key: ``c`` plans gpudash's drop-in of the selected service, the
confirm dialog shows the diff, and once confirmed the lint's warnings leave the panel."""

from __future__ import annotations

from support import until
from test_ui import make_app, run_confirmed, select, wait_for

from gpudash.demo.host import MINIMAX, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.engine import ActionKind
from gpudash.ui.screens import ConfirmModal
from gpudash.ui.widgets.unit_panel import UnitPanel

SIZE = (160, 50)


async def test_fix_key_shows_the_diff_and_clears_the_lint() -> None:
    demo = DemoHost(clock=SteppedClock(), release_delay=2)
    app = make_app(demo)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.view.snapshot is not None)
        await select(pilot, app, f"u:{MINIMAX}")
        assert "KillMode=process" in str(app.query_one(UnitPanel).render())
        # the key that fixes it is said where the findings are (issue 33, item 6: c was in
        # no footer and not in the configuration findings)
        assert " c  fix the cause" in str(app.query_one(UnitPanel).render())
        await pilot.press("c")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        shown = "\n".join(app.screen.lines)
        assert "+KillMode=mixed" in shown and "50-gpudash.conf" in shown
        await pilot.press("n")  # declined: nothing written
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmModal))
        assert demo.units[MINIMAX].drop_in is None
        await run_confirmed(pilot, app, "c")
        assert app.last_report is not None and app.last_report.plan.kind is ActionKind.FIX
        assert app.last_report.confirmed
        assert demo.units[MINIMAX].kill_mode == "mixed"
        await until(pilot, lambda: "KillMode=process" not in str(
            app.query_one(UnitPanel).render()), what="the lint cleared")


async def test_fix_key_is_refused_in_read_only_mode() -> None:
    demo = DemoHost(clock=SteppedClock(), release_delay=2)
    app = make_app(demo, read_only=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.view.snapshot is not None)
        await select(pilot, app, f"u:{MINIMAX}")
        assert "fix the cause" not in str(app.query_one(UnitPanel).render())  # it cannot
        await pilot.press("c")
        await pilot.pause(0.3)
        assert not isinstance(app.screen, ConfirmModal)
        assert demo.units[MINIMAX].drop_in is None
