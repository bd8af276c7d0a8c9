"""The memory history plot widget: all GPUs, or only the selected one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.text import Text

from gpudash.ui.plot import gpu_colour, render_history
from gpudash.ui.widgets.quiet import QuietStatic


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

    def show(
        self,
        history: Sequence[tuple[float, Mapping[int, int | None]]],
        gpus: Sequence[int],
        ymax_gib: float | None,
        title: str,
    ) -> None:
        self._history, self._gpus = list(history), list(gpus)
        self._ymax, self._title = ymax_gib, title
        self._redraw()

    def on_resize(self) -> None:
        self._redraw()

    def _redraw(self) -> None:
        width, height = self.content_size.width, self.content_size.height
        legend = Text(self._title + "  ", style="bold")
        for gpu in self._gpus:
            legend.append("━", style=gpu_colour(gpu))
            legend.append(f"{gpu} ")
        chart = render_history(
            self._history, self._gpus, width=width, height=max(0, height - 1), ymax_gib=self._ymax
        )
        out = Text()
        out.append_text(legend)
        out.append("\n")
        out.append_text(chart)
        self.update(out)
