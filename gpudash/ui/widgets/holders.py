"""Holders: GPU processes grouped by owner, as an indented tree in a table.

Rows are keyed ``u:<owner key>`` for an owner and ``p:<pid>`` for a process, so the cursor
stays on the same unit or process across refreshes; ``x:unattributed`` is the memory the
driver reports used that no listed process accounts for (never silently dropped);
``i:idle`` folds the units that hold nothing and run nothing into one line (Right or
Space opens it).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from rich.text import Text
from textual.binding import Binding

from gpudash.domain.model import UNREADABLE, Process
from gpudash.domain.triage import (
    Flag,
    HostTriage,
    OwnerGroup,
    ProcessNode,
    unattributed_mib,
)
from gpudash.domain.units import NA, gib, percent
from gpudash.record import record
from gpudash.ui.bindings import bindings
from gpudash.ui.palette import Palette
from gpudash.ui.text import duration, literal, same_text
from gpudash.ui.widgets.celltable import CellTable
from gpudash.ui.widgets.holder_columns import COLUMNS, FLAGS_MAX, INDEX, Fit, fit_columns
from gpudash.ui.widgets.holder_flags import (
    flags_text,
    short_flags_text,
)
from gpudash.ui.widgets.holder_view import HolderView, sort_flat, sort_groups, sort_nodes

__all__ = ["COLUMNS", "FLAGS_MAX", "HolderRow", "HolderView", "HoldersTable", "holder_rows",
           "selection_of"]
FLAGS = INDEX["flags"]

def column_widths(rows: list[HolderRow]) -> tuple[int, ...]:
    """The columns' widths for these rows, all of them shown."""
    return tuple(w for _k, _l, w in fit_columns(10**6, *cell_widths(rows)).columns)


def cell_widths(rows: list[HolderRow]) -> tuple[dict[str, int], int]:
    """The widest cell of each column that fits its cells, and of the short Flags."""
    widest = {c.key: max((row.cells[i].cell_len for row in rows), default=0)
              for i, c in enumerate(COLUMNS) if c.fits}
    short = max((row.short_flags.cell_len for row in rows if row.short_flags is not None),
                default=0)
    return widest, short


UNATTRIBUTED_KEY = "x:unattributed"
TAG = "◆ "  # a tagged process's mark, before its pid
IDLE_KEY = "i:idle"  # the fold of idle units: open while it is in ``HolderView.opened``
# what an owner's own row says; a process's flags are on its row (collapsed: counted too)
OWNER_FLAGS = frozenset({Flag.CRASH_LOOP, Flag.RESPAWNED, Flag.UNIT_INACTIVE})
# Below this on every GPU the driver's own bookkeeping is not worth a row.
UNATTRIBUTED_MIN_MIB = 256


@record
class HolderRow:
    """One row: its key and a cell per column of ``COLUMNS``; ``short_flags`` is the Flags
    cell as a narrow table shows it (``ORPH+2``); ``flags``: what the row is flagged
    (a flag filter reads them)."""

    key: str
    cells: tuple[Text, ...]
    short_flags: Text | None = None
    flags: frozenset[Flag] = frozenset()


def gpu_memory_text(memory: dict[int, int | None] | dict[int, int]) -> Text:
    parts = []
    for gpu, mib in sorted(memory.items()):
        if mib == 0:
            continue
        parts.append(f"GPU{gpu} {gib(mib)}")
    return Text(" ".join(parts), no_wrap=True, overflow="ellipsis")


def _orphans(group: OwnerGroup) -> int:
    return sum(1 for n in group.nodes() if Flag.ORPHAN in n.flags)


def _group_row(group: OwnerGroup, pal: Palette, collapsed: bool) -> HolderRow:
    orphans = _orphans(group)
    who = Text("▸ " if collapsed else "▾ ", style="bold")
    who.append_text(literal(group.key, style="bold"))
    total = group.total_gpu_memory_mib
    gpus = sum(1 for v in group.gpu_memory_mib.values() if v)
    mem = Text(f"{gib(total)} ×{gpus}" if total else "none", style="bold")
    unit = group.unit
    state = ""
    if unit is not None:
        state = f"{unit.active_state or NA}/{unit.sub_state or NA}"
    desc = Text(state + "  " if state else "", style="dim")
    desc.append_text(
        literal(unit.description if unit and unit.description else group.kind.value,
                style="italic")
    )
    shown = group.flags if collapsed else group.flags & OWNER_FLAGS
    flags = flags_text(shown, pal, orphans)
    cells = [Text("")] * len(COLUMNS)
    cells[INDEX["who"]], cells[INDEX["mem"]], cells[FLAGS] = who, mem, flags
    cells[INDEX["cmd"]] = desc
    return HolderRow("u:" + group.key, tuple(cells), short_flags_text(shown, pal),
                     group.flags)


