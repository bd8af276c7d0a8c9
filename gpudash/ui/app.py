"""The gpudash dashboard app: the composition root of hosts, screens and actions.

Data flows one way: ``HostFeeds`` follows each host's ``HostSource`` and records every
snapshot in its ``HostView``; the screens redraw in place. ``MainScreen`` (one host) and
``FleetScreen`` (every host) own their keys; ``Acting`` walks a destructive action from its
plan through the confirm dialog and the worker to its logged, audited outcome. The app holds
the state they share (``gpudash.ui.state.Dashboard``), the theme, the keymap, held keys."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver
from textual.reactive import reactive
from textual.screen import ModalScreen, Screen
from textual.theme import Theme

from gpudash.engine import ActionReport, ExecOptions
from gpudash.protocol.source import HostSource
from gpudash.session.controller import ActionController
from gpudash.state import kept
from gpudash.ui import messages as msg
from gpudash.ui.acting import Acting
from gpudash.ui.bindings import binding_table, bindings
from gpudash.ui.commands import DashboardCommands
from gpudash.ui.driver import SafeLinuxDriver, safe_driver
from gpudash.ui.feeds import HostFeeds
from gpudash.ui.heap import steady_heap
from gpudash.ui.hosts import HostView
from gpudash.ui.keyhold import HoldsKeys
from gpudash.ui.main_screen import MainScreen
from gpudash.ui.notices import LiteralNotices
from gpudash.ui.outcome import DashboardOutcome, still_held, visit_of
from gpudash.ui.screens import ConfirmModal, HelpScreen
from gpudash.ui.startup import chosen_theme, load_user_files
from gpudash.ui.state import LastAction
from gpudash.ui.stopping import OutsideStop
from gpudash.ui.styles_cache import let_go
from gpudash.ui.text import clean
from gpudash.ui.themes import VARIABLE_DEFAULTS
from gpudash.ui.widgets.holder_view import HolderView

if TYPE_CHECKING:
    from gpudash.ui.fleet_screen import FleetScreen

__all__ = ["DashboardOutcome", "GpudashApp", "run_dashboard"]

DEFAULT_THEME = "gpudash-night"

log = logging.getLogger("gpudash.ui")


class GpudashApp(HoldsKeys, LiteralNotices):
    """The dashboard. ``clock`` gives epoch seconds; tests freeze it for snapshots."""

    TITLE = "gpudash"
    CSS_PATH = "app.tcss"
    COMMANDS = App.COMMANDS | {DashboardCommands}
    BINDINGS = bindings("app")

    current_host: reactive[int] = reactive(0, bindings=True)
    selected_key: reactive[str | None] = reactive(None, bindings=True)
    running: reactive[bool] = reactive(False, bindings=True)
    plot_all: reactive[bool] = reactive(True)
    plot_metric: reactive[str] = reactive("memory")
    result_shown: reactive[bool] = reactive(False, bindings=True)

    def __init__(
        self,
        sources: Sequence[HostSource],
        *,
        interval: float,
        read_only: bool,
        theme: str | None,
        exec_options: ExecOptions | None,
        clock: Callable[[], float] = time.time,
        theme_dirs: Sequence[Path] | None = None,
        welcome: bool = False,
    ) -> None:
        # Before Textual's init (it asks get_driver_class): a lost terminal, SIGTERM, SIGHUP
        self.outside_stop = OutsideStop(lambda: 6 if self.running else 0)
        super().__init__()
        let_go()  # the style caches of widgets gone (Textual keeps 1,024)
        if not sources:
            raise ValueError("at least one host source is needed")
        self.views = [HostView(source=s, name=s.name) for s in sources]
        self.read_only = read_only
        self.exec_options = exec_options or ExecOptions()
        self.clock = clock
        self.sample_interval = interval  # + and - change it, every host
        self.stale_after = 3 * interval + 2
        self.fresh_within = 1.5 * interval  # a sample younger than this: "just now"
        self.controller = ActionController(self.exec_options)
        self.welcome = welcome  # the demo's walkthrough line
        self.last_actions: dict[str, LastAction] = {}  # host name -> its latest action
        self.holder_filter = ""
        self.paused = False  # p: samples are read and recorded, not drawn
        self.holder_view = HolderView()
        self._last_draw_error: str | None = None
        files = load_user_files(theme_dirs)
        self.settings, self.keymap, self._warnings = files.settings, files.keymap, files.warnings
        for t in files.themes:
            self.register_theme(t)
        chosen, unknown = chosen_theme(theme, self.available_themes, DEFAULT_THEME)
        self.theme = chosen or self.theme
        self._warnings += [[unknown]] if unknown else []
        # The app is both: the App the dialogs and workers need, the state screens read.
        self.acting = Acting(self, self, self._refresh_progress,
                             lambda: self.screen is self.main)
        self.main = MainScreen(self, self.acting)
        self.fleet: FleetScreen | None = None  # several hosts: their table, shown first
        if len(self.views) > 1:  # (its modules, and the fleet rows', load only then)
            from gpudash.ui.fleet_screen import FleetScreen
            self.fleet = FleetScreen(self)
        self.feeds = HostFeeds(self, self, self.main, self.fleet, interval,
                               on_sample=self.acting.reverify)

    def set_sample_interval(self, seconds: float) -> None:
        self.sample_interval = seconds
        self.stale_after, self.fresh_within = 3 * seconds + 2, 1.5 * seconds
        self.feeds.set_interval(seconds)

    # --- layout ------------------------------------------------------------------------

    def _theme_changed(self, theme: Theme) -> None:
        self.main.refresh_view()
        if (problem := kept.keep_theme(theme.name)) is not None:  # the next run starts in it
            self.notify(f"Theme not kept: {clean(problem)}", severity="warning", markup=False)

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(VARIABLE_DEFAULTS)

    def get_driver_class(self) -> type[Driver]:
        base = super().get_driver_class()  # Textual's Linux driver (macOS too), or headless
        if base is LinuxDriver:
            return safe_driver(self.outside_stop.ask)
        return base

    def get_default_screen(self) -> MainScreen:
        return self.main

    def on_mount(self) -> None:
        # told from outside (kill, systemd, the terminal closing)
        self.outside_stop.install(asyncio.get_running_loop(), self.acting.stop_from_outside,
                                  at_once=self._give_up_terminal)
        if self.keymap:
            self.set_keymap(self.keymap)
        self.theme_changed_signal.subscribe(self, self._theme_changed)
        for message in self._warnings:
            self.notify(message, severity="warning", timeout=15, markup=False)
        self.feeds.start()
        if self.fleet is not None:  # installed: left for a host, it keeps its rows
            self.install_screen(self.fleet, name="fleet")
            self.push_screen("fleet")

    # --- what arrives: samples, link news, action progress ------------------------------

    def on_host_updated(self, message: msg.HostUpdated) -> None:
        self.feeds.updated(message)

    def on_host_failed(self, message: msg.HostFailed) -> None:
        self.feeds.failed(message)

    def on_host_connecting(self, message: msg.HostConnecting) -> None:
        self.feeds.connecting(message)

    def on_action_progressed(self, message: msg.ActionProgressed) -> None:
        if self.screen_stack:  # else shutting down
            self.acting.progressed(message)

    def on_action_finished(self, message: msg.ActionFinished) -> None:
        if self.screen_stack:  # else shutting down: the audit record is written already
            self.acting.finished(message)

    # --- the dashboard state the screens share ------------------------------------------

    @property
    def view(self) -> HostView:
        return self.views[self.current_host]

    @property
    def shown_screen(self) -> Screen[Any]:
        """The host screen or the fleet, whichever is seen (maybe under a dialog or help)."""
        screens: list[Screen[Any]] = self.screen_stack
        return next((s for s in reversed(screens) if not isinstance(s, ModalScreen)), self.main)

    @property
    def fleet_shown(self) -> bool:
        """The fleet table is what the operator sees (not the host screen)."""
        return self.shown_screen is self.fleet

    def open_host(self, index: int) -> None:
        """Leave the fleet table for host ``index``'s screen."""
        if self.fleet is not None and self.fleet_shown:
            self.fleet.leave_for_host()
            self.pop_screen()
        if index != self.current_host:
            self.main.action_host(index)
        else:
            self.main.refresh_view()  # drawn afresh: nothing was drawn while the fleet showed

    def _refresh_progress(self) -> None:
        if self.main.ready:
            self.main.refresh_progress()
            self.main.refresh_gpus()  # the action's sample may be the newest figure

    def log_action(self, host: str, action: str, outcome: str, ok: bool | None,
                   details: Sequence[str] = ()) -> None:
        self.main.log_action(host, action, outcome, ok, details)
        self._last_action(host, LastAction(action, outcome, ok, self.clock()))

    def show_running(self, host: str, action: str, doing: str) -> None:
        self._last_action(host, LastAction(action, doing, None, self.clock(), running=True))

    def _last_action(self, host: str, last: LastAction) -> None:
        self.last_actions[host] = last
        if (fleet := self.fleet) is not None and fleet.ready:
            for index in (i for i, v in enumerate(self.views) if v.name == host):
                fleet.host_changed(index)

    def key_of(self, action: str) -> str:
        """The key pressed for ``action`` (a binding id less "gpudash."), keymap applied."""
        default = binding_table().get(f"gpudash.{action}", (action, ""))[0]
        keys = self.keymap.get(f"gpudash.{action}", default)
        return self.get_key_display(Binding(keys.split(",")[0].strip(), action))

    # --- the app's own keys -------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "command_palette" and isinstance(self.screen, ConfirmModal):
            return False  # the dialog is answered first: nothing is picked behind it
        return True

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Help: keys", "Show every key", self.action_help)

    def action_help(self) -> None:
        shown = next((s for s in (self.main, self.fleet) if s and s is self.shown_screen), None)
        rows, sections = (shown.help_rows(), shown.help_sections()) if shown else ([], [])
        self.push_screen(HelpScreen(rows, self.read_only, sections))

    async def action_quit(self) -> None:
        self.acting.quit()

    # reports, as tests and the CLI's exit read them
    @property
    def last_report(self) -> ActionReport | None:
        return self.controller.last_report

    @property
    def reports(self) -> list[ActionReport]:
        return self.controller.reports

    @property
    def interrupted_report(self) -> ActionReport | None:
        return self.controller.interrupted

    def _give_up_terminal(self) -> None:
        """Told to stop: a terminal that takes no more output is not waited for (called
        from a signal handler or another thread: it only sets a flag)."""
        if isinstance(self._driver, SafeLinuxDriver):
            self._driver.give_up_writes()

    def drawing_failed(self, where: str, exc: Exception) -> None:
        log.error("%s failed on %s", where, self.view.name, exc_info=exc)
        message = f"{where}: {type(exc).__name__}: {exc}"
        if message != self._last_draw_error:  # once per distinct error, not per sample
            self._last_draw_error = message
            self.notify(f"Could not draw {self.view.name}: {message} (details in the log file)",
                        title="Display error", severity="error", timeout=10)


def run_dashboard(sources: list[HostSource], *, interval: float, read_only: bool,
                  theme: str | None, exec_options: ExecOptions | None,
                  demo: bool = False) -> DashboardOutcome:
    """Run the dashboard until the operator quits."""
    app = GpudashApp(
        sources, interval=interval, read_only=read_only, theme=theme, exec_options=exec_options,
        welcome=demo and not read_only,
    )
    try:
        with steady_heap():
            result = app.run()
    finally:
        app.outside_stop.uninstall()  # its deadline, once started, still bounds the close
    code = result if isinstance(result, int) else (app.return_code or 0)
    stopped = app.interrupted_report
    return DashboardOutcome(
        code, stopped, app.acting.waited_for,
        still_held(stopped, [v.snapshot for v in app.views]) if stopped else (),
        visit_of(app.views, app.last_actions))
