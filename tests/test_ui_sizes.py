"""The dashboard at the sizes on-call engineers use (80x24 laptop split, 120x35 tmux pane):
what must stay on screen does, and every item of issue 10's layout list holds."""

from __future__ import annotations

import html
import re

from support import app_clock, next_sample, settled, until
from test_ui import select, wait_for
from textual.widgets import Button

from gpudash.demo.host import MINIMAX, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.engine import ExecOptions
from gpudash.ui.app import GpudashApp
from gpudash.ui.screens import ConfirmModal, DetailScreen
from gpudash.ui.widgets.action_log import ActionLog
from gpudash.ui.widgets.footer import DashboardFooter
from gpudash.ui.widgets.holders import HoldersTable

LAPTOP = (80, 24)
PANE = (120, 35)


def make_app(demo: DemoHost | None = None, **kw: object) -> GpudashApp:
    demo = demo or DemoHost(clock=SteppedClock(), release_delay=2)
    return GpudashApp(
        [demo], interval=0.25, read_only=False, theme=None,
        exec_options=ExecOptions(term_timeout=10.0, poll=0.5, verify_timeout=120.0),
        clock=app_clock([demo]), **kw,  # type: ignore[arg-type]
    )


def visible(app: GpudashApp, widget) -> bool:  # type: ignore[no-untyped-def]
    """Whether ``widget`` is what the screen shows at its own top-left cell."""
    region = widget.region
    if not region or region.bottom > app.size.height or region.right > app.size.width:
        return False
    shown, _ = app.screen.get_widget_at(region.x, region.y)
    return shown is widget or widget in shown.ancestors_with_self


def deepseek_learned_smaller() -> None:
    """DeepSeek once served here in 90 GiB a GPU: the fit check lets its start through
    beside alice's kernel, and vLLM's own start-up check (0.99 of the GPU) then fails:
    the long verdict of a start that crash-loops."""
    import json

    from gpudash.demo.host import DEEPSEEK
    from gpudash.state import footprints

    path = footprints.store_path(simulated=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"demo-gpu01": {DEEPSEEK: {
        "mib_per_gpu": {str(g): 92_160 for g in range(8)}, "ready_s": 60.0,
        "seen_at": 1.0}}}))


def screen_text(app: GpudashApp) -> str:
    """The screen as lines of plain text, from the SVG export (one <text> per styled run)."""
    rows: dict[float, list[tuple[float, str]]] = {}
    for x, y, text in re.findall(r'<text[^>]* x="([\d.]+)" y="([\d.]+)"[^>]*>([^<]*)</text>',
                                 app.export_screenshot()):
        rows.setdefault(float(y), []).append((float(x), html.unescape(text)))
    return "\n".join("".join(t for _x, t in sorted(runs)).replace("\xa0", " ")
                     for _y, runs in sorted(rows.items()))


async def test_80x24_holders_get_the_rows_and_the_columns() -> None:
    app = make_app()
    async with app.run_test(size=LAPTOP) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await settled(pilot)
        holders = app.query_one(HoldersTable)
        assert holders.size.width >= 76  # the unit panel gives its columns up
        assert holders.scrollable_content_region.height - 1 >= 7  # rows under the header
        assert not app.query_one("#unit").display
        # ... and the unit's gist is on Holders' border; Enter shows it in full.
        assert "Restart=always" in str(holders.border_subtitle)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, DetailScreen))
        assert "KillMode=process" in app.screen.body.plain


async def test_80x24_footer_keeps_reclaim_help_and_quit() -> None:
    app = make_app()
    async with app.run_test(size=LAPTOP) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")

        def shown() -> set[str]:  # keys drawn inside the terminal's width
            footer = app.screen.query_one(DashboardFooter)
            return {k.key for k, _start, end in footer.shown()
                    if end <= min(LAPTOP[0], footer.size.width)}

        await wait_for(pilot, lambda: {"r", "question_mark", "q"} <= shown(), within=3)