def idle(group: OwnerGroup) -> bool:
    """A unit that runs nothing and holds nothing (a model not started): folded."""
    return not group.roots and not group.total_gpu_memory_mib and Flag.UNIT_INACTIVE in \
        group.flags and Flag.CRASH_LOOP not in group.flags


def _idle_row(groups: list[OwnerGroup], opened: bool) -> HolderRow:
    who = Text("▾ " if opened else "▸ ", style="bold")
    who.append(f"{len(groups)} idle units", style="bold dim")
    names = literal(", ".join(g.key.removesuffix(".service") for g in groups), style="dim")
    cells = [Text("")] * len(COLUMNS)
    cells[INDEX["who"]], cells[INDEX["mem"]] = who, Text("none", style="dim")
    cells[INDEX["cmd"]] = names
    return HolderRow(IDLE_KEY, tuple(cells))


def command_text(p: Process, why: str | None, pal: Palette) -> Text:
    """The Command cell: why an orphan is one (``why``: what ``orphan_cause`` says), or why
    the process cannot be read, comes before its command line (the operator must see the
    reason, not guess it)."""
    if p.unreadable:
        out = Text(f"unreadable: {UNREADABLE.get(p.unreadable, p.unreadable)}",
                   style=f"bold {pal.warning}")
        return out
    out = Text()
    if why:  # briefly: the owner's row above names the owner
        out.append_text(literal(f"orphan: {why}", style=pal.orphan))
        out.append(" · ", style="dim")
    out.append_text(literal(p.cmdline or p.name, style="dim"))
    return out


class RowCache:
    """The rows of the last drawings, by key, each with what it was made from: a row whose
    inputs are the very same objects (snapshots are immutable, and the decoder and the
    triage keep the objects of what did not change) is reused as it is, its Rich Text not
    built again, and the table sees the same row and compares nothing."""

    KEEP = 2  # drawings a row is kept for unseen (the title's unfiltered count is one)

    def __init__(self) -> None:
        self._rows: dict[str, tuple[tuple[object, ...], HolderRow, int]] = {}
        self._drawing = 0
        self.made = 0  # rows built (not reused) in all: what a test counts

    def row(self, key: str, inputs: tuple[object, ...],
            make: Callable[[], HolderRow]) -> HolderRow:
        hit = self._rows.get(key)
        if hit is not None and len(hit[0]) == len(inputs) and all(
                a is b or a == b for a, b in zip(hit[0], inputs, strict=True)):
            row = hit[1]
        else:
            row = make()
            self.made += 1
        self._rows[key] = (inputs, row, self._drawing)
        return row

    def drawn(self) -> None:
        """One drawing done: rows unseen for ``KEEP`` drawings are forgotten."""
        self._drawing += 1
        old = self._drawing - self.KEEP
        if len(self._rows) > 64:
            self._rows = {k: v for k, v in self._rows.items() if v[2] >= old}


@record
class _Walk:
    """What every process row of one table needs."""

    now: float
    pal: Palette
    result: HostTriage
    view: HolderView
    cache: RowCache | None = None


def _kept(node: ProcessNode, view: HolderView) -> bool:
    """The user and GPU filters keep this process, or one under it (its row stays so
    that the tree above a kept process is still read as a tree)."""
    return any(view.keeps(n.process) for n in node.walk())


