"""The dashboard's screen: what it shows and how it fits the terminal.

The app (``gpudash.ui.app``) holds the state — hosts, selection, the action controller,
keys — and decides; this screen draws that state into its widgets, in place, and turns
table events into selections. A redraw that fails is logged and shown, never allowed to
end the app.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.css.scalar import Scalar
from textual.events import Resize
from textual.screen import Screen
from textual.widgets import DataTable

from gpudash.ui.layout import progress_columns, progress_room, size_classes
from gpudash.ui.palette import palette
from gpudash.ui.screens import DetailScreen
from gpudash.ui.text import clean
from gpudash.ui.widgets.action_log import ActionLog, LogEntry
from gpudash.ui.widgets.footer import DashboardFooter
from gpudash.ui.widgets.gpus import GpuGrid, GpuTable
from gpudash.ui.widgets.guide import Guide
from gpudash.ui.widgets.header import HeaderBar, HostList, header_text
from gpudash.ui.widgets.holders import HoldersTable, filter_rows, holder_rows, selection_of
from gpudash.ui.widgets.notice import HostNotice
from gpudash.ui.widgets.plotview import MemoryPlot
from gpudash.ui.widgets.progress import ActionProgressPanel
from gpudash.ui.widgets.unit_panel import UnitPanel, unit_gist, unit_text

if TYPE_CHECKING:
    from gpudash.ui.app import GpudashApp

F = TypeVar("F", bound=Callable[..., None])


def drawing(method: F) -> F:
    """A redraw that fails is logged and shown once, never allowed to end the app:
    whatever a host sends, the operator keeps the screen (and the actions in flight)."""

    @functools.wraps(method)
    def guarded(self: MainScreen, *args: Any, **kwargs: Any) -> None:
        try:
            method(self, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - logged with its traceback by the app
            self.dashboard.drawing_failed(method.__name__, exc)

    return cast(F, guarded)


class MainScreen(Screen[None]):
    """Header, hosts, GPUs and the plot, the notice, holders and the unit panel, the
    action panel, the log, the walkthrough line and the footer."""

    def __init__(self) -> None:
        super().__init__(id="main")
        self.ready = False  # widgets mounted: drawing may start

    @property
    def dashboard(self) -> GpudashApp:
        return cast("GpudashApp", self.app)

    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        yield HostList(id="hosts")
        with Horizontal(id="top"):
            yield GpuTable(id="gpus")
            yield GpuGrid(id="gpu-grid")
            yield MemoryPlot(id="plot")
        yield HostNotice(id="notice")
        with Horizontal(id="middle"):
            yield HoldersTable(id="holders")
            yield UnitPanel(id="unit")
        yield ActionProgressPanel(id="progress")
        yield ActionLog(id="log")
        yield Guide(id="guide")
        yield DashboardFooter()

    def on_mount(self) -> None:
        self.header_bar = self.query_one(HeaderBar)
        self.host_list = self.query_one(HostList)
        self.gpu_table = self.query_one(GpuTable)
        self.gpu_grid = self.query_one(GpuGrid)
        self.notice = self.query_one(HostNotice)
        self.guide = self.query_one(Guide)
        self.memory_plot = self.query_one(MemoryPlot)
        self.holders = self.query_one(HoldersTable)
        self.unit_panel = self.query_one(UnitPanel)
        self.progress_panel = self.query_one(ActionProgressPanel)
        self.action_log = self.query_one(ActionLog)
        self.gpu_table.border_title = "GPUs"
        self.gpu_grid.border_title = "GPUs"
        self.holders.border_title = "Holders (by owner)"
        self.unit_panel.border_title = "Unit"
        self.memory_plot.border_title = "Memory history (GiB)"
        self.progress_panel.border_title = "Action"
        if len(self.dashboard.views) > 1:
            self.host_list.add_class("-multi")
        self.holders.focus()
        self.ready = True
        self.fit(self.app.size.width, self.app.size.height)
        self.refresh_view()

    def on_resize(self, event: Resize) -> None:
        self.fit(event.size.width, event.size.height)

    def fit(self, width: int, height: int) -> None:
        """Show what the terminal has room for (gpudash/ui/layout.py has the sizes)."""
        for name, applies in size_classes(width, height).items():
            self.set_class(applies, name)
        if not self.ready:  # the first Resize comes before on_mount
            return
        # Under 30 rows the log's column header would leave it one row.
        self.action_log.show_header = not self.has_class("-tiny")
        self.action_log.fit(hosts=len(self.dashboard.views) > 1, narrow=self.has_class("-thin"))
        self.refresh_unit()
        self.refresh_progress()

    # --- drawing -------------------------------------------------------------------------

    @drawing
    def refresh_header(self) -> None:
        app = self.dashboard
        pal = palette(app)
        now = app.clock()
        self.header_bar.update(
            header_text(app.views, app.current_host, now, app.stale_after, app.read_only, pal)
        )
        self.notice.show(app.view, now, pal)
        if len(app.views) > 1:
            self.host_list.show(app.views, now, app.stale_after, pal)

    @drawing
    def refresh_host_rows(self, hosts: set[int]) -> None:
        """Only these hosts' rows of the host list (their samples arrived)."""
        app = self.dashboard
        if len(app.views) > 1:
            self.host_list.show(app.views, app.clock(), app.stale_after, palette(app),
                                only=hosts)

    @drawing
    def refresh_view(self) -> None:
        """Redraw everything from the current host's latest snapshot, in place."""
        if not self.ready:
            return
        app = self.dashboard
        pal = palette(app)
        view = app.view
        with app.batch_update():
            self.refresh_header()
            self.gpu_table.show(view.snapshot, pal)
            self.gpu_grid.show(view.snapshot, pal)
            if app.welcome:
                self.guide.show(view.triage, app.key_of, app.running)
            rows = holder_rows(view.triage, pal) if view.triage else []
            self.holders.show(filter_rows(rows, app.holder_filter))
            app.selected_key = self.holders.selected_key()
            self.refresh_unit()
            self.refresh_plot()
            self.refresh_progress()

    @drawing
    def refresh_unit(self) -> None:
        app = self.dashboard
        view = app.view
        owner, _unit, pid = selection_of(view.triage, app.selected_key)
        group = view.triage.group(owner) if view.triage and owner else None
        process = view.snapshot.process(pid) if view.snapshot and pid is not None else None
        pal = palette(app)
        self.unit_panel.show(unit_text(group, process, pal))
        # Too thin for the unit panel: its gist goes on Holders' border, Enter shows it all.
        self.holders.border_subtitle = unit_gist(group, pal) if self.has_class("-thin") else None

    @drawing
    def refresh_plot(self) -> None:
        app = self.dashboard
        view = app.view
        snap = view.snapshot
        if snap is None:
            return
        if app.plot_all:
            gpus = [g.index for g in snap.gpus]
            title = "all GPUs"
        else:
            selected = self.gpu_table.selected_gpu()
            gpus = [] if selected is None else [selected]
            title = f"GPU {selected}"
        totals = [g.memory_total_mib for g in snap.gpus if g.memory_total_mib]
        ymax = max(totals) / 1024 if totals else None
        self.memory_plot.show(view.history, gpus, ymax, title)

    @drawing
    def refresh_progress(self) -> None:
        app = self.dashboard
        panel = self.progress_panel
        state = app.controller.shown
        shown = app.result_shown and state is not None
        panel.set_class(shown, "-shown")
        # On a short terminal the action panel takes the GPU table's place (it shows the
        # same memory per GPU, plus the target).
        self.set_class(shown, "-acting")
        if not shown or state is None:
            return
        self.fit_progress()
        self.call_after_refresh(self.fit_progress)  # again once the others are laid out
        width, height = app.size
        options = app.exec_options
        panel.show(state.plan, state.progress, state.report, state.error, palette(app),
                   settle=options.settle, term_timeout=options.term_timeout,
                   columns=progress_columns(width, height))

    def fit_progress(self) -> None:
        """Cap the action panel at what the screen has left for it (see progress_room)."""
        top = self.query_one("#top")
        acting_tiny = self.has_class("-tiny") and self.has_class("-acting")
        others = sum(
            w.outer_size.height
            for w in (self.header_bar, self.host_list, self.notice, self.action_log,
                      self.guide, self.query_one(DashboardFooter))
            if w.display
        ) + (0 if acting_tiny or not top.display else top.outer_size.height)
        room = progress_room(self.size.height, others)
        if self.progress_panel.styles.max_height != Scalar.from_number(room):
            self.progress_panel.styles.max_height = room

    def log_action(
        self, host: str, action: str, outcome: str, ok: bool | None,
        details: Sequence[str] = (),
    ) -> None:
        pal = palette(self.dashboard)
        self.action_log.add(
            LogEntry(self.dashboard.clock(), host, action, outcome, ok, tuple(details)),
            pal.success, pal.error,
        )

    # --- table events --------------------------------------------------------------------

    @drawing
    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        app = self.dashboard
        if isinstance(event.data_table, HoldersTable):
            app.selected_key = None if event.row_key.value is None else str(event.row_key.value)
            self.refresh_unit()
        elif isinstance(event.data_table, GpuTable) and not app.plot_all:
            self.refresh_plot()

    @drawing
    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        app = self.dashboard
        if isinstance(event.data_table, HostList) and event.row_key.value is not None:
            app.action_host(int(event.row_key.value))
        elif isinstance(event.data_table, HoldersTable):
            view = app.view
            owner, _unit, pid = selection_of(view.triage, app.selected_key)
            group = view.triage.group(owner) if view.triage and owner else None
            process = view.snapshot.process(pid) if view.snapshot and pid is not None else None
            if group is not None:
                app.push_screen(DetailScreen(clean(owner),
                                             unit_text(group, process, palette(app))))
        elif isinstance(event.data_table, ActionLog):
            entry = self.action_log.entry_at(event.cursor_row)
            if entry is not None:
                app.push_screen(DetailScreen(f"{entry.action} on {entry.host}",
                                             self.action_log.detail(entry)))