async def test_120x35_action_panel_shows_every_gpu_and_the_verdict() -> None:
    app = make_app()
    async with app.run_test(size=PANE) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await pilot.press("y")
        await until(pilot, lambda: app.last_report is not None, what="the report")
        await settled(pilot)
        shown = screen_text(app)  # what is on screen, not what the panel holds
        assert all(f"GPU{g} " in shown for g in range(8)) and "✔ confirmed" in shown
        assert "TERM ignored: KILL sent to pid" in shown
        assert app.query_one("#gpus").display  # the GPU table stays too
        holders = app.query_one(HoldersTable)
        assert holders.size.height >= 5


async def test_g_says_why_when_the_plot_is_not_shown() -> None:
    app = make_app()
    async with app.run_test(size=PANE) as pilot:
        await wait_for(pilot, lambda: app.view.snapshot is not None)
        assert not app.query_one("#plot").display
        await pilot.press("g")
        await settled(pilot)
        notes = [n.message for n in app._notifications]
        assert any("130x30" in m and "120x35" in m for m in notes), notes


async def test_80x24_confirm_keeps_what_is_decided_on_and_the_buttons_in_view() -> None:
    app = make_app()
    async with app.run_test(size=LAPTOP, notifications=True) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        app.notify("xyzzy", title="plugh", timeout=30)
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await settled(pilot)
        modal = app.screen
        assert visible(app, modal.query_one("#confirm", Button))
        assert visible(app, modal.query_one("#cancel", Button))
        text = screen_text(app)
        assert "Expected back: 754.3 GiB" in text
        assert "Left alone: 90211" in text
        assert "xyzzy" not in text and "plugh" not in text
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmModal))
        await settled(pilot)
        assert "xyzzy" in screen_text(app)  # back once the dialog is answered


async def test_log_entry_opens_in_full_and_the_focused_log_shows_it() -> None:
    app = make_app()
    async with app.run_test(size=LAPTOP) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await pilot.press("n")
        log = app.query_one(ActionLog)
        await wait_for(pilot, lambda: bool(log.entries))
        unfocused = log.styles.border_top
        log.focus()
        await settled(pilot)
        assert log.styles.border_top != unfocused
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, DetailScreen))
        body = app.screen.body.plain
        assert "Reclaim vllm-minimax-m25.service" in body and "cancelled: nothing was done" in body
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, DetailScreen))


async def test_home_and_end_jump_in_holders() -> None:
    app = make_app()
    async with app.run_test(size=LAPTOP) as pilot:
        table = app.query_one(HoldersTable)
        await wait_for(pilot, lambda: table.row_count > 10)
        table.focus()
        await pilot.press("end")
        assert table.cursor_row == table.row_count - 1
        await pilot.press("home")
        assert table.cursor_row == 0


async def test_a_greyed_key_pressed_eight_times_says_why_once() -> None:
    app = make_app()
    async with app.run_test(size=LAPTOP) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        for _ in range(8):
            await pilot.press("o")
        await settled(pilot)
        reap = [n for n in app._notifications if n.title == "Reap orphans"]
        assert len(reap) == 1 and "no orphaned processes" in reap[0].message


async def test_palette_does_not_open_over_a_confirm_dialog() -> None:
    from textual.command import CommandPalette

    app = make_app()
    async with app.run_test(size=PANE) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("s")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await pilot.press("ctrl+p")
        await settled(pilot)
        assert isinstance(app.screen, ConfirmModal)
        assert not CommandPalette.is_open(app)


