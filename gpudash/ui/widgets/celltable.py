"""A DataTable whose cell updates redraw only the row they are in.

Textual's ``DataTable.update_cell`` bumps one counter that every render cache is keyed
by, so changing one cell (a holder's age, once a second) renders every visible cell of
the table again: with a 200-column command cell per row, that was most of the CPU the
dashboard spent per sample. ``set_cells`` stores the values the same way and drops only
the cached renders of the cells it changed (and the assembled lines of that row alone), then
asks for a repaint of that row alone, if it is on screen at all.

It reaches into the DataTable's caches (Textual 8.2); where they are not as expected,
it falls back to ``update_cell``, which is always right, only slower.
"""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text
from textual.geometry import Region
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist, ColumnKey, RowKey

_CACHES = ("_data", "_row_locations", "_column_locations", "_row_renderable_cache",
           "_cell_render_cache", "_row_render_cache", "_line_cache", "_update_count",
           "_get_offsets", "_get_row_region", "_refresh_region")


class CellTable(DataTable[Text]):
    """``DataTable`` plus ``set_cells``/``set_rows``: new values for some cells; column
    labels are literal text."""

    def add_column(self, label: str | Text, *, width: int | None = None,
                   key: str | None = None, default: Text | None = None) -> ColumnKey:
        """DataTable's, with a ``str`` label taken as it is: DataTable parses it as Rich
        markup, whose emoji codes alone (rich._emoji_codes) are 1.4 MB once loaded."""
        return super().add_column(Text(label) if isinstance(label, str) else label,
                                  width=width, key=key, default=default)

    def set_cells(self, row_key: str, cells: Mapping[str, Text]) -> None:
        """Store ``cells`` (column key -> value) in the row ``row_key``; redraw that row."""
        self.set_rows({row_key: cells})

    def set_rows(self, changes: Mapping[str, Mapping[str, Text]]) -> None:
        """``set_cells`` for several rows at once (row key -> column key -> value): each
        render cache is looked through once, not once per row."""
        changes = {row: cells for row, cells in changes.items() if cells}
        if not changes:
            return
        if not all(hasattr(self, name) for name in _CACHES):
            for row_key, cells in changes.items():
                for column, value in cells.items():
                    self.update_cell(row_key, column, value)
            return
        indexes, changed = self._store(changes)
        # Cache keys (Textual 8.2): cells (row key, column key, ...), rows (row key, ...),
        # a row's renderables (update count, row index), lines (y, ...).
        for index in indexes.values():
            self._row_renderable_cache.discard((self._update_count, index))
        for cell_key in [k for k in self._cell_render_cache.keys() if k[:2] in changed]:
            self._cell_render_cache.discard(cell_key)
        for row_cache_key in [k for k in self._row_render_cache.keys() if k[0] in indexes]:
            self._row_render_cache.discard(row_cache_key)
        for line_key in [k for k in self._line_cache.keys() if self._line_of(k[0]) in indexes]:
            self._line_cache.discard(line_key)
        for index in indexes.values():
            self._refresh_shown_row(index)

    def _refresh_shown_row(self, index: int) -> None:
        """``refresh_row`` cut to what the table shows. Textual's row region is as wide as
        the row's cells (278 columns with a long command), and the screen clips a repaint
        to the table's container, not to the table: the unit panel beside the holders was
        drawn again with every row that changed."""
        shown = Region(int(self.scroll_x), int(self.scroll_y), *self.size)
        region = self._get_row_region(index).intersection(shown)
        if region:
            self._refresh_region(region)

    def _store(self, changes: Mapping[str, Mapping[str, Text]]
               ) -> tuple[dict[RowKey, int], set[tuple[RowKey, ColumnKey]]]:
        """Put the new values in the table's data: the rows' indexes, the changed cells."""
        indexes: dict[RowKey, int] = {}
        changed: set[tuple[RowKey, ColumnKey]] = set()
        for row_key, cells in changes.items():
            row = RowKey(row_key)
            index = self._row_locations.get(row)
            if index is None:
                raise CellDoesNotExist(f"No row with key {row_key!r}")
            columns = {ColumnKey(c) for c in cells}
            if any(c not in self._column_locations for c in columns):
                raise CellDoesNotExist(f"No column among {sorted(cells)}")
            data = self._data[row]
            for column, value in cells.items():
                data[ColumnKey(column)] = value
            indexes[row] = index
            changed |= {(row, c) for c in columns}
        return indexes, changed

    def _line_of(self, y: int) -> RowKey | None:
        """The row the table's line ``y`` (header lines included) draws."""
        try:
            return self._get_offsets(y)[0]
        except (LookupError, IndexError):
            return None
