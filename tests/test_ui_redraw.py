"""What a sample costs the screen: only the cells that changed are drawn again, and what
is drawn is the new value (issue 12, cost). The CPU figures are in bench/peer_bench.py;
these assert the behaviour the figures rest on."""

from __future__ import annotations

import dataclasses
from typing import Any

from rich.text import Text
from support import app_clock, settled
from textual.app import App, ComposeResult

from gpudash.demo.host import DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.domain.model import HostSnapshot
from gpudash.domain.triage import triage
from gpudash.feed.follow import Frame
from gpudash.feed.reconnect import LinkState
from gpudash.ui.app import GpudashApp
from gpudash.ui.hosts import HostView
from gpudash.ui.text import same_text
from gpudash.ui.widgets import plotview
from gpudash.ui.widgets.celltable import CellTable
from gpudash.ui.widgets.holders import COLUMNS, HolderRow, HoldersTable
from gpudash.ui.widgets.plotview import HistoryPlot

ROWS = 12


def rows(age_of_row_3: str = "5s", colour: str = "green") -> list[HolderRow]:
    out = []
    for i in range(ROWS):
        age = age_of_row_3 if i == 3 else "1h00m"
        cells = [Text(f"{1000 + i} worker-{i}"), Text("GPU0 1.0 GiB", style=colour),
                 *[Text("") for _ in range(len(COLUMNS) - 5)], Text(age), Text("alice"),
                 Text(f"python serve.py --rank {i} " + "x" * 150)]
        out.append(HolderRow(f"p:{1000 + i}", tuple(cells)))
    assert len(out[0].cells) == len(COLUMNS)
    return out


class OneTable(App[None]):
    def compose(self) -> ComposeResult:
        yield HoldersTable()


def line_text(table: CellTable, y: int) -> str:
    return "".join(segment.text for segment in table.render_line(y))


async def test_a_holders_age_that_ticks_redraws_that_cell_and_not_the_table() -> None:
    app = OneTable()
    async with app.run_test(size=(160, 30)) as pilot:
        table = app.query_one(HoldersTable)
        table.show(rows())
        await settled(pilot)
        assert "5s" in line_text(table, 4)  # header, rows 0..2, then row 3
        before_other = line_text(table, 6)
        calls: list[tuple[int, int]] = []
        original = table._render_cell

        def spy(row_index: int, column_index: int, *args: Any, **kwargs: Any) -> Any:
            key_row = table._row_locations.get_key(row_index) if row_index >= 0 else None
            hit = any(k[0] == key_row and k[1] == table._column_locations.get_key(column_index)
                      and k[6] == table._update_count for k in table._cell_render_cache.keys())
            if not hit:
                calls.append((row_index, column_index))
            return original(row_index, column_index, *args, **kwargs)

        table._render_cell = spy  # type: ignore[method-assign]
        table.show(rows(age_of_row_3="6s"))
        await settled(pilot)
        table._render_cell = original  # type: ignore[method-assign]
        assert "6s" in line_text(table, 4) and "5s" not in line_text(table, 4)
        assert line_text(table, 6) == before_other
        # only the age cell of row 3 was rendered again (not 13 lines of 9 cells)
        age = [c.key for c in COLUMNS].index("age")
        assert set(calls) <= {(3, age)}, calls


class TableBesidePanel(App[None]):
    CSS = "Horizontal { height: 1fr; } HoldersTable { width: 70%; } Static { width: 30%; }"

    def compose(self) -> ComposeResult:
        from textual.containers import Horizontal
        from textual.widgets import Static

        with Horizontal():
            yield HoldersTable()
            yield Static("the unit panel")


async def test_a_changed_row_repaints_the_table_not_the_panel_beside_it() -> None:
    """A row's region is as wide as its cells (a long command: 200 columns and more), and
    the screen clips a repaint to the table's container: the unit panel beside the
    holders was drawn again with every age that ticked."""
    app = TableBesidePanel()
    async with app.run_test(size=(160, 30)) as pilot:
        table = app.query_one(HoldersTable)
        table.show(rows())
        await settled(pilot)
        assert table.virtual_size.width > table.size.width  # the commands run off the edge
        table.show(rows(age_of_row_3="6s"))
        repaint = [r.translate(table.region.offset) for r in table._repaint_regions]
        assert repaint, "the changed row asked for no repaint"
        assert all(table.region.contains_region(r) for r in repaint), (repaint, table.region)
        await settled(pilot)
        assert "6s" in line_text(table, 4)


async def test_an_unchanged_sample_touches_no_cell_and_a_new_colour_does() -> None:
    app = OneTable()
    async with app.run_test(size=(160, 30)) as pilot:
        table = app.query_one(HoldersTable)
        table.show(rows())
        await settled(pilot)
        count = table._update_count
        renders = len(table._cell_render_cache)
        table.show(rows())
        await settled(pilot)
        assert table._update_count == count and len(table._cell_render_cache) == renders
        # same characters, another colour (a theme change): drawn again
        table.show(rows(colour="red"))
        await settled(pilot)
        assert table.get_row("p:1000")[1].style == "red"


