"""The history plot widget: memory, SM utilisation or power per GPU; all GPUs, or only
the selected one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.text import Text

from gpudash.ui.gpu_history import MEMORY, Metric
from gpudash.ui.plot import gpu_colour, render_history
from gpudash.ui.widgets.quiet import QuietStatic, quiet_border

# With every GPU's memory as in the last drawing, the plot is drawn again only this often
# (seconds of samples): at 300 samples across ~120 braille dots a sample moves the lines
# by less than a dot, and drawing with plotext was a quarter of the dashboard's CPU.
# Any change of memory is drawn at once; every sample is in the history either way.
SHIFT_S = 5.0


class HistoryPlot(QuietStatic):
    """One metric per GPU over time (used GiB, SM %, W), drawn by plotext; a legend line
    above it."""

    DEFAULT_CSS = """
    HistoryPlot { height: 1fr; width: 1fr; overflow: hidden; }
    """
    FIXED_SIZE = True  # the layout gives it its size, whatever it draws

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self._history: Sequence[tuple[float, Mapping[int, int | None]]] = ()
        self._gpus: Sequence[int] = ()
        self._ymax: float | None = None
        self._title = ""
        self._marks: tuple[float, ...] = ()  # host times where an action began
        self.metric: Metric = MEMORY
        # what the plot shows now: (gpus, ymax, title), the last sample's values, its time
        self._drawn: tuple[tuple[object, ...], Mapping[int, int | None], float] | None = None

    def show(
        self,
        history: Sequence[tuple[float, Mapping[int, int | None]]],
        gpus: Sequence[int],
        ymax: float | None,
        title: str,
        marks: Sequence[float] = (),
        metric: Metric = MEMORY,
    ) -> None:
        self._history, self._gpus = history, list(gpus)  # drawn from only when redrawn
        self._ymax, self._title, self._marks = ymax, title, tuple(marks)
        self.metric = metric
        # set again, the same, it would redraw the whole plot every sample (Textual 8)
        quiet_border(self, "title",
                     f"{metric.title[0].upper()}{metric.title[1:]} history ({metric.unit})")
        last = self._history[-1] if len(self._history) else None
        what = (tuple(self._gpus), ymax, title, self._marks, metric.name)
        drawn = self._drawn
        if (last is not None and drawn is not None and len(self._history) > 2
                and drawn[0] == what and drawn[1] == last[1] and last[0] - drawn[2] < SHIFT_S):
            return  # only time moved on: the lines shift by a fraction of a cell
        self._redraw()
        self._drawn = None if last is None else (what, dict(last[1]), last[0])

    def on_resize(self) -> None:
        self._redraw()

    def _redraw(self) -> None:
        width, height = self.content_size.width, self.content_size.height
        metric = self.metric
        legend = Text(self._title + "  ", style="bold")
        for gpu in self._gpus:
            legend.append("━", style=gpu_colour(gpu))
            legend.append(f"{gpu} ")
        if self._marks:
            legend.append("│", style="rgb(200,200,200)")
            legend.append("action ")
        chart = render_history(self._history, self._gpus, width=width,
                               height=max(0, height - 1), ymax=self._ymax,
                               marks=self._marks, scale=metric.scale, what=metric.title)
        out = Text()
        out.append_text(legend)
        out.append("\n")
        out.append_text(chart)
        self.update(out)