async def test_palette_shows_actions_that_do_not_fit_greyed_with_the_reason() -> None:
    from textual.command import CommandPalette
    from textual.widgets import OptionList

    app = make_app()
    async with app.run_test(size=PANE) as pilot:
        await select(pilot, app, "u:session-4.scope")
        await pilot.press("ctrl+p")
        await wait_for(pilot, lambda: CommandPalette.is_open(app))
        await pilot.press(*"stop")
        options = app.screen.query_one(OptionList)
        await wait_for(pilot, lambda: options.option_count > 0)
        await settled(pilot)
        prompts = [str(options.get_option_at_index(i).prompt)
                   for i in range(options.option_count)]
        stop = next(p for p in prompts if "Stop unit" in p)
        assert "select a system service" in stop


async def test_help_lists_host_keys_only_for_hosts_there_are() -> None:
    from gpudash.ui.screens import HelpScreen

    app = make_app()
    async with app.run_test(size=LAPTOP) as pilot:
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert not any("1-9" in key for key, _d, _a in app.screen.rows)
    clock = SteppedClock()
    two = GpudashApp([DemoHost("a", clock=clock), DemoHost("b", clock=clock, seed=3)],
                     interval=0.25, read_only=False, theme=None, exec_options=None)
    async with two.run_test(size=LAPTOP) as pilot:
        await pilot.press("question_mark")  # on the fleet: its own keys
        await wait_for(pilot, lambda: isinstance(two.screen, HelpScreen))
        assert (">", "Sort by the next column", True) in two.screen.rows
        assert ("q", "Quit", True) in two.screen.rows  # q quits there too, never filters
        assert not any(d == "Switch host" for _k, d, _a in two.screen.rows)
        await pilot.press("escape", "enter")  # a host opened: its keys, switching too
        await wait_for(pilot, lambda: two.screen is two.main)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(two.screen, HelpScreen))
        assert ("h, 1-2", "Switch host", True) in two.screen.rows


async def test_120x35_unit_panel_shows_the_warnings_before_the_facts() -> None:
    app = make_app()
    async with app.run_test(size=PANE) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await settled(pilot)
        shown = screen_text(app)
        assert "⚠ Restart=always: killing the" in shown
        assert "⚠ KillMode=process: stopping" in shown


async def test_the_result_toast_does_not_cover_the_log_when_the_panel_shows_it() -> None:
    # The verdict is in the Action panel: a toast saying "see the Action panel" hid the
    # log's new entry and the walkthrough line for 5-10 s (half the lower screen at 80x24).
    app = make_app()
    async with app.run_test(size=LAPTOP, notifications=True) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("D")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await pilot.press("y")
        await until(pilot, lambda: app.last_report is not None, what="the report")
        await settled(pilot)
        assert not [n for n in app._notifications if "Action panel" in n.message]
        assert "⚠ stopped and disabled" in screen_text(app)


async def test_the_result_is_toasted_when_another_screen_hides_the_panel() -> None:
    from gpudash.ui.screens import HelpScreen

    # the action waits on the host's clock, which stands still till stepped: help opens first
    app = make_app(DemoHost(clock=SteppedClock(), release_delay=2))
    async with app.run_test(size=LAPTOP, notifications=True) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await pilot.press("y")
        await wait_for(pilot, lambda: app.running)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        await until(pilot, lambda: app.last_report is not None, what="the report")
        await settled(pilot)
        toasts = [n for n in app._notifications if "Action panel" in n.message]
        assert len(toasts) == 1 and toasts[0].title.startswith("Reclaim unit")


