"""The memory history plot widget: all GPUs, or only the selected one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.text import Text

from gpudash.ui.plot import gpu_colour, render_history
from gpudash.ui.widgets.quiet import QuietStatic

# With every GPU's memory as in the last drawing, the plot is drawn again only this often
# (seconds of samples): at 300 samples across ~120 braille dots a sample moves the lines
# by less than a dot, and drawing with plotext was a quarter of the dashboard's CPU.
# Any change of memory is drawn at once; every sample is in the history either way.
SHIFT_S = 5.0


class MemoryPlot(QuietStatic):
    """Used GiB per GPU over time, drawn by plotext; a legend line above it."""

    DEFAULT_CSS = """
    MemoryPlot { height: 1fr; width: 1fr; overflow: hidden; }
    """
    FIXED_SIZE = True  # the layout gives it its size, whatever it draws

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self._history: Sequence[tuple[float, Mapping[int, int | None]]] = ()
        self._gpus: Sequence[int] = ()
        self._ymax: float | None = None
        self._title = ""
        self._marks: tuple[float, ...] = ()  # host times where an action began
        # what the plot shows now: (gpus, ymax, title), the last sample's values, its time
        self._drawn: tuple[tuple[object, ...], Mapping[int, int | None], float] | None = None

    def show(
        self,
        history: Sequence[tuple[float, Mapping[int, int | None]]],
        gpus: Sequence[int],
        ymax_gib: float | None,
        title: str,
        marks: Sequence[float] = (),
    ) -> None:
        self._history, self._gpus = list(history), list(gpus)
        self._ymax, self._title, self._marks = ymax_gib, title, tuple(marks)
        last = self._history[-1] if self._history else None
        what = (tuple(self._gpus), ymax_gib, title, self._marks)
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
        legend = Text(self._title + "  ", style="bold")
        for gpu in self._gpus:
            legend.append("━", style=gpu_colour(gpu))
            legend.append(f"{gpu} ")
        if self._marks:
            legend.append("│", style="rgb(200,200,200)")
            legend.append("action ")
        chart = render_history(self._history, self._gpus, width=width,
                               height=max(0, height - 1), ymax_gib=self._ymax,
                               marks=self._marks)
        out = Text()
        out.append_text(legend)
        out.append("\n")
        out.append_text(chart)
        self.update(out)