def test_same_text_sees_the_colour_rich_equality_does_not() -> None:
    assert Text("a", style="red") == Text("a", style="blue")  # Rich: plain and spans only
    assert not same_text(Text("a", style="red"), Text("a", style="blue"))
    assert not same_text(Text("1", justify="right"), Text("1"))
    assert same_text(Text("a", style="red"), Text("a", style="red"))


async def test_other_hosts_samples_redraw_their_rows_in_the_host_list() -> None:
    clock = SteppedClock()
    hosts = [DemoHost(f"gpu-{c}", clock=clock, seed=i) for i, c in enumerate("abc")]
    app = GpudashApp(hosts, interval=0.25, read_only=True, theme=None, exec_options=None,
                     clock=app_clock(hosts))
    async with app.run_test(size=(160, 50)) as pilot:
        for _ in range(200):
            if all(v.snapshot is not None for v in app.views):
                break
            await pilot.pause(0.05)
        await pilot.pause(0.5)
        host_list = app.query_one("#hosts", CellTable)
        for i, view in enumerate(app.views):
            used, total = view.used_total_mib()
            cells = [str(c) for c in host_list.get_row(str(i))]
            assert cells[1] == view.name and "connected" in cells[2]
            assert cells[3] != "N/A" and used is not None and total is not None


class OnePlot(App[None]):
    def compose(self) -> ComposeResult:
        yield HistoryPlot()


async def test_the_plot_draws_a_memory_change_at_once_and_a_mere_time_shift_every_5_s(
    monkeypatch: Any,
) -> None:
    drawn: list[int] = []
    real = plotview.render_history

    def counting(history: Any, *args: Any, **kwargs: Any) -> Text:
        drawn.append(len(history))
        return real(history, *args, **kwargs)

    monkeypatch.setattr(plotview, "render_history", counting)
    app = OnePlot()
    async with app.run_test(size=(100, 30)) as pilot:
        plot = app.query_one(HistoryPlot)
        await pilot.pause()
        history: list[tuple[float, dict[int, int | None]]] = []

        def sample(t: float, mib: int) -> None:
            history.append((t, {0: mib}))
            plot.show(history, [0], 80.0, "all GPUs")

        for t in range(4):
            sample(float(t), 1000)
        drawn.clear()
        sample(4.0, 1000)  # same memory, 1 s later: nothing to draw yet
        assert drawn == []
        sample(5.0, 900)  # memory came back: drawn now
        assert drawn == [6]
        sample(6.0, 900)
        sample(9.9, 900)
        assert drawn == [6]
        sample(10.0, 900)  # 5 s of samples since the last drawing: the time axis moves
        assert drawn == [6, 9]


async def test_a_sample_that_draws_nothing_new_leaves_the_plot_unpainted() -> None:
    """Its border title, set again the same, repainted all of the plot every second."""
    app = OnePlot()
    async with app.run_test(size=(100, 30)) as pilot:
        plot = app.query_one(HistoryPlot)
        history = [(float(t), {0: 1000}) for t in range(4)]
        plot.show(history, [0], 80.0, "all GPUs")
        await settled(pilot)
        painted: list[object] = []
        real = plot.refresh

        def counting(*args: Any, **kwargs: Any) -> Any:
            painted.append(args)
            return real(*args, **kwargs)

        plot.refresh = counting  # type: ignore[method-assign]
        history.append((4.0, {0: 1000}))  # the same memory, a second later
        plot.show(history, [0], 80.0, "all GPUs")
        assert painted == []
        history.append((5.0, {0: 900}))  # memory came back: painted
        plot.show(history, [0], 80.0, "all GPUs")
        assert painted


def framed(snap: HostSnapshot, before: HostSnapshot | None = None) -> Frame:
    return Frame(snap.host, LinkState("connected", 0.0), snap, triage(snap, before))


async def test_history_keeps_every_sample_and_shares_unchanged_memory() -> None:
    demo = DemoHost("gpu-a")
    view = HostView(source=demo, name="gpu-a")
    first = await demo.control.sample()
    later = dataclasses.replace(first, taken_at=first.taken_at + 1)
    view.record(framed(first), 0.0)
    view.record(framed(later, first), 1.0)
    assert [t for t, _ in view.history] == [first.taken_at, first.taken_at + 1]
    assert view.history[0][1] == view.history[1][1] == first.used_by_gpu()
    assert view.history.shared(0, 1)  # one array for both: nothing changed
    gpus = list(first.gpus)
    gpus[0] = dataclasses.replace(gpus[0], memory_used_mib=(gpus[0].memory_used_mib or 0) + 1)
    changed = dataclasses.replace(later, taken_at=later.taken_at + 1, gpus=tuple(gpus))
    view.record(framed(changed, later), 2.0)
    assert view.history[2][1] == changed.used_by_gpu() != view.history[1][1]
    assert not view.history.shared(1, 2)


