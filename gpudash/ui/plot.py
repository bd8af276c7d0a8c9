"""Memory history as text: plotext draws it, Rich shows it. The one module that knows plotext.

plotext keeps a figure, so every call resets it completely before drawing.

plotext's package entry point imports all of it: its documentation browser, test runner,
demos and its docs. The dashboard needs its API and two primitives, so it imports those
modules alone, and the whole package where that layout is not there (another plotext
release). Measured on 2026-12-06 in a process with Rich loaded (RSS, psutil): the whole
package is 190 modules, 14.3 MB and 0.10 s; the modules alone, with one plot drawn, are
110 modules, 10.9 MB and 0.03 s, for a dashboard that must stay under 50 MB.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich.color import Color
from rich.text import Text

from gpudash.domain.units import MIB_PER_GIB

# plotext aborts the whole process (a C++ std::bad_alloc, no Python exception to catch)
# on some points outside the y limit, over a wide x range: a host whose clock jumps, or
# that says it uses more than it has, must never get such points to it. Only the last
# WINDOW_S seconds before the latest sample are drawn, each reading within 0..ymax.
WINDOW_S = 6 * 3600.0

# One colour per GPU index, readable on dark and light backgrounds.
GPU_COLOURS = (
    "#ff5f5f", "#5fafff", "#5fd787", "#ffaf5f", "#af87ff", "#5fd7d7", "#ff87d7", "#d7d75f",
)


def _plotext() -> tuple[Any, Any, Any]:
    """(figure, marker, pixel) of plotext 6, without the modules its entry point adds.

    Its API module imports its test runner (unittest), demos, image and video methods
    besides: the figure is made as that module makes it, from plotext's terminal, and the
    API is loaded only if someone reads ``plotext.<name>`` later."""
    if "plotext" not in sys.modules:
        spec = importlib.util.find_spec("plotext")
        if spec is not None and spec.submodule_search_locations is not None:
            package = types.ModuleType("plotext")  # its path, not its __init__
            package.__path__ = list(spec.submodule_search_locations)
            package.__spec__ = spec
            sys.modules["plotext"] = package
            try:
                from plotext._kernel.terminal import terminal
                from plotext._primitives.marker import marker
                from plotext._primitives.pixel import pixel
                figure = terminal()._master
            except (ImportError, AttributeError):
                del sys.modules["plotext"]  # another layout: the whole package, below
            else:
                package.__getattr__ = _api_of(package, marker, pixel)  # type: ignore[method-assign]
                return figure, marker, pixel
    import plotext

    return plotext.figure, plotext.marker, plotext.pixel


def _api_of(package: types.ModuleType, marker: Any, pixel: Any) -> Any:
    """The lean package's ``__getattr__``: whoever imports plotext later and reads a name
    of its API gets it (loaded then), as from the whole package (not its docs)."""
    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        from plotext._kernel import api

        vars(package).pop("__getattr__", None)
        vars(package).update({k: v for k, v in vars(api).items() if not k.startswith("_")},
                             marker=marker, pixel=pixel)
        try:
            return vars(package)[name]
        except KeyError:
            raise AttributeError(name) from None

    return __getattr__


@functools.cache
def _kit() -> tuple[Any, Any, Any]:
    """plotext, imported when a plot is first drawn: the dashboard that never shows one
    never pays its 5 MB."""
    return _plotext()


def _clear(fig: Any) -> None:
    """``fig.clear()`` but its first step, which reads the terminal's size (through
    plotext's API module, with its test runner): the size is set right after."""
    if not hasattr(fig, "_parts"):  # another plotext
        fig.clear()
        return
    fig._parts.clear()
    for step in (fig.clear.subplots, fig.clear.data, fig.clear.settings, fig.clear.pixels,
                 fig.clear.styles):
        step()


MARK_RGB = (200, 200, 200)  # where an action began: grey on dark and light themes


def gpu_colour(index: int) -> str:
    return GPU_COLOURS[index % len(GPU_COLOURS)]


def _rgb(colour: str) -> tuple[int, int, int]:
    triplet = Color.parse(colour).get_truecolor()
    return (triplet.red, triplet.green, triplet.blue)


def render_history(
    history: Iterable[tuple[float, Mapping[int, int | None]]],
    gpus: Sequence[int],
    *,
    width: int,
    height: int,
    ymax: float | None,
    marks: Sequence[float] = (),
    scale: float = MIB_PER_GIB,
    what: str = "memory",
) -> Text:
    """A line chart of one figure per GPU over the last samples (x: seconds before the
    last); a vertical line at each of ``marks`` (host times: where an action began). The
    values are raw (memory in MiB): ``/ scale`` is what is drawn, up to ``ymax``."""
    if width < 20 or height < 5:
        return Text("(too small for a plot)")
    points = list(history)
    if not points:
        return Text("waiting for samples…")
    last = points[-1][0]
    shown = [(t - last, used) for t, used in points if -WINDOW_S <= t - last <= 0]
    first = shown[0][0] if shown else 0.0
    at = [m - last for m in marks if first <= m - last <= 0]
    return _draw(shown, gpus, width, height, ymax, lone=-1.0, marks=at, scale=scale,
                 what=what)