async def test_the_selected_row_stays_in_view_when_holders_get_shorter() -> None:
    # When a reap ended, the Action panel grew by its verdict lines and Holders lost
    # theirs: the selected unit, on the last row shown, went out of view.
    from rich.text import Text

    from gpudash.ui.widgets.holders import COLUMNS, HolderRow

    def rows(keys: list[str]) -> list[HolderRow]:
        return [HolderRow(k, (Text(k), *(Text(""),) * (len(COLUMNS) - 1))) for k in keys]

    app = GpudashApp([DemoHost(clock=SteppedClock())], interval=3600.0, read_only=True, theme=None,
                     exec_options=None)
    async with app.run_test(size=PANE) as pilot:
        await wait_for(pilot, lambda: app.view.snapshot is not None)
        await settled(pilot)
        table = app.query_one(HoldersTable)
        table.show(rows([f"p:{n}" for n in range(1, 22)]))
        await settled(pilot)
        table.select_key("p:21")  # the last row, at the bottom of the view
        await settled(pilot)
        table.styles.max_height = 8  # what the grown Action panel leaves
        await settled(pilot)
        top = int(table.scroll_y)
        shown = table.scrollable_content_region.height - 1  # rows under the header
        assert top <= table.cursor_row < top + shown, (top, shown, table.cursor_row)


async def test_holders_flags_take_the_room_they_need_and_no_more() -> None:
    # The Flags column was 20 cells whether empty or not: at 120x35 the RSS was cut to
    # "9.", and "2×ORPHAN RESPAWNED UNIT INACTIVE" to "…RESPAWNED U".
    app = make_app()
    async with app.run_test(size=PANE) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await settled(pilot)
        worker = next(line for line in screen_text(app).splitlines() if "vLLM TP1 worker" in line)
        assert re.search(r"99 %\s+(\d+\s+)?\d+\.\d GiB", worker), worker  # CPU, SM%?, RSS
        await pilot.press("D")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await pilot.press("y")
        await until(pilot, lambda: app.last_report is not None, what="the report")
        await next_sample(pilot)  # the orphans, as the host has them now
        await settled(pilot)
        shown = screen_text(app)
        # no room for flags in full and Age (issue 20): short flags; the owner's row says
        # its own (the unit panel lists them all)
        assert "INACT" in shown
        worker = next(line for line in shown.splitlines() if "vLLM TP1 worker" in line)
        assert re.search(r"ORPH\s+99 %\s+\d+\.\d GiB\s+\d", worker), worker
    async with make_app().run_test(size=LAPTOP) as pilot:  # CPU stays in 80 columns
        app = pilot.app
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("D")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await pilot.press("y")
        await until(pilot, lambda: app.last_report is not None, what="the report")
        await next_sample(pilot)
        await settled(pilot)
        worker = next(line for line in screen_text(app).splitlines() if "vLLM TP1 worker" in line)
        assert re.search(r"ORPH(AN)?\s+99 %", worker), worker


async def test_80x24_confirm_says_how_to_answer_in_full() -> None:
    # The buttons' room cut "Run it?  y: confirm  n/Esc: cancel" to "n/Esc:".
    app = make_app()
    async with app.run_test(size=LAPTOP) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await settled(pilot)
        assert "n/Esc: cancel" in screen_text(app)


async def test_80x24_log_shows_the_outcome() -> None:
    # Time, host and a 40-cell action left the outcome 8 cells at 80 columns: "stopped a".
    # One host is named in the header; the log's host column is for several.
    app = make_app()
    async with app.run_test(size=LAPTOP) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await pilot.press("n")
        log = app.query_one(ActionLog)
        await wait_for(pilot, lambda: bool(log.entries))
        await settled(pilot)
        line = next(t for t in screen_text(app).splitlines() if "Reclaim vllm-minimax" in t)
        assert "cancelled: nothing was done" in line, line
    clock = SteppedClock()
    two = GpudashApp([DemoHost("a", clock=clock), DemoHost("b", clock=clock, seed=3)],
                     interval=0.25, read_only=False, theme=None, exec_options=None)
    async with two.run_test(size=(160, 50)) as pilot:
        await settled(pilot)
        assert "host" in [str(c.value) for c in two.query_one(ActionLog).columns]