async def test_the_round_trip_shown_moves_with_the_link_not_with_each_pings_jitter() -> None:
    """Each ping's round trip (15, 4, 7 ms on a quiet local host) redrew the header line
    every second; the median of the last five, within a quarter, is the same link."""
    demo = DemoHost("gpu-a")
    view = HostView(source=demo, name="gpu-a")
    snap = await demo.control.sample()
    pings = (0.015, 0.004, 0.007, 0.011, 0.006, 0.014, 0.005, 0.009,  # a quiet local host
             0.250, 0.260, 0.240,  # the link slows down: shown from its third sample
             None, 0.0005, 0.0009)  # a new link, under a millisecond
    shown = []
    for t, rtt in enumerate(pings):
        view.record(dataclasses.replace(framed(snap), round_trip_s=rtt), float(t))
        shown.append(None if view.rtt is None else round(view.rtt * 1000, 1))
    assert shown == [15.0, 9.5, 7.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 14.0, 240.0, None, 0.5, 0.5]


async def test_host_rows_off_screen_wait_and_are_current_once_scrolled_to() -> None:
    clock = SteppedClock()
    hosts = [DemoHost(f"gpu-{i:02d}", clock=clock, seed=i) for i in range(30)]
    app = GpudashApp(hosts, interval=0.25, read_only=True, theme=None, exec_options=None,
                     clock=app_clock(hosts))
    async with app.run_test(size=(160, 50)) as pilot:
        for _ in range(200):
            if all(v.snapshot is not None for v in app.views):
                break
            await pilot.pause(0.05)
        assert app.fleet_shown  # several hosts open on the fleet table: open one
        await pilot.press("enter")
        await pilot.pause(0.6)
        host_list = app.query_one("#hosts", CellTable)
        last = len(hosts) - 1
        for i in (1, last):  # both change (what their row shows); the next tick draws
            app.views[i].name = f"renamed-{i}"
        await pilot.pause(1.3)
        assert str(host_list.get_row("1")[1]) == "renamed-1"  # on screen: drawn
        assert str(host_list.get_row(str(last))[1]) == f"gpu-{last}"  # below: not yet
        host_list.scroll_end(animate=False)
        await pilot.pause(0.1)
        assert str(host_list.get_row(str(last))[1]) == f"renamed-{last}"


async def test_a_sample_that_changes_one_holders_memory_rebuilds_that_row_only() -> None:
    # Seen: every redraw built every holder row's Rich Text again and compared every
    # cell; what changed was decided at the decoder already. Now a row whose inputs are
    # the same objects is the very row drawn before: one changed worker rebuilds its row
    # and its owner's (whose total moved), nothing else.
    from test_ui_holder_reasons import PAL

    from gpudash.domain.model import Changes
    from gpudash.domain.triage import retriage
    from gpudash.ui.widgets.holders import RowCache, holder_rows

    first = DemoHost().snapshot()
    worker = next(p for p in first.processes if p.gpu_memory_mib.get(3))
    more = dataclasses.replace(worker, gpu_memory_mib={3: worker.gpu_memory_mib[3] + 512})
    later = dataclasses.replace(
        first, taken_at=first.taken_at, processes=tuple(
            more if p is worker else p for p in first.processes),
        # as the decoder says it: a holder's memory moved
        changes=Changes(gpus=frozenset({3}), processes=frozenset({worker.pid}),
                        units=frozenset(), structure=True))
    before = triage(first)
    after = retriage(later, first, before)
    pal, cache = PAL, RowCache()
    app = OneTable()
    async with app.run_test(size=(160, 60)) as pilot:
        table = app.query_one(HoldersTable)
        table.show(holder_rows(before, pal, cache=cache))
        cache.drawn()
        await pilot.pause()
        built = cache.made
        changed: list[set[str]] = []
        original = table.set_rows

        def spy(changes: Any) -> None:
            changed.append({k for k, cells in changes.items() if cells})
            original(changes)

        table.set_rows = spy  # type: ignore[method-assign]
        table.show(holder_rows(after, pal, cache=cache))
        await pilot.pause()
    group = after.group_of(worker.pid)
    assert group is not None
    assert cache.made - built == 2  # the worker's row and its owner's: built again
    assert changed == [{f"p:{worker.pid}", f"u:{group.key}"}], changed


async def test_a_column_label_is_literal_text_not_markup() -> None:
    """A ``str`` label is taken as it is (DataTable's own would parse it as Rich markup,
    and load the 1.4 MB of emoji codes to do so)."""

    class Tables(App[None]):
        def compose(self) -> ComposeResult:
            yield CellTable()

    app = Tables()
    async with app.run_test(size=(80, 10)):
        table = app.query_one(CellTable)
        table.add_column("[b]GPU[/b] :fire:", key="gpu")
        (column,) = table.columns.values()
        label = column.label
        assert label.plain == "[b]GPU[/b] :fire:" and not label.spans
