"""The chart's library is imported without its entry point (issue 18, item 5: RSS).

plotext's ``__init__`` builds a documentation browser at import (0.11 s, 1 MB) and pulls
in 164 modules; the dashboard imports the API's modules only. The chart it draws must be
the one the whole package draws, and a later ``import plotext`` must still work.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

DRAW = textwrap.dedent("""
    import json, sys
    if sys.argv[1] == "whole":
        import plotext  # the entry point first: plot.py then takes the package as it is
    from gpudash.ui.plot import render_history
    if sys.argv[2] == "after another":  # what the figure kept of a chart must not show
        render_history([(t, {3: 90000 - 500 * t}) for t in range(300)], [3], width=50,
                       height=9, ymax=None, marks=[150.0])
    history = [(t, {0: 1000 + 300 * t, 1: 5000, 2: None}) for t in range(0, 40, 2)]
    chart = render_history(history, [0, 1, 2], width=70, height=14, ymax=20)
    runner = "unittest" in sys.modules
    import plotext
    print(json.dumps({"chart": chart.plain, "styles": sorted({str(s.style) for s in chart.spans}),
                      "docs": "plotext._doc.doc" in sys.modules, "runner": runner,
                      "api": callable(getattr(plotext.figure, "plot_size", None))}))
""")


def _draw(how: str, first: str = "alone") -> dict:
    done = subprocess.run([sys.executable, "-c", DRAW, how, first], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_the_lean_import_draws_what_the_whole_package_draws() -> None:
    lean, whole = _draw("lean"), _draw("whole")
    assert "⣀" in lean["chart"] or "⠤" in lean["chart"] or "⠒" in lean["chart"], lean["chart"]
    assert lean["chart"] == whole["chart"] and lean["styles"] == whole["styles"]
    assert lean["docs"] is False and whole["docs"] is True  # its docs were never built
    assert lean["runner"] is False  # nor its test runner imported (unittest)
    assert lean["api"] and whole["api"]  # and `import plotext` still gives its API
    again = _draw("lean", "after another")  # the figure is cleared as plotext clears it
    assert again["chart"] == whole["chart"] and again["styles"] == whole["styles"]


def test_the_time_axis_has_whole_steps_with_their_unit() -> None:
    # issue 33, item 9: the plot's time axis had no unit and ticks like -217.2
    from gpudash.ui.plot import render_history, time_ticks

    assert time_ticks(-217.2, 0, 56, since_start=False) == (
        [-180.0, -120.0, -60.0, 0.0], ["-3m", "-2m", "-1m", "now"])
    assert time_ticks(0, 13.2, 60, since_start=True) == ([0.0, 5.0, 10.0], ["0", "5s", "10s"])
    history = [(1000.0 + i, {0: 40_000 + 100 * i}) for i in range(218)]
    axis = render_history(history, [0], width=60, height=10, ymax=95.6).plain
    assert "-3m" in axis and "now" in axis and "-217" not in axis, axis