def process_cells(p: Process, node: ProcessNode, who: Text, w: _Walk) -> tuple[Text, ...]:
    """A process row's cells, one per column of ``COLUMNS``."""
    age = None if p.started_at is None else w.now - p.started_at
    cells = {
        "who": who,
        "mem": gpu_memory_text(dict(p.gpu_memory_mib)),
        "flags": flags_text(node.flags - {Flag.UNIT_INACTIVE}, w.pal),
        "cpu": Text(percent(p.cpu_pct), justify="right"),
        "sm": Text(NA if p.sm_util_pct is None else str(p.sm_util_pct), justify="right"),
        "rss": Text(gib(p.rss_mib), justify="right"),
        "st": Text(p.state or "?"),
        "age": Text(duration(age), justify="right"),
        "user": literal(p.user or NA),
        "cmd": command_text(p, w.result.orphan_brief(p.pid), w.pal),
    }
    return tuple(cells[c.key] for c in COLUMNS)


def _process_rows(node: ProcessNode, prefix: str, last: bool, w: _Walk,
                  out: list[HolderRow]) -> None:
    p = node.process
    key = f"p:{p.pid}"
    children = [c for c in sort_nodes(node.children, w.view, w.now) if _kept(c, w.view)]
    collapsed = key in w.view.collapsed
    branch = "└─ " if last else "├─ "

    def make() -> HolderRow:
        who = Text(prefix + branch, style="dim")
        if children:  # a subtree: Left/Right/Space fold it
            who.append("▸ " if collapsed else "▾ ", style="bold")
        if p.pid in w.view.tagged:
            who.append(TAG, style=f"bold {w.pal.notice}")
        who.append(f"{p.pid} ", style=f"bold {w.pal.orphan}" if Flag.ORPHAN in node.flags
                   else "bold")
        who.append_text(literal(node.label or p.name))
        return HolderRow(key, process_cells(p, node, who, w),
                         short_flags_text(node.flags - {Flag.UNIT_INACTIVE}, w.pal),
                         node.flags - {Flag.UNIT_INACTIVE})

    if w.cache is None:
        out.append(make())
    else:  # what the row shows, and nothing else: the age only as it is written
        age = None if p.started_at is None else duration(w.now - p.started_at)
        out.append(w.cache.row(key, (p, node.flags, node.label, prefix + branch,
                                     bool(children), collapsed, age, p.pid in w.view.tagged,
                                     w.result.orphan_brief(p.pid), w.pal), make))
    if collapsed:
        return
    child_prefix = prefix + ("   " if last else "│  ")
    for i, child in enumerate(children):
        _process_rows(child, child_prefix, i == len(children) - 1, w, out)


def holder_rows(result: HostTriage, pal: Palette,
                view: HolderView | None = None, cache: RowCache | None = None
                ) -> list[HolderRow]:
    """The rows of the holders table for one triaged snapshot, as ``view`` arranges them
    (sorted, filtered by user and GPU, collapsed); with ``cache``, a row whose inputs did
    not change is the very row drawn before."""
    view = view or HolderView()
    now = result.snapshot.taken_at  # ages on the host's own clock
    walk = _Walk(now, pal, result, view, cache)
    rows: list[HolderRow] = []
    if view.flat:
        rows = _flat_rows(walk)
        groups: list[OwnerGroup] = []
    else:
        groups = sort_groups(result.groups, view, now)
    idle_groups = [g for g in groups if idle(g)]
    if view.user is not None or view.gpu is not None:
        idle_groups = []  # none of them is a user's or a GPU's (their rows go too, below)
    fold: list[HolderRow] = []
    if len(idle_groups) > 1:  # one is a line anyway; the fold's row above its units
        opened = IDLE_KEY in view.opened
        folded = {id(g) for g in idle_groups}
        groups = [g for g in groups if id(g) not in folded]
        fold = [_idle_row(idle_groups, opened)]
        idle_groups = idle_groups if opened else []
    else:
        idle_groups = []
    for group in groups:
        _group_rows(group, walk, rows)
    rows += fold
    for group in idle_groups:
        _group_rows(group, walk, rows)
    extra = _unattributed_row(result, pal)
    if extra is not None and view.user is None and (
            view.gpu is None
            or unattributed_mib(result.snapshot).get(view.gpu, 0) >= UNATTRIBUTED_MIN_MIB):
        rows.append(extra)  # memory no user's process holds: not theirs to see filtered

    return rows