def render_series(
    series: Sequence[tuple[float, Mapping[int, int | None]]],
    gpus: Sequence[int],
    *,
    width: int,
    height: int,
    ymax_gib: float | None,
) -> Text:
    """A line chart of used GiB per GPU over one action (x: seconds from its first sample,
    as the outcome record keeps them)."""
    if width < 20 or height < 5:
        return Text("(too small for a plot)")
    shown = [(t, used) for t, used in series if 0 <= t <= WINDOW_S]
    if not shown:
        return Text("no memory recorded for this action")
    return _draw(shown, gpus, width, height, ymax_gib, lone=1.0)


def _draw(
    points: Sequence[tuple[float, Mapping[int, int | None]]],
    gpus: Sequence[int],
    width: int,
    height: int,
    ymax: float | None,
    lone: float,
    marks: Sequence[float] = (),
    scale: float = MIB_PER_GIB,
    what: str = "memory",
) -> Text:
    """``points`` (x already within a WINDOW_S span) drawn with one colour per GPU. A lone
    sample is a short flat line ``lone`` seconds long: back in time for a history (its x
    is "seconds before the last"), on from it for an action's series (seconds from its
    first: a fix's report had one sample, and an axis from -1 to 0)."""
    fig, marker, pixel = _kit()
    _clear(fig)
    fig.plot_size(width, height)
    fig.theme("simple")
    fig.legend(False)
    drawn = False
    top = ymax if ymax else None
    for gpu in gpus:
        shown = [
            (x, min(raw / scale, top) if top is not None else raw / scale)
            for x, used in points
            if (raw := used.get(gpu)) is not None
        ]
        xs, ys = flat_runs_ends([x for x, _ in shown], [max(0.0, y) for _, y in shown])
        if not xs:
            continue
        if len(xs) == 1:  # a single sample still shows as a short flat line
            xs, ys = sorted([xs[0], xs[0] + lone]), [ys[0], ys[0]]
        signal = fig.signal(xs, ys, marker=marker("braille", pixel(_rgb(gpu_colour(gpu)))))
        signal.lines(True)
        fig.draw(signal)
        drawn = True
    if not drawn:
        return Text(f"no {what} readings (N/A)")
    high = ymax or max((m / scale for _x, u in points for m in u.values() if m),
                           default=1.0)
    for x in marks:  # an action began here: a vertical line over the whole height
        mark = fig.signal([x, x], [0.0, high], marker=marker("braille", pixel(MARK_RGB)))
        mark.lines(True)
        fig.draw(mark)
    if ymax:
        fig.ruler("y").lim(0, ymax)
    xs = [x for x, _ in points]
    xs += [xs[0] + lone] if len(set(xs)) == 1 else []  # a lone sample's short line
    positions, labels = time_ticks(min(xs), max(xs), width, since_start=lone > 0)
    if positions:
        fig.ruler("x").ticks(positions, labels)
    return Text.from_ansi(str(fig.build()), no_wrap=True)


def flat_runs_ends(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    """The points a line through ``xs, ys`` needs: where a reading stays the same, its
    first and last sample only (the line between them is the same line). Memory is flat
    most of the time: 300 samples of one GPU are often two points, and plotext's cost is
    per point (a quarter of the dashboard's CPU, with five minutes of history)."""
    last = len(ys) - 1
    keep = [i for i in range(last + 1)
            if i in (0, last) or ys[i] != ys[i - 1] or ys[i] != ys[i + 1]]
    if len(keep) == len(ys):
        return xs, ys
    return [xs[i] for i in keep], [ys[i] for i in keep]


# Tick steps in seconds a reader counts in: never "-217.2".
NICE_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600)


def seconds_label(seconds: float, unit: int = 1) -> str:
    """A tick's time with its unit: ``45s``; in minutes (``unit`` 60) ``2m``, ``1m30s``;
    in hours ``2h``. One unit per axis: the step's."""
    s = int(round(abs(seconds)))
    if unit < 60:
        text = f"{s}s"
    elif unit < 3600:
        text = f"{s // 60}m" + (f"{s % 60}s" if s % 60 else "")
    else:
        text = f"{s // 3600}h" + (f"{s % 3600 // 60}m" if s % 3600 // 60 else "")
    return text if seconds >= 0 else "-" + text


def time_ticks(lo: float, hi: float, width: int, *, since_start: bool
               ) -> tuple[list[float], list[str]]:
    """The x ticks of a chart from ``lo`` to ``hi`` seconds: whole steps of ``NICE_STEPS``,
    at most one per 12 columns (and six), labelled with their unit; a history's last is
    ``now``, an action's first ``0``."""
    span = hi - lo
    if span <= 0:
        return [], []
    most = max(2, min(6, width // 12))
    step = next((n for n in NICE_STEPS if span / n <= most), NICE_STEPS[-1])
    first = -(-lo // step) * step  # the first whole step at or after lo
    positions = []
    at = first
    while at <= hi + 1e-9:
        positions.append(float(at))
        at += step
    labels = [("0" if since_start else "now") if p == 0 else seconds_label(p, step)
              for p in positions]
    return positions, labels
