"""What a small terminal keeps (issue 20): a header that gives way by priority instead of
being cut mid-word, and an action's proof that keeps each GPU's "before"."""

from __future__ import annotations

from support import stepped, until
from test_ui import select, wait_for
from test_ui_sizes import make_app, screen_text

from gpudash.demo.host import MINIMAX, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.ui.models import ModelPicker
from gpudash.ui.screens import ConfirmModal
from gpudash.ui.widgets.action_log import ActionLog
from gpudash.ui.widgets.holders import HoldersTable


async def test_the_header_at_80_columns_keeps_what_matters_and_cuts_no_word() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.pause(0.3)
        header = screen_text(app).splitlines()[0].rstrip()
        assert "demo-gpu01" in header and "● connected" in header, header
        assert "just now" in header and "source" not in header, header  # gave way whole
        assert len(header) <= 80
    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.pause(0.3)
        header = screen_text(app).splitlines()[0]
        assert "rtt N/A" in header and "last sample" in header and "source demo" in header


async def test_the_proof_at_80x24_keeps_each_gpus_before() -> None:
    # it showed now→target ("GPU1 0.0→0.0 ✓"): the figure it started from was gone
    app = make_app(DemoHost(clock=SteppedClock(), release_delay=1))
    async with app.run_test(size=(80, 24)) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await pilot.press("y")
        await until(pilot, lambda: app.last_report is not None, what="the report")
        await pilot.pause(0.3)
        panel = str(app.query_one("#progress").render())
        assert "GPU1" in panel and "94.5→0.0" in panel, panel


async def test_after_a_swap_the_proof_says_its_figures_are_the_reclaims() -> None:
    # "GPU1 0.0→0.0 ✓" under a GPU table that said 86.0 GiB: which is true?
    app = make_app(DemoHost(clock=SteppedClock(), release_delay=1))
    async with app.run_test(size=(120, 35)) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("w")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelPicker))
        await pilot.press(*"kimi", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await pilot.press("y")
        await until(pilot, lambda: app.last_report is not None, what="the report")
        await pilot.pause(0.3)
        panel = str(app.query_one("#progress").render()).replace("\n", " ")
        assert "reclaimed: 754.3 GiB back on 8 GPU(s), per GPU (GiB before → after):" \
            in panel, panel
        assert "94.5→0.0" in panel and "footprint learned" in panel, panel
        assert "GPU memory now: GPU0 88.0" in panel, panel  # the end, Kimi loaded


async def test_at_80x24_while_acting_holders_keep_rows_and_the_log_gives_way() -> None:
    # Holders shrank to 2-3 rows under the Action panel, with an empty Action log below
    # repeating nothing the panel did not say; x gives the log (and the GPUs) back.
    app = make_app(DemoHost(clock=SteppedClock(), release_delay=2))
    async with app.run_test(size=(80, 24)) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await pilot.press("y")
        await wait_for(pilot, lambda: app.running)
        await pilot.pause(0.5)
        holders = app.query_one(HoldersTable)
        log = app.query_one(ActionLog)
        assert not log.display
        assert holders.size.height - 1 >= 5, holders.size  # rows below its header
        assert app.query_one("#progress").region.bottom <= 24
        await until(pilot, lambda: app.last_report is not None, what="the report")
        await pilot.press("x")
        await pilot.pause(0.3)
        assert log.display and "Reclaim vllm-minimax" in screen_text(app)
        assert "GPU0" in screen_text(app)  # the GPU grid is back


async def test_while_loading_the_gpu_table_and_the_panel_say_one_figure() -> None:
    # A loading model: the table said 24.2 GiB (the feed's sample), the Action panel 28.0
    # (the action's newer one). The newer sample's figure is the one both show.
    from gpudash.engine import ActionKind, execute, plan_action
    from gpudash.session.controller import Shown, freshest_memory

    demo = DemoHost(clock=SteppedClock(), release_delay=1)
    feed = await demo.sample()  # what the table has
    seen = []
    plan = plan_action(feed, ActionKind.RECLAIM, unit=MINIMAX)
    await stepped(demo, execute(plan, demo, progress=seen.append))
    last = seen[-1]
    assert last.taken_at is not None and last.taken_at > feed.taken_at
    shown = freshest_memory(feed, Shown(plan, last), feed.host)
    assert shown is not None
    assert {g.index: g.memory_used_mib for g in shown.gpus} == dict(last.used_mib)
    assert {g.index: g.memory_used_mib for g in feed.gpus} != dict(last.used_mib)
    # an older action sample, or another host's action, leaves the table's own figure
    newer = await demo.sample()
    assert freshest_memory(newer, Shown(plan, last), feed.host) is newer
    assert freshest_memory(feed, Shown(plan, last), "another-host") is feed