def _group_rows(group: OwnerGroup, w: _Walk, rows: list[HolderRow]) -> None:
    """An owner's row and, unless it is folded, its process trees (those the filters keep)."""
    view, now = w.view, w.now
    roots = [r for r in sort_nodes(group.roots, view, now) if _kept(r, view)]
    if not roots and (view.user is not None or view.gpu is not None):
        return
    key = "u:" + group.key
    collapsed = key in view.collapsed
    # what the owner's row shows: a new triage makes new groups of the same facts
    rows.append(_group_row(group, w.pal, collapsed) if w.cache is None else w.cache.row(
        key, (group.key, group.kind, group.unit, group.flags, group.total_gpu_memory_mib,
              tuple(group.gpu_memory_mib.items()), _orphans(group), collapsed, w.pal),
        partial(_group_row, group, w.pal, collapsed)))
    if collapsed:
        return
    for i, root in enumerate(roots):
        _process_rows(root, "", i == len(roots) - 1, w, rows)


def _flat_rows(w: _Walk) -> list[HolderRow]:
    """Every process the filters keep, one row each, its owner named before its command."""
    owner_of = {id(n): g.key for g in w.result.groups for n in g.nodes()}
    nodes = [n for g in w.result.groups for n in g.nodes() if w.view.keeps(n.process)]
    rows = []
    for node in sort_flat(nodes, w.view, w.now):
        p, owner = node.process, owner_of[id(node)]

        def make(p: Process = p, node: ProcessNode = node, owner: str = owner) -> HolderRow:
            who = Text(TAG, style=f"bold {w.pal.notice}") if p.pid in w.view.tagged else Text()
            who.append(f"{p.pid} ", style=f"bold {w.pal.orphan}" if Flag.ORPHAN in node.flags
                       else "bold")
            who.append_text(literal(node.label or p.name))
            cells = list(process_cells(p, node, who, w))
            cmd = literal(owner, style="bold dim")
            cmd.append(" │ ", style="dim")
            cmd.append_text(cells[INDEX["cmd"]])
            cells[INDEX["cmd"]] = cmd
            flags = node.flags - {Flag.UNIT_INACTIVE}
            return HolderRow(f"p:{p.pid}", tuple(cells), short_flags_text(flags, w.pal), flags)

        if w.cache is None:
            rows.append(make())
        else:
            age = None if p.started_at is None else duration(w.now - p.started_at)
            rows.append(w.cache.row(f"p:{p.pid}", (p, node.flags, node.label, "flat", owner,
                                                   p.pid in w.view.tagged,
                                                   age, w.result.orphan_brief(p.pid), w.pal),
                                    make))
    return rows


def _unattributed_row(result: HostTriage, pal: Palette) -> HolderRow | None:
    memory = unattributed_mib(result.snapshot)
    if not any(mib >= UNATTRIBUTED_MIN_MIB for mib in memory.values()):
        return None
    who = Text("? ", style="bold")
    who.append("unattributed", style=f"bold {pal.warning}")
    why = Text("used on the GPU by no process the driver lists (a process in another "
               "container or namespace, or memory the driver has not let go)",
               style="italic")
    cells = [Text("")] * len(COLUMNS)
    cells[INDEX["who"]], cells[INDEX["mem"]], cells[INDEX["cmd"]] = \
        who, gpu_memory_text(memory), why
    return HolderRow(UNATTRIBUTED_KEY, tuple(cells))


def selection_of(
    result: HostTriage | None, key: str | None
) -> tuple[str | None, str | None, int | None]:
    """(owner key, service unit name, pid) selected by a row key."""
    if result is None or not key:
        return None, None, None
    if key.startswith("u:"):
        group = result.group(key[2:])
        pid = None
    elif not key.startswith("p:"):
        return None, None, None
    else:
        pid = int(key[2:])
        group = result.group_of(pid)
    if group is None:
        return None, None, pid
    unit = group.key if group.service is not None else None
    return group.key, unit, pid


