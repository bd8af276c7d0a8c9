"""Where an action ran, on the memory plot (issue 33, item 10: "utilisation and power
history, with markers where an action ran"; the markers part)."""

from __future__ import annotations

from rich.text import Text

from gpudash.ui.plot import MARK_RGB, render_history

HISTORY = [(1000.0 + t, {0: 50 * 1024, 1: 10 * 1024}) for t in range(0, 60)]


def marked_cells(text: Text) -> int:
    """How many characters are drawn in the marks' grey."""
    count = 0
    for span in text.spans:
        colour = getattr(span.style, "color", None)
        if colour is not None and colour.get_truecolor() == MARK_RGB:
            count += span.end - span.start
    return count


def test_an_action_is_a_grey_vertical_line_where_it_began() -> None:
    plain = render_history(HISTORY, [0, 1], width=60, height=12, ymax=96.0)
    marked = render_history(HISTORY, [0, 1], width=60, height=12, ymax=96.0,
                            marks=[1030.0])
    assert marked_cells(plain) == 0
    assert marked_cells(marked) >= 8  # a line over (most of) the chart's rows
    rows = [i for i, line in enumerate(marked.split()) if marked_cells(line)]
    assert len(rows) >= 8


def test_a_mark_outside_the_history_is_not_drawn() -> None:
    before = render_history(HISTORY, [0], width=60, height=12, ymax=96.0,
                            marks=[10.0, 5000.0])  # long before, and in the future
    assert marked_cells(before) == 0


async def test_the_dashboards_plot_marks_the_action_just_run() -> None:
    from test_ui import main_pid, make_app, run_confirmed, select

    from gpudash.demo.host import DemoHost
    from gpudash.domain.clock import SteppedClock

    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=(160, 50)) as pilot:
        await select(pilot, app, "u:vllm-minimax-m25.service")
        assert "action" not in str(app.main.plot.render())
        await select(pilot, app, f"p:{main_pid(app)}")
        await run_confirmed(pilot, app, "k")
        await pilot.pause(0.2)
        app.main.refresh_plot()
        await pilot.pause(0.1)
        shown = app.main.plot.render()
        assert "│action" in str(shown)
        # the line itself, in the marks' grey (the legend's │ is one cell of it)
        assert repr(shown).count(f"Color({', '.join(map(str, MARK_RGB))})") > 2
