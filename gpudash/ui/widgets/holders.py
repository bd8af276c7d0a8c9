"""Holders: GPU processes grouped by owner, as an indented tree in a table.

Rows are keyed ``u:<owner key>`` for an owner and ``p:<pid>`` for a process, so the cursor
stays on the same unit or process across refreshes; ``x:unattributed`` is the memory the
driver reports used that no listed process accounts for (never silently dropped).
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.binding import Binding

from gpudash.domain.model import UNREADABLE, Process
from gpudash.domain.triage import (
    Flag,
    HostTriage,
    OwnerGroup,
    OwnerKind,
    ProcessNode,
    unattributed_mib,
)
from gpudash.domain.units import NA, gib, percent
from gpudash.ui.palette import Palette
from gpudash.ui.text import duration, literal, same_text
from gpudash.ui.widgets.celltable import CellTable

COLUMNS = (
    ("who", "Owner / PID", 28),
    ("mem", "GPU memory", 13),
    ("flags", "Flags", 0),  # as wide as the widest flags shown (column_widths)
    ("cpu", "CPU", 5),  # % of one CPU: a spinning orphan from an idle one
    # its share of the SM time (NVML's per-process samples); after CPU, not beside GPU
    # memory: at 80 columns the Flags of an orphaned unit would push CPU off the screen
    ("sm", "SM%", 3),
    ("rss", "RSS", 8),
    ("st", "St", 2),  # after CPU and RSS: ZOMBIE and D-STATE are flags already
    ("age", "Age", 5),
    ("user", "User", 8),
    ("cmd", "Command", 200),
)
FLAGS_MAX = 34  # "16×ORPHAN RESPAWNED UNIT INACTIVE" and a little more


def column_widths(rows: list[HolderRow]) -> tuple[int, ...]:
    """The columns' widths for these rows: Flags takes what its widest cell needs (an
    empty column gave 15 cells that CPU and RSS lack on a small terminal)."""
    flags = max((row.cells[2].cell_len for row in rows), default=0)
    return tuple(
        min(FLAGS_MAX, max(len(label), flags)) if key == "flags" else width
        for key, label, width in COLUMNS
    )


FLAG_ORDER = (
    Flag.ORPHAN, Flag.RESPAWNED, Flag.UNIT_INACTIVE, Flag.ZOMBIE, Flag.D_STATE, Flag.DEVICE_HOLDER,
    Flag.UNREADABLE,
)
UNATTRIBUTED_KEY = "x:unattributed"
# Below this on every GPU the driver's own bookkeeping is not worth a row.
UNATTRIBUTED_MIN_MIB = 256


@dataclass(frozen=True, slots=True)
class HolderRow:
    key: str
    cells: tuple[Text, ...]


def _flag_style(flag: Flag, pal: Palette) -> str:
    if flag is Flag.ORPHAN:
        return f"bold {pal.orphan}"
    if flag in (Flag.ZOMBIE, Flag.D_STATE, Flag.UNREADABLE):
        return f"bold {pal.warning}"
    return f"bold {pal.notice}"


def flags_text(flags: frozenset[Flag], pal: Palette, orphans: int = 0) -> Text:
    out = Text()
    for flag in FLAG_ORDER:
        if flag in flags:
            if out:
                out.append(" ")
            label = f"{orphans}×ORPHAN" if flag is Flag.ORPHAN and orphans else flag.value
            out.append(label, style=_flag_style(flag, pal))
    return out


def gpu_memory_text(memory: dict[int, int | None] | dict[int, int]) -> Text:
    parts = []
    for gpu, mib in sorted(memory.items()):
        if mib == 0:
            continue
        parts.append(f"GPU{gpu} {gib(mib)}")
    return Text(" ".join(parts), no_wrap=True, overflow="ellipsis")


def _group_row(group: OwnerGroup, pal: Palette) -> HolderRow:
    orphans = sum(1 for n in group.nodes() if Flag.ORPHAN in n.flags)
    who = Text("▾ ", style="bold")
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
    flags = flags_text(group.flags, pal, orphans)
    return HolderRow(
        "u:" + group.key, (who, mem, flags, *(Text(""),) * 6, desc)
    )


def command_text(p: Process, why: str | None, pal: Palette) -> Text:
    """The Command cell: why an orphan is one (``why``: what ``orphan_cause`` says), or why
    the process cannot be read, comes before its command line (the operator must see the
    reason, not guess it)."""
    if p.unreadable:
        out = Text(f"unreadable: {UNREADABLE.get(p.unreadable, p.unreadable)}",
                   style=f"bold {pal.warning}")
        return out
    out = Text()
    if why:
        out.append_text(literal(f"orphan: {why}", style=pal.orphan))
        out.append(" · ", style="dim")
    out.append_text(literal(p.cmdline or p.name, style="dim"))
    return out


def _process_rows(
    node: ProcessNode, prefix: str, last: bool, now: float, pal: Palette, out: list[HolderRow],
    result: HostTriage,
) -> None:
    p = node.process
    branch = "└─ " if last else "├─ "
    who = Text(prefix + branch, style="dim")
    who.append(f"{p.pid} ", style=f"bold {pal.orphan}" if Flag.ORPHAN in node.flags else "bold")
    who.append_text(literal(node.label or p.name))
    age = None if p.started_at is None else now - p.started_at
    out.append(
        HolderRow(
            f"p:{p.pid}",
            (
                who,
                gpu_memory_text(dict(p.gpu_memory_mib)),
                flags_text(node.flags - {Flag.UNIT_INACTIVE}, pal),
                Text(percent(p.cpu_pct), justify="right"),
                Text(NA if p.sm_util_pct is None else str(p.sm_util_pct), justify="right"),
                Text(gib(p.rss_mib), justify="right"),
                Text(p.state or "?"),
                Text(duration(age), justify="right"),
                literal(p.user or NA),
                command_text(p, result.orphan_cause(p.pid), pal),
            ),
        )
    )
    child_prefix = prefix + ("   " if last else "│  ")
    for i, child in enumerate(node.children):
        _process_rows(child, child_prefix, i == len(node.children) - 1, now, pal, out, result)


def holder_rows(result: HostTriage, pal: Palette) -> list[HolderRow]:
    """The rows of the holders table for one triaged snapshot."""
    now = result.snapshot.taken_at  # ages on the host's own clock
    rows: list[HolderRow] = []
    for group in result.groups:
        rows.append(_group_row(group, pal))
        for i, root in enumerate(group.roots):
            _process_rows(root, "", i == len(group.roots) - 1, now, pal, rows, result)
    extra = _unattributed_row(result, pal)
    if extra is not None:
        rows.append(extra)
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
    return HolderRow(UNATTRIBUTED_KEY, (who, gpu_memory_text(memory), Text(""),
                                        *(Text(""),) * 6, why))


def filter_rows(rows: list[HolderRow], text: str) -> list[HolderRow]:
    """Rows matching ``text`` (case-insensitive, anywhere in the row), with their owner.

    An owner row that matches keeps all its processes; otherwise only its matching
    processes are kept, under it. Owners with nothing left are dropped.
    """
    needle = text.strip().lower()
    if not needle:
        return rows

    def hit(row: HolderRow) -> bool:
        return any(needle in cell.plain.lower() for cell in row.cells)

    out: list[HolderRow] = []
    group: HolderRow | None = None
    members: list[HolderRow] = []

    def flush() -> None:
        if group is None:
            return
        kept = members if hit(group) else [m for m in members if hit(m)]
        if kept or hit(group):
            out.append(group)
            out.extend(kept)

    for row in rows:
        if row.key.startswith("u:"):
            flush()
            group, members = row, []
        elif row.key.startswith("x:"):  # a row of its own, under no owner
            flush()
            group, members = None, []
            if hit(row):
                out.append(row)
        else:
            members.append(row)
    flush()
    return out


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
    unit = group.key if group.kind is OwnerKind.SERVICE and group.unit is not None else None
    return group.key, unit, pid


class HoldersTable(CellTable):
    """Who holds GPU memory, grouped by owner; Enter opens the owner's facts in full."""

    # A row cursor: Home/End go to the first/last row (DataTable scrolls sideways).
    BINDINGS = [
        Binding("home", "scroll_top", "First row", show=False),
        Binding("end", "scroll_bottom", "Last row", show=False),
    ]

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self._widths: tuple[int, ...] = ()
        self._add_columns(column_widths([]))
        self._cells: dict[str, tuple[Text, ...]] = {}

    def _add_columns(self, widths: tuple[int, ...]) -> None:
        self._widths = widths
        for (key, label, _default), width in zip(COLUMNS, widths, strict=True):
            self.add_column(label, key=key, width=width)

    def on_resize(self) -> None:
        # Holders get shorter when the Action panel grows (its verdict lines): the
        # selected row stays in view, as the cursor keys would keep it.
        self.call_after_refresh(self._cursor_in_view)

    def _cursor_in_view(self) -> None:
        if self.row_count:  # the row the cursor is on by then, not when resized
            self.move_cursor(row=self.cursor_row, animate=False)

    def selected_key(self) -> str | None:
        if not self.row_count:
            return None
        value = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        return None if value is None else str(value)

    def show(self, rows: list[HolderRow]) -> None:
        """Update in place when the rows are the same; else rebuild and keep the cursor."""
        keys = [r.key for r in rows]
        current = [str(k.value) for k in self.rows]
        widths = column_widths(rows)
        if keys == current and widths == self._widths:
            # Only the cells that changed: every update_cell redraws the whole table.
            for row in rows:
                before = self._cells.get(row.key)
                if before is None:
                    before = (Text("\0"),) * len(COLUMNS)
                self.set_cells(row.key, {col: cell for (col, _, _), old, cell
                                         in zip(COLUMNS, before, row.cells, strict=True)
                                         if not same_text(old, cell)})
                self._cells[row.key] = row.cells
            return
        selected = self.selected_key()
        index = self.cursor_row
        scroll_y = self.scroll_y
        self.clear(columns=widths != self._widths)
        if not self.columns:
            self._add_columns(widths)
        self._cells = {}
        for row in rows:
            self.add_row(*row.cells, key=row.key)
            self._cells[row.key] = row.cells
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