async def test_120x35_a_long_verdict_never_scrolls_the_screen() -> None:
    # A swap to a model that cannot load ends with a long verdict: the Action panel grew
    # past what the screen had, the whole screen scrolled (header and GPUs out of view,
    # the walkthrough cut), and the server's log line was said twice.
    from gpudash.ui.models import ModelPicker

    deepseek_learned_smaller()
    app = make_app(DemoHost(clock=SteppedClock(), release_delay=1), welcome=True)  # + walkthrough
    async with app.run_test(size=PANE) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("w")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelPicker))
        await pilot.press(*"deepseek", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await pilot.press("y")
        await until(pilot, lambda: app.last_report is not None, what="the report")
        await settled(pilot)
        assert app.last_report is not None and app.last_report.verdict == "failed"
        assert app.screen.max_scroll_y == 0 and app.screen.scroll_y == 0
        shown = screen_text(app)
        assert "gpudash" in shown.splitlines()[0] and "✘ NOT confirmed" in shown
        assert app.query_one(HoldersTable).size.height >= 3
        panel = str(app.query_one("#progress").render())
        assert panel.count("ValueError: Free memory on device") == 1, panel
        assert "→ another process still holds GPU memory" in panel  # the advice stays


async def test_80x24_a_cut_verdict_says_where_the_rest_is() -> None:
    # At 80x24 a failed swap's verdict takes more rows than the screen has: the rest was
    # below the panel's edge with no word.
    from gpudash.ui.models import ModelPicker
    from gpudash.ui.widgets.progress import MORE_LOG_HIDDEN, ActionProgressPanel

    deepseek_learned_smaller()
    app = make_app(DemoHost(clock=SteppedClock(), release_delay=1), welcome=True)
    async with app.run_test(size=LAPTOP) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("w")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelPicker))
        await pilot.press(*"deepseek", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await pilot.press("y")
        await until(pilot, lambda: app.last_report is not None, what="the report")
        await settled(pilot)
        panel = app.query_one(ActionProgressPanel)
        assert panel.border_subtitle == MORE_LOG_HIDDEN  # at 80x24 the log gave way to it
        assert "cut: x, then Enter on its Action log entry" in screen_text(app)
        await pilot.press("x")  # the panel hidden, the log is back
        await wait_for(pilot, lambda: app.query_one(ActionLog).display)
        app.query_one(ActionLog).focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, DetailScreen))
        assert "crash-looping" in app.screen.body.plain
    async with make_app().run_test(size=(160, 50)) as pilot:  # room enough: no word
        app = pilot.app
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("D")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await pilot.press("y")
        await until(pilot, lambda: app.last_report is not None, what="the report")
        await settled(pilot)
        assert app.query_one(ActionProgressPanel).border_subtitle is None


async def test_120x35_a_cut_unit_panel_says_so() -> None:
    # After stop + disable the unit's warnings fill the panel at 120x35 and its facts
    # (Restart=, KillMode=, MainPID) fell below the edge with no word.
    from gpudash.ui.widgets.unit_panel import CUT, UnitPanel

    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await select(pilot, app, "u:session-4.scope")
        await settled(pilot)
        assert app.query_one(UnitPanel).border_subtitle is None  # it all fits
    app = make_app()
    async with app.run_test(size=PANE) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("D")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await pilot.press("y")
        await until(pilot, lambda: app.last_report is not None, what="the report")
        await next_sample(pilot)  # the unit as the host has it now
        await settled(pilot)
        assert "MainPID" not in screen_text(app)
        assert app.query_one(UnitPanel).border_subtitle == CUT
        assert "cut: Enter shows it all" in screen_text(app)


async def test_every_help_row_is_one_line_at_the_help_screens_widest() -> None:
    # Seen: at its width of 92 the enter row wrapped "(again: all)" onto a line of its own.
    from gpudash.ui.bindings import help_rows
    from gpudash.ui.screens import HelpScreen

    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await settled(pilot)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        await settled(pilot)
        lines = screen_text(app).splitlines()
        for _keys, description, _a in help_rows("main", {}, 1, {}):
            assert [line for line in lines if description in line], description
