"""The GPU table: one row per GPU with a memory bar coloured by fullness."""

from __future__ import annotations

from rich.text import Text
from textual.geometry import Size
from textual.widget import Widget

from gpudash.domain.model import Gpu, HostSnapshot
from gpudash.domain.units import NA, celsius, gib_of, percent, watts
from gpudash.ui.palette import Palette
from gpudash.ui.text import literal, same_text
from gpudash.ui.widgets.celltable import CellTable

_EIGHTHS = " ▏▎▍▌▋▊▉"
BAR_WIDTH = 20


def memory_bar(used: int | None, total: int | None, pal: Palette, width: int = BAR_WIDTH) -> Text:
    """``████▌░░░  94.5/95.6 GiB`` — block characters, coloured by how full the GPU is."""
    if used is None or total is None or total <= 0:
        return Text("░" * width + f" {NA:>13}", style=pal.muted)
    fraction = max(0.0, min(1.0, used / total))
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    filled = "█" * full + (_EIGHTHS[part] if part else "")
    text = Text(filled, style=pal.fullness(fraction))
    text.append("░" * (width - len(filled)), style=pal.empty)
    text.append(f" {gib_of(used, total):>13}")
    return text


COLUMNS = (
    ("gpu", "GPU", 3),
    ("name", "Name", 22),
    ("mem", "Memory (used/total)", BAR_WIDTH + 14),
    ("util", "Util", 5),
    ("temp", "Temp", 6),
    ("power", "Power/limit", 11),
)


def gpu_cells(gpu: Gpu, pal: Palette) -> list[Text]:
    if gpu.error:
        name = literal(gpu.error, style=pal.error)
    else:
        name = literal((gpu.name or NA).removeprefix("NVIDIA "))
    return [
        Text(str(gpu.index), justify="right"),
        name,
        memory_bar(gpu.memory_used_mib, gpu.memory_total_mib, pal),
        Text(percent(gpu.utilization_pct), justify="right"),
        Text(celsius(gpu.temperature_c), justify="right"),
        Text(watts(gpu.power_w, gpu.power_limit_w), justify="right"),
    ]


class GpuTable(CellTable):
    """GPUs of the shown host; rows keyed by GPU index so the cursor survives refreshes."""

    DEFAULT_CSS = """
    GpuTable { height: auto; max-height: 12; }
    """

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = False
        for key, label, width in COLUMNS:
            self.add_column(label, key=key, width=width)
        self._cells: dict[str, list[Text]] = {}
        # what each row was drawn from: the decoder keeps the very object of a GPU whose
        # readings did not change, so such a row is not built again to compare
        self._drawn: dict[str, Gpu] = {}
        self._pal: Palette | None = None

    def show(self, snapshot: HostSnapshot | None, pal: Palette) -> None:
        """Update rows in place; rebuild only when the set of GPUs changed. Only cells
        that changed are touched: any ``update_cell`` makes the table draw all its rows
        again, which is most of what a sample costs."""
        gpus = [] if snapshot is None else list(snapshot.gpus)
        keys = [str(g.index) for g in gpus]
        same_pal, self._pal = pal == self._pal, pal
        if keys != list(self._cells) or self.row_count != len(keys):
            cursor = self.selected_gpu()
            self.clear()
            self._cells = {}
            for gpu in gpus:
                cells = gpu_cells(gpu, pal)
                self.add_row(*cells, key=str(gpu.index))
                self._cells[str(gpu.index)] = cells
            self._drawn = {str(g.index): g for g in gpus}
            if cursor is not None and str(cursor) in keys:
                self.move_cursor(row=keys.index(str(cursor)))
            return
        changes = {}
        for gpu in gpus:
            key = str(gpu.index)
            if same_pal and self._drawn.get(key) is gpu:
                continue
            self._drawn[key] = gpu
            before = self._cells[key]
            cells = gpu_cells(gpu, pal)
            changes[key] = {col: cell for (col, _, _), old, cell
                            in zip(COLUMNS, before, cells, strict=True)
                            if not same_text(old, cell)}
            self._cells[key] = cells
        self.set_rows(changes)

    def selected_gpu(self) -> int | None:
        if not self.row_count:
            return None
        key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        return None if key is None else int(key)


GRID_BAR = 10
GRID_CELL = 5 + GRID_BAR + 1 + 13 + 2 + 6  # "GPU0 " bar " 94.5/95.6 GiB" "  45 °C"
GRID_GAP = 2


def grid_cell(gpu: Gpu, pal: Palette) -> Text:
    """``GPU0 █████████▉ 94.5/95.6 GiB  45 °C``: one GPU in a line's half."""
    cell = Text(f"GPU{gpu.index} ".ljust(5))
    if gpu.error:
        cell.append_text(literal(gpu.error, style=pal.error))
        return cell
    cell.append_text(memory_bar(gpu.memory_used_mib, gpu.memory_total_mib, pal, GRID_BAR))
    cell.append(f"  {celsius(gpu.temperature_c):>6}", style="dim")
    return cell


def per_line(width: int) -> int:
    """Grid cells that fit in ``width`` columns (at least one)."""
    return max(1, (width + GRID_GAP) // (GRID_CELL + GRID_GAP))


class GpuGrid(Widget):
    """The GPUs two or more to a line, for a terminal too small for the table."""

    DEFAULT_CSS = """
    GpuGrid { height: auto; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._gpus: tuple[Gpu, ...] = ()
        self._pal: Palette | None = None

    def show(self, snapshot: HostSnapshot | None, pal: Palette) -> None:
        gpus = () if snapshot is None else snapshot.gpus
        if pal == self._pal and len(gpus) == len(self._gpus) and all(
                a is b for a, b in zip(gpus, self._gpus, strict=True)):
            return  # the very GPUs drawn (the decoder keeps unchanged ones): nothing to do
        relayout = len(gpus) != len(self._gpus)
        self._gpus, self._pal = gpus, pal
        self.refresh(layout=relayout)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        # Lines follow from the width the layout offers, not from the last drawing.
        return max(1, -(-len(self._gpus) // per_line(width)))

    def render(self) -> Text:
        if self._pal is None:
            return Text("")
        cols = per_line(self.content_size.width)
        out = Text(no_wrap=True, overflow="ellipsis")
        for i, gpu in enumerate(self._gpus):
            if i:
                out.append("\n" if i % cols == 0 else " " * GRID_GAP)
            cell = grid_cell(gpu, self._pal)
            cell.truncate(GRID_CELL, pad=True)
            out.append_text(cell)
        return out
