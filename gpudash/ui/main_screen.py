"""The host screen: what it shows, how it fits the terminal, and its keys.

The dashboard state (``gpudash.ui.state.Dashboard``) holds the hosts, the selection and
the action controller; this screen draws it into its widgets, in place, turns table
events into selections, and owns the host keys: their bindings, when each applies
(``check_action``), their palette entries and help rows, all from ``gpudash.ui.bindings``;
the keys that only change the view are its base's, ``gpudash.ui.view_keys``. A redraw that
fails is logged and shown, never allowed to end the app.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar, cast

from rich.markup import escape
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.css.scalar import Scalar
from textual.events import Key, Resize
from textual.geometry import Size
from textual.widgets import DataTable

from gpudash.engine import SPECS_BY_NAME, Selection, selection_for
from gpudash.session.controller import freshest_memory
from gpudash.ui.acting import Acting
from gpudash.ui.bindings import KEYS, bindings, help_rows, keys_to_actions
from gpudash.ui.compositor import BandCompositor
from gpudash.ui.keyhold import hold
from gpudash.ui.layout import progress_columns, progress_room, size_classes
from gpudash.ui.palette import palette
from gpudash.ui.reason_prompt import ReasonPrompt, drain_heading
from gpudash.ui.screens import DetailScreen
from gpudash.ui.signal_picker import SignalPicker, picker_heading
from gpudash.ui.state import Dashboard
from gpudash.ui.text import clean
from gpudash.ui.unheld_panel import selected_gpu, unheld_text
from gpudash.ui.view_keys import ViewKeys, tagged_pids
from gpudash.ui.widgets.action_log import ActionLog, LogEntry, recent_entries
from gpudash.ui.widgets.footer import DashboardFooter
from gpudash.ui.widgets.gpus import GpuGrid, GpuTable
from gpudash.ui.widgets.guide import Guide
from gpudash.ui.widgets.header import HeaderBar, HostList, header_text
from gpudash.ui.widgets.holder_filter import filter_rows
from gpudash.ui.widgets.holders import HoldersTable, RowCache, holder_rows, selection_of
from gpudash.ui.widgets.notice import HostNotice
from gpudash.ui.widgets.plotview import HistoryPlot
from gpudash.ui.widgets.progress import ActionProgressPanel
from gpudash.ui.widgets.quiet import quiet_border
from gpudash.ui.widgets.unit_panel import UnitPanel, unit_gist, unit_text

ACTIONS = SPECS_BY_NAME  # the destructive actions, by their binding's action name
HOSTS_ONLY = frozenset(k.action.split("(")[0] for k in KEYS if k.hosts)
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


class MainScreen(ViewKeys):
    """Header, hosts, GPUs and the plot, the notice, holders and the unit panel, the
    action panel, the log, the walkthrough line and the footer."""

    BINDINGS = bindings("main")

    def __init__(self, dashboard: Dashboard, acting: Acting) -> None:
        super().__init__(id="main")
        self._compositor = BandCompositor()  # the header and a holder: two small draws
        self.dashboard = dashboard
        self.acting = acting
        self.ready = False  # widgets mounted: drawing may start
        self._toast_until: dict[tuple[str, str], float] = {}
        self._key_to_action: dict[str, str] = {}
        self._row_cache = RowCache()  # holder rows whose inputs did not change: kept

    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        yield HostList(id="hosts")
        with Horizontal(id="top"):
            yield GpuTable(id="gpus")
            yield GpuGrid(id="gpu-grid")
            yield HistoryPlot(id="plot")
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
        self.plot = self.query_one(HistoryPlot)
        self.holders = self.query_one(HoldersTable)
        self.unit_panel = self.query_one(UnitPanel)
        self.progress_panel = self.query_one(ActionProgressPanel)
        self.action_log = self.query_one(ActionLog)
        self._recent_actions()
        self.gpu_table.border_title = "GPUs"
        self.gpu_grid.border_title = "GPUs"
        self.holders.border_title = "Holders (by owner)"
        self.unit_panel.border_title = "Unit"
        self.plot.border_title = "Memory history (GiB)"
        self.progress_panel.border_title = "Action"
        if len(self.dashboard.views) > 1:
            self.host_list.add_class("-multi")
        self._key_to_action = keys_to_actions(self.dashboard.keymap)
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
        self.action_log.fit(hosts=len(self.dashboard.views) > 1, narrow=self.has_class("-thin"),
                            width=width)
        self.refresh_gpus()
        self.refresh_unit()
        self.refresh_progress()

    # --- drawing -------------------------------------------------------------------------

    @drawing
    def refresh_header(self) -> None:
        app = self.dashboard
        pal = palette(self.app)
        now = app.clock()
        self.header_bar.update(
            header_text(app.views, app.current_host, now, app.stale_after, app.read_only, pal,
                        self.size.width or 1000, app.fresh_within, app.paused)
        )
        self.notice.show(app.view, now, pal)
        if len(app.views) > 1:
            self.host_list.show(app.views, now, app.stale_after, pal)

    @drawing
    def refresh_host_rows(self, hosts: set[int]) -> None:
        """Only these hosts' rows of the host list (their samples arrived)."""
        app = self.dashboard
        if len(app.views) > 1:
            self.host_list.show(app.views, app.clock(), app.stale_after, palette(self.app),
                                only=hosts)

    @drawing
    def refresh_gpus(self) -> None:
        """The GPU table, or on a small screen the grid (app.tcss): only the one shown is
        drawn; ``fit`` draws the other when the size makes it the one."""
        view, pal = self.dashboard.view, palette(self.app)
        snapshot = freshest_memory(view.snapshot, self.dashboard.controller.shown, view.name)
        if self.has_class("-thin") or self.has_class("-tiny"):
            self.gpu_grid.show(snapshot, pal)
        else:
            self.gpu_table.show(snapshot, pal)

    @drawing
    def refresh_view(self) -> None:
        """Redraw everything from the current host's latest snapshot, in place."""
        if not self.ready:
            return
        app = self.dashboard
        view = app.view
        with self.app.batch_update():
            self.refresh_header()
            self.refresh_gpus()
            if app.welcome:
                self.guide.show(view.triage, app.key_of, app.running)
            self.refresh_holders()
            self.refresh_unit()
            self.refresh_plot()
            self.refresh_progress()

    @drawing
    def refresh_holders(self) -> None:
        """The holders as the operator arranged them; the title says the filters in force
        and how many rows they hide."""
        app = self.dashboard
        hv = app.holder_view
        triage = app.view.triage
        pal = palette(self.app)
        cache = self._row_cache
        rows = filter_rows(holder_rows(triage, pal, hv, cache), app.holder_filter) if triage \
            else []
        column, header = hv.indicator()
        self.holders.show(rows, {column: header})
        filters = [f"“{escape(clean(app.holder_filter))}”"] if app.holder_filter else []
        filters += [f"user {escape(clean(hv.user))}"] if hv.user is not None else []
        filters += [f"GPU {hv.gpu}"] if hv.gpu is not None else []
        filters += [f"{len(hv.tagged)} tagged"] if hv.tagged else []
        title = "Holders (flat: F5)" if hv.flat else "Holders (by owner)"
        if filters and triage is not None:
            unfiltered = holder_rows(triage, pal, replace(hv, user=None, gpu=None), cache)
            hidden = len(unfiltered) - len(rows)
            # border titles are markup: the typed text is escaped, never interpreted
            title += f" — only {', '.join(filters)}: {hidden} hidden (esc clears)"
        quiet_border(self.holders, "title", title)
        cache.drawn()
        app.selected_key = self.holders.selected_key()

    @drawing
    def refresh_unit(self) -> None:
        app = self.dashboard
        view = app.view
        owner, _unit, pid = selection_of(view.triage, app.selected_key)
        group = view.triage.group(owner) if view.triage and owner else None
        process = view.snapshot.process(pid) if view.snapshot and pid is not None else None
        pal = palette(self.app)
        why = view.triage.orphan_why(pid) if view.triage and pid is not None else None
        crash = view.crashes.reason(group.unit.name) if group and group.unit else None
        fixes = self.availability("fix_unit")[0] is True  # the key only where it works
        resets = self.availability("gpu_reset")[0] is True
        resumes = self.availability("resume_node")[0] is True
        self.unit_panel.show(unheld_text(view.triage, app.selected_key, app.holder_view, pal,
                                         app.key_of("gpu_reset") if resets else None)
                             or unit_text(group, process, pal, why, crash,
                                          self.dashboard.key_of("fix_unit") if fixes else None,
                                          app.key_of("resume_node") if resumes else None))
        # Too thin for the unit panel: its gist goes on Holders' border, Enter shows it all.
        quiet_border(self.holders, "subtitle",
                     unit_gist(group, pal) if self.has_class("-thin") else None)

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
        series = view.histories[app.plot_metric]
        marks = [r.memory.start for r in app.controller.reports  # where each action began
                 if r.plan.host == view.name and r.memory.start is not None]
        self.plot.show(series, gpus, series.metric.top(snap), title, marks, series.metric)

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
        width, height = self.app.size
        options = app.exec_options
        panel.show(state.plan, state.progress, state.report, state.error, palette(self.app),
                   settle=options.settle, term_timeout=options.term_timeout,
                   columns=progress_columns(width, height))

    def watch_virtual_size(self, size: Size) -> None:
        """Taller than the terminal once laid out (a panel grew after the action panel was
        fitted): fit it again, or the whole screen scrolls by that line, header and all."""
        if self.ready and size.height > self.size.height and self.progress_panel.display:
            self.call_after_refresh(self.fit_progress)

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
        pal = palette(self.app)
        self.action_log.add(
            LogEntry(self.dashboard.clock(), host, action, outcome, ok, tuple(details)),
            pal.success, pal.error,
        )

    def _recent_actions(self) -> None:
        """The Action log starts with the audit's last day of the hosts on screen."""
        pal = palette(self.app)
        for entry in recent_entries([v.name for v in self.dashboard.views],
                                    self.dashboard.clock()):
            self.action_log.add(entry, pal.success, pal.error)

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
            self.action_host(int(event.row_key.value))
        elif isinstance(event.data_table, GpuTable) and event.row_key.value is not None:
            gpu = int(event.row_key.value)  # only its holders; Enter again: all of them
            hv = app.holder_view
            app.holder_view = replace(hv, gpu=None if hv.gpu == gpu else gpu)
            self.refresh_holders()
            self.refresh_unit()
        elif isinstance(event.data_table, HoldersTable):
            view = app.view
            owner, _unit, pid = selection_of(view.triage, app.selected_key)
            group = view.triage.group(owner) if view.triage and owner else None
            process = view.snapshot.process(pid) if view.snapshot and pid is not None else None
            why = view.triage.orphan_why(pid) if view.triage and pid is not None else None
            if group is not None:
                self.app.push_screen(DetailScreen(clean(owner), unit_text(
                    group, process, palette(self.app), why)))
        elif isinstance(event.data_table, ActionLog):
            entry = self.action_log.entry_at(event.cursor_row)
            if entry is not None:
                self.app.push_screen(DetailScreen(f"{entry.action} on {entry.host}",
                                             self.action_log.detail(entry)))

    # --- keys: when each applies, the palette, help ----------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        views = len(self.dashboard.views)
        if action in ACTIONS:
            if self.app.screen is not self:
                return False  # under a dialog, or the fleet on top: it acts on no host
            return self.availability(action)[0]
        if action in HOSTS_ONLY:
            index = parameters[0] if parameters else 0
            return views > 1 and (action != "host" or isinstance(index, int) and index < views)
        if action == "hide_result":
            return self.dashboard.result_shown
        return True

    def availability(self, action: str) -> tuple[bool | None, str]:
        """(True | None greyed | False hidden, why not) for one of the destructive actions."""
        app = self.dashboard
        if app.read_only:
            return False, "read-only mode: gpudash will not act on any host"
        if app.running:
            return None, "an action is running; wait for its result"
        view = app.view
        if view.snapshot is None or view.triage is None:
            return None, f"no sample from {view.name} yet"
        reason = ACTIONS[action].precheck(view.triage, self.selection())
        if reason is not None and ACTIONS[action].hidden_unless_fits:
            return False, reason
        return (True, "") if reason is None else (None, reason)

    def selection(self) -> Selection:
        """What the operator points at in the holders view, as the engine takes it."""
        app = self.dashboard
        owner, _unit, pid = selection_of(app.view.triage, app.selected_key)
        gpu = selected_gpu(app.view.triage, app.selected_key, app.holder_view)
        return replace(selection_for(app.view.triage, owner, pid, gpu=gpu),
                       pids=tagged_pids(app))

    def on_key(self, event: Key) -> None:
        # A disabled action's key reaches here instead of its binding: say why.
        action = self._key_to_action.get(event.key)
        if action is not None and self.availability(action)[0] is not True:
            event.stop()
            self.action_explain(action)

    def action_explain(self, action: str) -> None:
        """Say why ``action`` is not available now: once per reason while it shows, so a
        key pressed eight times does not stack eight notifications."""
        reason = self.availability(action)[1]
        title = ACTIONS[action].label
        now = time.monotonic()
        if self._toast_until.get((title, reason), 0.0) > now:
            return
        self._toast_until[(title, reason)] = now + self.app.NOTIFICATION_TIMEOUT
        self.app.notify(reason, title=title, severity="warning", markup=False)

    def palette_commands(self) -> list[tuple[str, str, str, bool]]:
        """(title, help, action, available) of what the command palette offers here.

        Actions that do not fit the selection are offered greyed, with the reason as
        their help, as the footer greys their keys; read-only mode leaves them out."""
        app = self.dashboard
        sel = self.selection()
        out: list[tuple[str, str, str, bool]] = []
        for k in KEYS:
            if k.where != "main" or not k.palette or (k.hosts and len(app.views) < 2):
                continue
            available, reason = (self.availability(k.action) if k.action in ACTIONS
                                 else (True, ""))
            title = ACTIONS[k.action].title_for(sel) if k.action in ACTIONS else k.palette
            if available is True:
                out.append((title, f"key {app.key_of(k.name)}", k.action, True))
            elif available is None:
                out.append((title, f"not now: {reason}", k.action, False))
        if len(app.views) > 1:
            for i, v in enumerate(app.views):
                out.append((f"Host: {clean(v.name)}", f"key {i + 1}", f"host({i})", True))
        return out

    def help_rows(self) -> list[tuple[str, str, bool | None]]:
        """The help screen's rows: every key here, greyed where it does not apply now."""
        available = {name: self.availability(name)[0] for name in ACTIONS}
        return help_rows("main", self.dashboard.keymap, len(self.dashboard.views), available)

    # --- the destructive actions: each plans, and is confirmed before anything is sent --

    def plan_action(self, action: str) -> None:
        """Plan ``action`` for the selection and ask for confirmation (or say why not)."""
        if self.availability(action)[0] is not True:
            self.action_explain(action)
            return
        self.acting.plan(ACTIONS[action], self.dashboard.current_host, self.selection())

    def action_send_signal(self) -> None:
        """Pick a signal for the selected process; then planned and confirmed as any."""
        if self.availability("send_signal")[0] is not True:
            self.action_explain("send_signal")
            return
        view, host, sel = self.dashboard.view, self.dashboard.current_host, self.selection()
        heading = picker_heading(view.name, view.snapshot, sel)
        if heading is None:
            return

        def picked(sig: int | None) -> None:
            if sig is not None and self.dashboard.current_host == host:
                self.acting.plan(ACTIONS["send_signal"], host, replace(sel, signal=sig))

        hold(self.app)
        self.app.push_screen(SignalPicker(heading), picked)


    def action_drain_node(self) -> None:
        """Ask why the node is drained; then planned and confirmed as any action."""
        if self.availability("drain_node")[0] is not True:
            self.action_explain("drain_node")
            return
        view, host, sel = self.dashboard.view, self.dashboard.current_host, self.selection()

        def given(words: str | None) -> None:
            if words is not None and self.dashboard.current_host == host:
                self.acting.plan(ACTIONS["drain_node"], host, sel, reason=words)

        hold(self.app)
        self.app.push_screen(ReasonPrompt(drain_heading(view.name, view.snapshot)), given)


# Every action of the registry is planned and confirmed alike (``plan_action``), but for
# one with a dialog of its own first (``action_send_signal``): its ``action_<name>``.
for _spec in ACTIONS.values():
    if not hasattr(MainScreen, f"action_{_spec.name}"):
        setattr(MainScreen, f"action_{_spec.name}",
                lambda self, _name=_spec.name: self.plan_action(_name))
