"""The model swap from the keyboard, on the demo host: pick, confirm, follow, prove."""

from __future__ import annotations

from support import until
from test_ui import SIZE, make_app, select, wait_for
from textual.widgets import Checkbox, RichLog

from gpudash.demo.host import KIMI, MINIMAX, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.engine import ActionKind
from gpudash.ui.models import JournalScreen, ModelPicker, choice_text
from gpudash.ui.screens import ConfirmModal


async def test_swap_picks_the_next_model_and_proves_it_serves() -> None:
    demo = DemoHost(clock=SteppedClock(), release_delay=1)
    app = make_app(demo)
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("w")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelPicker))
        picker = app.screen
        assert [c.name for c in picker.choices] == ["vllm-deepseek-v3.service", KIMI]
        # each with what the operator weighs: state, enabled, Restart=, port, footprint
        row = choice_text(picker.choices[1]).plain
        assert "disabled" in row and "Restart=always" in row and "port 8001" in row, row
        # the swap leaves the host as it found it: MiniMax is enabled, so Kimi will be
        # (it was left disabled: a reboot brought up no model)
        assert picker.query_one("#enable", Checkbox).value is True
        await pilot.press(*"kimi", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        lines = "\n".join(app.screen.lines)
        assert "1. reclaim" in lines and f"$ systemctl start {KIMI}" in lines
        assert f"$ systemctl enable {KIMI}" in lines, lines
        assert "http://127.0.0.1:8001/health answers 200" in lines
        await pilot.press("y")
        await until(pilot, lambda: app.last_report is not None, what="the swap's report")
        report = app.last_report
        assert report is not None and report.plan.kind is ActionKind.SWAP
        assert report.confirmed, report.describe()
        assert report.serving is not None and report.serving.serving
        panel = str(app.query_one("#progress").render())
        assert "serving after" in panel and "footprint learned" in panel
        assert demo.units[KIMI].active and not demo.units[MINIMAX].active
        assert demo.units[KIMI].unit_file_state == "enabled"
        # issue 33, item 2: the panel said "GPU0 ... 94.5 -> 2.0 GiB now 2.0 GiB" (the
        # reclaim phase's figure) while GPU0 held 88 GiB of Kimi: the result is the end's
        now = {g.index: g.memory_used_mib for g in demo.snapshot().gpus}
        assert "now 2.0 GiB" not in panel, panel
        assert f"GPU0 {now[0] / 1024:.1f}" in panel and "GPU memory now" in panel, panel
        assert "reclaimed: 754.3 GiB back" in panel, panel


async def test_the_swap_picker_can_leave_the_new_unit_disabled() -> None:
    demo = DemoHost(clock=SteppedClock(), release_delay=1)
    app = make_app(demo)
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("w")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelPicker))
        await pilot.press("ctrl+t")  # not at boot, this time
        assert app.screen.query_one("#enable", Checkbox).value is False
        await pilot.press(*"kimi", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        assert not any(f"systemctl enable {KIMI}" in line for line in app.screen.lines)


async def test_journal_of_the_selected_unit_is_live_and_literal() -> None:
    demo = DemoHost(clock=SteppedClock())
    app = make_app(demo)
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("j")
        await wait_for(pilot, lambda: isinstance(app.screen, JournalScreen))
        journal = app.screen
        await until(pilot, lambda: len(journal.lines) > 0, what="journal lines")
        assert any("vLLM API server version" in line.message for line in journal.lines)
        log = journal.query_one(RichLog)
        assert log.lines  # shown, wrapped, never interpreted
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, JournalScreen))


async def test_a_failed_swap_from_the_keyboard_leaves_the_failed_model_disabled() -> None:
    # Seen in the CLI (the dashboard runs the same plan): DeepSeek was enabled by the swap,
    # crash-looped, MiniMax was rolled back, and DeepSeek stayed enabled for the next boot.
    from gpudash.demo.host import DEEPSEEK
    from gpudash.state import footprints

    # it once served here in 90 GiB a GPU: the fit lets the swap go ahead
    footprints.learn("demo-gpu01", DEEPSEEK, dict.fromkeys(range(8), 92_160), 600.0,
                     footprints.store_path(simulated=True))
    demo = DemoHost(clock=SteppedClock(), release_delay=1)
    app = make_app(demo)
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("w")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelPicker))
        assert app.screen.query_one("#enable", Checkbox).value is True
        await pilot.press(*"deepseek", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        lines = "\n".join(app.screen.lines)
        assert f"$ systemctl enable {DEEPSEEK}" in lines
        assert f"$ systemctl disable {DEEPSEEK}" in lines, lines  # in the rollback
        # issue 33, item 4: the rollback's commands read as step 2's (their heading was
        # below the scrolling part): the scrolled plan says whose they are
        from textual.widgets import Static

        shown = str(app.screen.query_one("#plan-text", Static).render())
        assert shown.index("2. start") < shown.index("if it does not serve: rollback") \
            < shown.index(f"$ systemctl disable {DEEPSEEK}"), shown
        await pilot.press("y")
        await until(pilot, lambda: app.last_report is not None, what="the swap's report")
        report = app.last_report
        assert report is not None and not report.confirmed
        assert report.rollback is not None and report.rollback.serving, report.describe()
        assert demo.units[DEEPSEEK].unit_file_state == "disabled"
        assert demo.units[MINIMAX].active and demo.units[MINIMAX].unit_file_state == "enabled"


async def test_the_picker_shows_each_models_fit_and_a_refused_one_can_be_forced() -> None:
    # issue 33, item 5: the picker showed no fit verdict, and the refusal ended "--force
    # starts it anyway" where the dashboard had no force
    from gpudash.demo.host import DEEPSEEK

    demo = DemoHost(clock=SteppedClock(), release_delay=1)
    app = make_app(demo)
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("w")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelPicker))
        shown = {c.name: c.fit for c in app.screen.choices}
        assert shown[KIMI] == "fits", shown  # 0.9 x 95.6 GiB, once MiniMax is reclaimed
        assert (shown[DEEPSEEK] or "").startswith("does not fit: GPU0"), shown  # 0.99
        assert "✓ fits" in choice_text(next(c for c in app.screen.choices
                                             if c.name == KIMI)).plain
        await pilot.press(*"deepseek", "enter")
        # refused: the refusal, and a question whose answer is no by default
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        asked = "\n".join(app.screen.lines)
        assert "does not fit" in asked and "force it?" in asked, asked
        await pilot.press("y")
        # forced: its own plan, saying so, confirmed like a kill
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed
                       and any("FORCED" in line for line in app.screen.lines))
        await pilot.press("n")
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmModal))
        assert demo.units[MINIMAX].active  # nothing was done
