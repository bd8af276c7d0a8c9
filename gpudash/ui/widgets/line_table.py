"""A table that draws only the rows on screen, in an order it is given.

Textual's ``DataTable`` keeps every row's cells and measures every cell it is given: at
5,000 hosts a sort or a widened filter (``clear()`` and an ``add_row`` per row) took
seconds. This table keeps no cells at all: it holds the shown order (a list of row ids),
each row's height, and a function that gives a row's cells when the row is drawn. A new
order is a new list; a changed row is a dropped cache entry and a repaint of its lines,
only if they are on screen. It is a ``ScrollView`` on Textual's line API
(``render_line``), as Textual's own ``DataTable`` and ``Log`` are.

Cells are ``rich.text.Text`` the caller built (host text already literal): never parsed
as markup here. Columns have the widths the caller gives; a cell longer than its column
is cut, or wrapped over the row's lines where the row is taller than one line.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from itertools import accumulate
from typing import ClassVar

from rich.console import Console
from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.message import Message
from textual.renderables.styled import Styled
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets.data_table import Column, ColumnKey

CellsOf = Callable[[int], Mapping[str, Text]]
@lru_cache(maxsize=8192)
def _meta(row: int, column: int) -> Style:
    """A cell's place, as style meta (as DataTable's cells carry theirs)."""
    return Style.from_meta({"row": row, "column": column})


_EMPTY = Text()  # a cell the row does not have (drawn, never changed)
CACHE_ROWS = 512  # rendered rows kept (a screenful is ~50): dropped whole when over


class LineTable(ScrollView, can_focus=True):
    """Rows ``order`` (ids), each drawn from ``cells_of(id)``, under one header line."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "line-table--header", "line-table--cursor", "line-table--even-row",
        "line-table--odd-row",
    }
    # DataTable's look (Textual 8.2), so the fleet looks as it did
    DEFAULT_CSS = """
    LineTable {
        background: $surface;
        color: $foreground;
        &:focus {
            background-tint: $foreground 5%;
            & > .line-table--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .line-table--header { background-tint: $foreground 5%; }
        }
        &:dark > .line-table--even-row { background: $surface-darken-1 40%; }
        & > .line-table--header { text-style: bold; background: $panel; color: $foreground; }
        &:ansi > .line-table--header { background: ansi_bright_blue; color: ansi_default; }
        & > .line-table--even-row { background: $surface-lighten-1 50%; }
        & > .line-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Select", show=False),
        Binding("up", "cursor_up", "Cursor up", show=False),
        Binding("down", "cursor_down", "Cursor down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home", "scroll_top", "First row", show=False),
        Binding("end", "scroll_bottom", "Last row", show=False),
    ]
    cell_padding = 1  # on each side of a cell, as DataTable's default

    class Highlighted(Message):
        """The cursor is on row ``row_id``."""

        def __init__(self, row_id: int) -> None:
            super().__init__()
            self.row_id = row_id

    class Selected(Message):
        """Enter (or a click on the cursor's row) on row ``row_id``."""

        def __init__(self, row_id: int) -> None:
            super().__init__()
            self.row_id = row_id

    class HeaderSelected(Message):
        """A click on column ``key``'s title."""

        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    def __init__(self, cells_of: CellsOf, *, id: str | None = None) -> None:  # noqa: A002
        super().__init__(id=id)
        self.cells_of = cells_of
        self.columns: dict[ColumnKey, Column] = {}
        self._widths: tuple[tuple[str, int], ...] = ()  # (key, width) of each column
        self._order: list[int] = []
        self._heights: dict[int, int] = {}  # rows taller than one line
        # the first line of each row, and the total at the end
        self._starts: Sequence[int] = range(1)
        self._where: dict[int, int] = {}  # row id -> its place in the order
        self.cursor_row = 0
        # row id -> (its cells as drawn, the key they were drawn with, the lines)
        self._cache: dict[int, tuple[Mapping[str, Text], tuple[object, ...], list[Strip]]] = {}
        self._header: tuple[tuple[object, ...], Strip] | None = None
        # (base, header, cursor, even row, odd row) styles, read once per repaint
        self._styles: tuple[Style, Style, Style, Style, Style] | None = None
        self._app_console: Console | None = None  # (``self.app`` costs a lookup each time)

    # --- what the caller sets ------------------------------------------------------------

    def set_columns(self, columns: Sequence[tuple[str, str, int]]) -> None:
        """(key, title, width) of each column, left to right."""
        self.columns = {ColumnKey(key): Column(ColumnKey(key), Text(title), width)
                        for key, title, width in columns}
        self._widths = tuple((key, width) for key, _title, width in columns)
        self._cache.clear()
        self._header = None
        self._resize_virtual()
        self.refresh()

    def set_order(self, order: Sequence[int], heights: Mapping[int, int] | None = None,
                  *, cursor: int | None = None) -> None:
        """Show rows ``order`` (``heights``: those taller than one line); the cursor on row
        id ``cursor`` where it is shown, else at the same place, within the rows."""
        self._order = list(order)
        self._heights = {i: h for i, h in (heights or {}).items() if h != 1}
        self._where = {row: at for at, row in enumerate(self._order)}
        self._restart()
        at = self._where.get(cursor) if cursor is not None else None
        self.cursor_row = at if at is not None else min(self.cursor_row,
                                                        max(0, len(self._order) - 1))
        self._resize_virtual()
        self.refresh()
        if self._order:
            self.call_after_refresh(self._cursor_visible)
            self.post_message(self.Highlighted(self._order[self.cursor_row]))

    def row_changed(self, row_id: int) -> None:
        """Row ``row_id`` has new cells: drawn again if it is on screen."""
        self._cache.pop(row_id, None)
        at = self._where.get(row_id)
        if at is None:
            return
        top = self._starts[at] + 1  # the header is line 0
        self.refresh_lines(top, self._starts[at + 1] - self._starts[at])

    def visible_rows(self) -> list[int]:
        """Ids of the rows on screen now (some lines of them at least)."""
        if not self._order:
            return []
        first = self.scroll_offset.y
        last = first + max(0, self.size.height - 1)
        a = max(0, bisect_right(self._starts, first) - 1)
        b = min(len(self._order), bisect_right(self._starts, last))
        return self._order[a:b]

    def _restart(self) -> None:
        if self._heights:
            self._starts = [0, *accumulate(self._heights.get(i, 1) for i in self._order)]
        else:  # every row one line: no need to walk them
            self._starts = range(len(self._order) + 1)

    def _resize_virtual(self) -> None:
        width = sum(self._cell_width(c) for c in self.columns.values())
        self.virtual_size = Size(width, 1 + self._starts[-1])

    # --- what the caller reads -----------------------------------------------------------

    @property
    def row_count(self) -> int:
        return len(self._order)

    @property
    def cursor_id(self) -> int | None:
        """The id of the row under the cursor (None: no rows)."""
        return self._order[self.cursor_row] if 0 <= self.cursor_row < len(self._order) else None

    def get_row(self, row_id: str | int) -> list[Text]:
        """Row ``row_id``'s cells in column order, as they are drawn (for tests and
        tools); KeyError where it is not shown."""
        rid = int(row_id)
        if rid not in self._where:
            raise KeyError(row_id)
        cells = self.cells_of(rid)
        return [cells[str(k.value)] for k in self.columns]

    # --- the cursor ----------------------------------------------------------------------

    def move_cursor(self, *, row: int, animate: bool = False) -> None:
        """The cursor to place ``row`` of the order (clamped), scrolled into view."""
        if not self._order:
            return
        row = max(0, min(row, len(self._order) - 1))
        old = self.cursor_id
        self.cursor_row = row
        if old is not None and old in self._where:
            self.row_changed(old)
        self.row_changed(self._order[row])
        self._cursor_visible(animate)
        self.post_message(self.Highlighted(self._order[row]))

    def _cursor_visible(self, animate: bool = False) -> None:
        if not self._order or self.cursor_row >= len(self._order):
            return
        top, end = self._starts[self.cursor_row], self._starts[self.cursor_row + 1]
        room = max(1, self.size.height - 1)
        y = self.scroll_offset.y
        if top < y:
            self.scroll_to(y=top, animate=animate, immediate=True)
        elif end > y + room:
            self.scroll_to(y=end - room, animate=animate, immediate=True)

    def action_cursor_up(self) -> None:
        self.move_cursor(row=self.cursor_row - 1)

    def action_cursor_down(self) -> None:
        self.move_cursor(row=self.cursor_row + 1)

    def action_page_up(self) -> None:
        self.move_cursor(row=self.cursor_row - max(1, self.size.height - 2))

    def action_page_down(self) -> None:
        self.move_cursor(row=self.cursor_row + max(1, self.size.height - 2))

    def action_scroll_top(self) -> None:
        self.move_cursor(row=0)

    def action_scroll_bottom(self) -> None:
        self.move_cursor(row=len(self._order) - 1)

    def action_select_cursor(self) -> None:
        if (row := self.cursor_id) is not None:
            self.post_message(self.Selected(row))

    def on_click(self, event: events.Click) -> None:
        at = event.get_content_offset(self)
        if at is None:
            return
        if at.y == 0:
            x = at.x + self.scroll_offset.x
            for key, column in self.columns.items():
                x -= self._cell_width(column)
                if x < 0:
                    self.post_message(self.HeaderSelected(str(key.value)))
                    return
            return
        line = at.y - 1 + self.scroll_offset.y
        if not self._order or line >= self._starts[-1]:
            return
        row = bisect_right(self._starts, line) - 1
        if row == self.cursor_row:
            self.action_select_cursor()
        else:
            self.move_cursor(row=row)

    # --- drawing -------------------------------------------------------------------------

    def _render_line(self, cells: Mapping[str, Text], pre: Style, post: Style, at: int
                     ) -> Strip:
        """A one-line row, drawn as Rich would draw ``Styled(Padding(cell))`` cut to its
        column (what ``_render_cells`` does for taller rows), without its layout
        machinery: a screenful of rows is drawn in a few ms, not a hundred."""
        console = self._console
        pad = " " * self.cell_padding
        segments: list[Segment] = []
        for ci, (key, width) in enumerate(self._widths):
            text = cells.get(key) or _EMPTY
            if "\n" in text.plain:
                text = text.split("\n")[0]
            length = text.cell_len
            if length > width:  # cut (a copy: cells are the caller's)
                text = text.copy()
                text.truncate(width, overflow=text.overflow or "fold")
                length = text.cell_len
            # Text.render leaves out the text's own style where it has no spans
            drawn = (text.render(console) if text.spans else
                     [Segment(text.plain, console.get_style(text.style, default=Style.null()))])
            style = pre + _meta(at, ci)
            rest = " " * (width - length) + pad  # unstyled, as Padding's
            segments.extend(Segment.apply_style([Segment(pad), *drawn, Segment(rest)], style,
                                                post))
        total = sum(self._cell_width(c) for c in self.columns.values())
        room = max(0, self.size.width - total)
        return Strip([*segments, Segment(" " * room, pre)], total + room).simplify()

    @property
    def _console(self) -> Console:
        if self._app_console is None:
            self._app_console = self.app.console
        return self._app_console

    def _cell_width(self, column: Column) -> int:
        return column.width + 2 * self.cell_padding

    def render_lines(self, crop: Region) -> list[Strip]:
        component = self.get_component_rich_style
        self._styles = (self.rich_style, component("line-table--header"),
                        component("line-table--cursor"), component("line-table--even-row"),
                        component("line-table--odd-row"))
        try:
            return super().render_lines(crop)
        finally:
            self._styles = None

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        base = self._styles[0] if self._styles else self.rich_style
        if y == 0:
            strip = self._header_strip(base)
        else:
            line = y - 1 + scroll_y
            if not self._order or line >= self._starts[-1]:
                return Strip.blank(width, base)
            row = bisect_right(self._starts, line) - 1
            strip = self._row_strips(row, base)[line - self._starts[row]]
        return strip.crop_extend(scroll_x, scroll_x + width, base)

    def _style(self, at: int, component: str) -> Style:
        return self._styles[at] if self._styles else self.get_component_rich_style(component)

    def _header_strip(self, base: Style) -> Strip:
        style = base + self._style(1, "line-table--header")
        key = (self._widths, tuple(c.label.plain for c in self.columns.values()), style,
               self.size.width)
        if self._header is None or self._header[0] != key:
            cells = {str(k.value): c.label for k, c in self.columns.items()}
            self._header = (key, self._render_cells(cells, 1, style, Style.null(), -1)[0])
        return self._header[1]

    def _row_strips(self, at: int, base: Style) -> list[Strip]:
        row_id = self._order[at]
        height = self._starts[at + 1] - self._starts[at]
        if at == self.cursor_row:
            cursor = self._style(2, "line-table--cursor")
            pre = base + cursor
            post = Style.from_color(cursor.color, cursor.bgcolor)
        else:
            pre = base + (self._style(4, "line-table--odd-row") if at % 2
                          else self._style(3, "line-table--even-row"))
            post = Style.null()
        cells = self.cells_of(row_id)
        key = (at, height, pre, post, self._widths, self.size.width)
        cached = self._cache.get(row_id)
        if cached is not None and cached[0] is cells and cached[1] == key:
            return cached[2]
        strips = self._render_cells(cells, height, pre, post, at)
        if len(self._cache) >= CACHE_ROWS:
            self._cache.clear()
        self._cache[row_id] = (cells, key, strips)
        return strips

    def _render_cells(self, cells: Mapping[str, Text], height: int, pre: Style, post: Style,
                      at: int) -> list[Strip]:
        """One row's lines: each cell padded to its column, wrapped over ``height``
        lines (one line: cut, never wrapped), side by side. Each cell carries its place
        as style meta, as DataTable's do (and so its segments stay apart, as there)."""
        if height == 1:
            return [self._render_line(cells, pre, post, at)]
        console = self._console
        lines: list[list[Segment]] = [[] for _ in range(height)]
        for ci, (key, column) in enumerate(self.columns.items()):
            width = self._cell_width(column)
            cell = cells.get(str(key.value), Text())
            options = self.app.console_options.update_dimensions(width, height)
            if height == 1:
                options = options.update(no_wrap=True)
            rendered = console.render_lines(
                Styled(Padding(cell, (0, self.cell_padding)),
                       pre_style=pre + _meta(at, ci),
                       post_style=post), options, pad=True)
            for line, part in zip(lines, rendered, strict=False):
                line.extend(part)
        # the row's style to the widget's edge, past the last column, as DataTable's
        total = sum(self._cell_width(c) for c in self.columns.values())
        room = max(0, self.size.width - total)
        return [Strip([*segments, Segment(" " * room, pre)], total + room).simplify()
                for segments in lines]
