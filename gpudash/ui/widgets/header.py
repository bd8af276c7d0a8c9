"""Header line and the host list: which hosts, how fresh their data is, READ-ONLY."""

from __future__ import annotations

from rich.text import Text

from gpudash.domain.units import NA, gib_of, percent
from gpudash.ui.hosts import HostView
from gpudash.ui.palette import Palette
from gpudash.ui.text import literal, same_text
from gpudash.ui.widgets.celltable import CellTable
from gpudash.ui.widgets.quiet import QuietStatic


def _state_style(kind: str, pal: Palette) -> str:
    return {"ok": pal.success, "warn": pal.warning, "error": f"bold {pal.error}"}[kind]


def header_text(
    views: list[HostView], current: int, now: float, stale_after: float, read_only: bool,
    pal: Palette, width: int = 1000, fresh_within: float = 0.0, paused: bool = False,
) -> Text:
    """``gpudash │ host ● connected │ rtt 3 ms │ last sample 0.4 s ago │ READ-ONLY``, within
    ``width``: what matters least gives way first (the source, the round trip, the host's
    cpu and ram, then "last sample" says only its age); the host, its state, READ-ONLY,
    DEGRADED and the host's errors stay. A sample younger than ``fresh_within`` is "just
    now": while samples flow the line does not change, and is not drawn again, every
    second (it was two frames a second of the dashboard's CPU)."""
    view = views[current]
    head = Text()
    head.append(" gpudash ", style="bold reverse")
    head.append(" ")
    if read_only:
        head.append(" READ-ONLY ", style=f"bold reverse {pal.warning}")
        head.append(" ")
    if paused:  # what is drawn is the sample of then; "last sample" keeps counting
        head.append(" PAUSED (p) ", style=f"bold reverse {pal.notice}")
        head.append(" ")
    if len(views) > 1:
        head.append(f"[{current + 1}/{len(views)}] ", style="dim")
    head.append_text(literal(view.name, style="bold"))
    head.append("  ")
    status, kind = view.status(now, stale_after)
    head.append("● ", style=_state_style(kind, pal))
    head.append_text(literal(status, style=_state_style(kind, pal)))
    rtt = NA if view.rtt is None else f"{view.rtt * 1000:.0f} ms"
    age = view.age(now)
    ago = NA if age is None else "just now" if age < fresh_within else f"{age:.1f} s ago"
    snap = view.snapshot
    # (priority, text): the lowest goes first when the line is too long; 9 never goes
    parts: list[tuple[int, Text]] = [(3, Text(f"  │ rtt {rtt}", style="dim")),
                                     (5, Text(f"  │ last sample {ago}", style="dim"))]
    if snap is not None:
        parts.append((1, Text(f"  │ source {snap.source.value}", style="dim")))
        if snap.cpu_pct is not None or snap.mem_used_mib is not None:
            parts.append((2, Text(f"  │ cpu {percent(snap.cpu_pct)}  ram "
                                  f"{gib_of(snap.mem_used_mib, snap.mem_total_mib)}",
                                  style="dim")))
        if snap.degraded:
            parts.append((9, Text("  DEGRADED", style=f"bold {pal.warning}")))
        if snap.errors:
            errors = Text("  ")
            errors.append_text(literal("; ".join(snap.errors), style=pal.warning))
            parts.append((9, errors))
    return _fit(head, parts, {5: Text(f"  │ {ago}", style="dim")}, width)


def _fit(head: Text, parts: list[tuple[int, Text]], short: dict[int, Text], width: int
         ) -> Text:
    """``head`` and the ``parts`` that fit ``width``, the lowest priority going first; a
    part with a ``short`` form takes it once before it goes."""
    shown = dict(enumerate(parts))
    for priority in (1, 3, 2, 5, 6):
        if head.cell_len + sum(t.cell_len for _p, t in shown.values()) <= width:
            break
        for i, (p, _t) in list(shown.items()):
            if p != priority:
                continue
            if p in short:
                shown[i] = (6, short[p])  # shortened once, then it may go
            else:
                del shown[i]
    for _i, (_p, text) in sorted(shown.items()):
        head.append_text(text)
    return head


class HeaderBar(QuietStatic):
    DEFAULT_CSS = """
    HeaderBar { height: 1; background: $panel; }
    """
    FIXED_SIZE = True


COLUMNS = ("n", "host", "state", "mem", "orphans")


class HostList(CellTable):
    """One summary row per host when several are shown; enter/1-9 switches."""

    DEFAULT_CSS = """
    HostList { height: auto; max-height: 6; }
    """

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.add_column("#", key="n", width=2)
        self.add_column("Host", key="host", width=24)
        self.add_column("State", key="state", width=40)
        self.add_column("GPU memory", key="mem", width=22)
        self.add_column("Orphans", key="orphans", width=8)
        self._cells: dict[str, tuple[Text, ...]] = {}
        self._behind: set[int] = set()  # rows off screen whose host changed since drawn
        self._last: tuple[list[HostView], float, float, Palette] | None = None

    def _on_screen(self) -> range:
        """Indices of the rows in view now (one row a line), with one either side."""
        top = int(self.scroll_y)
        return range(max(0, top - 1), top + max(1, self.size.height) + 1)

    def show(self, views: list[HostView], now: float, stale_after: float, pal: Palette,
             only: set[int] | None = None) -> None:
        """The rows of ``only`` (default: all) that are on screen; the others are drawn
        when scrolled to. Touch only the cells that changed: each ``update_cell``
        redraws the table, and with many hosts every host's sample would otherwise
        redraw every row."""
        shown = self._cells
        self._last = (views, now, stale_after, pal)
        visible = self._on_screen()
        for i, view in enumerate(views):
            if str(i) in shown:
                if only is not None and i not in only:
                    continue
                if i not in visible:  # no widget work for a host not on screen
                    self._behind.add(i)
                    continue
            self._behind.discard(i)
            status, kind = view.status(now, stale_after)
            used, total = view.used_total_mib()
            mem = gib_of(used, total)
            orphans = view.orphan_count()
            cells = (
                Text(str(i + 1)),
                literal(view.name),
                literal(status, style=_state_style(kind, pal)),
                Text(mem),
                Text(NA, style="dim") if orphans is None
                else Text(str(orphans), style=f"bold {pal.orphan}" if orphans else ""),
            )
            key = str(i)
            before = shown.get(key)
            if before is None:
                self.add_row(*cells, key=key)
            else:
                self.set_cells(key, {col: cell for col, old, cell
                                     in zip(COLUMNS, before, cells, strict=True)
                                     if not same_text(old, cell)})
            shown[key] = cells

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if getattr(self, "_last", None) is not None and self._behind:
            assert self._last is not None
            self.show(*self._last, only=set(self._behind))