class HoldersTable(CellTable):
    """Who holds GPU memory, grouped by owner; Enter opens the owner's facts in full.

    The columns shown are those that fit the table's width (``fit_columns``); the Owner /
    PID column is fixed, so scrolling right to read a long command keeps the PID."""

    # A row cursor: Home/End go to the first/last row (DataTable scrolls sideways).
    BINDINGS = [
        Binding("home", "scroll_top", "First row", show=False),
        Binding("end", "scroll_bottom", "Last row", show=False),
        *bindings("holders"),  # Left/Right/Space fold (the screen's fold action)
    ]

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.fixed_columns = 1
        self._fit: Fit = fit_columns(10**6, {}, 0)
        self._labels: dict[str, str] = {}
        self._rows: list[HolderRow] = []
        self._add_columns(self._fit)
        self._cells: dict[str, tuple[Text, ...]] = {}
        self._drawn: dict[str, HolderRow] = {}  # the row objects on screen, by key

    def _add_columns(self, fit: Fit) -> None:
        self._fit = fit
        for key, label, width in fit.columns:
            self.add_column(label, key=key, width=width)

    @property
    def shown_columns(self) -> tuple[str, ...]:
        """The keys of the columns on screen, in order."""
        return tuple(key for key, _l, _w in self._fit.columns)

    def on_resize(self) -> None:
        # Holders get shorter when the Action panel grows (its verdict lines): the
        # selected row stays in view, as the cursor keys would keep it; narrower or wider,
        # the columns are fitted again.
        self.call_after_refresh(self._cursor_in_view)
        self.call_after_refresh(self._refit)

    def _refit(self) -> None:
        if self._fit != self._fit_for(self._rows):
            self.show(self._rows, self._labels)

    def _cursor_in_view(self) -> None:
        if self.row_count:  # the row the cursor is on by then, not when resized
            self.move_cursor(row=self.cursor_row, animate=False)

    def _fit_for(self, rows: list[HolderRow]) -> Fit:
        room = self.scrollable_content_region.width
        if not room:  # not laid out yet: every column for now, fitted once it is
            self.call_after_refresh(self._refit)
            room = 10**6
        # the sorted column stays on screen: its header says the order
        return fit_columns(room, *cell_widths(rows), labels=self._labels,
                           keep=next(iter(self._labels), None))

    def selected_key(self) -> str | None:
        if not self.row_count:
            return None
        value = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        return None if value is None else str(value)

    def _shown_cells(self, row: HolderRow, fit: Fit) -> tuple[Text, ...]:
        out = []
        for key, _label, _width in fit.columns:
            cell = row.cells[INDEX[key]]
            if key == "flags" and fit.short_flags and row.short_flags is not None:
                cell = row.short_flags
            out.append(cell)
        return tuple(out)

    def show(self, rows: list[HolderRow], labels: dict[str, str] | None = None) -> None:
        """Update in place when the rows are the same; else rebuild and keep the cursor.
        ``labels``: headers other than the declared ones (the sort indicator)."""
        if labels is not None:
            self._labels = labels
        self._rows = rows
        fit = self._fit_for(rows)
        keys = [r.key for r in rows]
        current = [str(k.value) for k in self.rows]
        shown = [(row.key, self._shown_cells(row, fit)) for row in rows]
        columns = [key for key, _l, _w in fit.columns]
        if keys == current and fit == self._fit:
            # Only the cells that changed: every update_cell redraws the whole table.
            changes = {}
            for row, (key, cells) in zip(rows, shown, strict=True):
                if self._drawn.get(key) is row and self._cells.get(key) == cells:
                    continue  # the very row drawn before (a RowCache hit)
                self._drawn[key] = row
                before = self._cells.get(key)
                if before is None:
                    before = (Text("\0"),) * len(cells)
                changes[key] = {col: cell for col, old, cell
                                in zip(columns, before, cells, strict=True)
                                if not same_text(old, cell)}
                self._cells[key] = cells
            self.set_rows(changes)
            return
        selected = self.selected_key()
        index = self.cursor_row
        scroll_y = self.scroll_y
        self.clear(columns=fit != self._fit)
        if not self.columns:
            self._add_columns(fit)
        self._cells = {}
        self._drawn = {row.key: row for row in rows}
        for key, cells in shown:
            self.add_row(*cells, key=key)
            self._cells[key] = cells
        if selected in keys:
            self.move_cursor(row=keys.index(selected), animate=False, scroll=False)
        elif rows:
            # The selected process is gone: stay near where it was.
            self.move_cursor(row=min(index, len(rows) - 1), animate=False, scroll=False)
        self.scroll_to(y=scroll_y, animate=False)

    def select_key(self, key: str) -> bool:
        keys = [str(k.value) for k in self.rows]
        if key not in keys:
            return False
        self.move_cursor(row=keys.index(key))
        return True
