"""The gpudash dashboard app: hosts, GPUs, holders, unit facts, actions with live proof.

Data flows one way: one worker per host follows its ``HostSource`` and posts a message per
snapshot; the app stores it in a ``HostView`` and redraws the widgets in place. Actions are
planned by the engine from the latest snapshot, confirmed in a modal, executed in a worker
whose progress arrives as messages, logged, and appended to the audit file.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import Any

from rich.markup import escape
from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver
from textual.events import Key
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.reactive import reactive
from textual.screen import ModalScreen, Screen
from textual.timer import Timer
from textual.worker import Worker, WorkerCancelled, WorkerFailed

from gpudash.domain.model import HostSnapshot, SourceKind
from gpudash.domain.triage import HostTriage
from gpudash.engine import (
    SPECS_BY_NAME,
    STARTING,
    ActionKind,
    ActionPlan,
    ActionReport,
    ActionSpec,
    ExecOptions,
    PlanError,
    Selection,
    replan,
    selected_owner,
    selection_for,
)
from gpudash.protocol.source import Capability, HostControl, HostSource, SourceError
from gpudash.session.controller import (
    ActionController,
    Running,
    outcome_line,
    serving_request,
    watch,
)
from gpudash.state import config, footprints
from gpudash.ui.commands import DashboardCommands
from gpudash.ui.driver import SafeLinuxDriver, safe_driver
from gpudash.ui.fleet_screen import FleetScreen, LastAction
from gpudash.ui.hosts import HostView, follow_host
from gpudash.ui.keymap import load_keymap
from gpudash.ui.layout import PLOT_MIN
from gpudash.ui.main_screen import MainScreen
from gpudash.ui.messages import (
    ActionFinished,
    ActionProgressed,
    HostConnecting,
    HostFailed,
    HostUpdated,
)
from gpudash.ui.models import Choice, JournalScreen, ModelPicker
from gpudash.ui.quit import AFTER, NOW, QuitWhileActing
from gpudash.ui.screens import ConfirmModal, FilterScreen, HelpScreen
from gpudash.ui.stopping import OutsideStop
from gpudash.ui.text import clean
from gpudash.ui.themes import VARIABLE_DEFAULTS, load_themes
from gpudash.ui.widgets.holders import (
    HoldersTable,
    selection_of,
)

DEFAULT_THEME = "gpudash-night"
MAX_FPS = 5  # redraws per second at most, whatever the sample rate
MAX_REPLANS = 3  # the host keeps changing under the confirm dialog: stop asking

log = logging.getLogger("gpudash.ui")


@dataclass(frozen=True, slots=True)
class DashboardOutcome:
    """How the dashboard ended: its exit status and an action the operator interrupted."""

    code: int
    interrupted: ActionReport | None = None

# The destructive actions, by the name their binding and ``action_<name>`` method carry:
# everything about them (title, key, label, what they need) is the engine's spec.
ACTIONS = SPECS_BY_NAME
# The one-line toast of a result while another screen hides the Action panel; the panel
# and the log have the whole verdict.
VERDICT_TOAST = {"warning": "⚠ done, something is left to do", "failed": "✘ NOT confirmed",
                 "unknown": "? outcome unknown", "interrupted": "■ interrupted"}
KEY_TO_ACTION = {spec.key: name for name, spec in ACTIONS.items()} | {"shift+d": "stop_disable"}


def binding_table() -> dict[str, tuple[str, str]]:
    """id -> (default keys, description) of every binding a keymap may rebind."""
    out: dict[str, tuple[str, str]] = {}
    for owner in (GpudashApp, ConfirmModal, HelpScreen, FilterScreen, FleetScreen):
        for binding in owner.BINDINGS:
            if isinstance(binding, Binding) and binding.id:
                out[binding.id] = (binding.key, binding.description)
    return out


class GpudashApp(App[int]):
    """The dashboard. ``clock`` gives epoch seconds; tests freeze it for snapshots."""

    TITLE = "gpudash"
    CSS_PATH = "app.tcss"
    COMMANDS = App.COMMANDS | {DashboardCommands}
    BINDINGS = [
        *(
            Binding(spec.key, name, spec.label, id=spec.binding_id)
            for name, spec in ACTIONS.items()
        ),
        Binding("g", "toggle_plot", "Plot all/one", id="gpudash.toggle_plot"),
        Binding("j", "journal", "Journal", show=False, id="gpudash.journal"),
        Binding("slash", "filter", "Filter", show=False, id="gpudash.filter"),
        Binding("h", "next_host", "Next host", id="gpudash.next_host"),
        Binding("F", "fleet", "Fleet", id="gpudash.fleet"),
        *(
            Binding(str(n), f"host({n - 1})", f"Host {n}", show=False, id=f"gpudash.host{n}")
            for n in range(1, 10)
        ),
        Binding("x", "hide_result", "Hide result", id="gpudash.hide_result"),
        Binding("T", "change_theme", "Theme", id="gpudash.theme"),
        Binding("question_mark", "help", "Help", id="gpudash.help"),
        Binding("q", "quit", "Quit", id="gpudash.quit"),
    ]

    current_host: reactive[int] = reactive(0, bindings=True)
    selected_key: reactive[str | None] = reactive(None, bindings=True)
    running: reactive[bool] = reactive(False, bindings=True)
    plot_all: reactive[bool] = reactive(True)
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
        # Before Textual's own init, which asks get_driver_class: a terminal that goes away
        # and a SIGTERM or SIGHUP end the app within a bound (gpudash.ui.stopping).
        self.outside_stop = OutsideStop(lambda: 6 if self.running else 0)
        super().__init__()
        if not sources:
            raise ValueError("at least one host source is needed")
        self.views = [HostView(source=s, name=s.name) for s in sources]
        self.interval = interval
        self.read_only = read_only
        self.exec_options = exec_options or ExecOptions()
        self.clock = clock
        self.stale_after = 3 * interval + 2
        self.controller = ActionController(self.exec_options)
        self._action_ids = count(1)
        self._action_id = 0  # the running action's, to drop late progress of an old one
        self._action_worker: Worker[None] | None = None
        self._quit_when_done = False
        self._last_draw_error: str | None = None
        self._startup_warnings: list[str] = []
        self.welcome = welcome  # the demo's walkthrough line
        self.main = MainScreen()
        self.fleet = FleetScreen()  # several hosts: the table of them all, shown first
        self.last_actions: dict[str, LastAction] = {}  # host name -> its latest action
        self.holder_filter = ""
        self._refresh_timer: Timer | None = None
        self._hosts_timer: Timer | None = None
        self._dirty_hosts: set[int] = set()
        self._last_hosts = 0.0
        self._available: tuple[bool | None, ...] = ()
        self._last_refresh = 0.0
        self._toast_until: dict[tuple[str, str], float] = {}
        self.settings, config_errors = config.load()
        if config_errors:
            self._startup_warnings.append(
                "Settings ignored:\n" + "\n".join(map(clean, config_errors)))
        self._keymap, keymap_errors = load_keymap(bindings=binding_table())
        if keymap_errors:
            self._startup_warnings.append(
                "Keymap entries ignored:\n" + "\n".join(map(clean, keymap_errors))
            )
        themes, errors = load_themes(theme_dirs)
        for t in themes:
            self.register_theme(t)
        if errors:
            self._startup_warnings.append(
                "Theme files that could not be loaded:\n" + "\n".join(map(clean, errors))
            )
        wanted = theme or (DEFAULT_THEME if DEFAULT_THEME in self.available_themes else None)
        if wanted is not None:
            if wanted in self.available_themes:
                self.theme = wanted
            else:
                self._startup_warnings.append(
                    f"Unknown theme {clean(wanted)!r}; available: "
                    + ", ".join(sorted(self.available_themes))
                )

    # --- layout ------------------------------------------------------------------------

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(VARIABLE_DEFAULTS)

    def get_driver_class(self) -> type[Driver]:
        base = super().get_driver_class()  # Textual's Linux driver (macOS too), or headless
        if base is LinuxDriver:
            return safe_driver(self.outside_stop.ask)
        return base

    def get_default_screen(self) -> MainScreen:
        return self.main

    @property
    def holders(self) -> HoldersTable:
        return self.main.holders

    def on_mount(self) -> None:
        # told from outside (kill, systemd, the terminal closing)
        self.outside_stop.install(asyncio.get_running_loop(), self._stop_from_outside,
                                  at_once=self._give_up_terminal)
        if self._keymap:
            self.set_keymap(self._keymap)
        # Which action a key means, after the user's keymap: a greyed-out action's key
        # is explained in on_key.
        self._key_to_action = dict(KEY_TO_ACTION)
        for name in ACTIONS:
            keys = self._keymap.get(f"gpudash.{name}")
            if keys:
                self._key_to_action = {k: a for k, a in self._key_to_action.items() if a != name}
                self._key_to_action |= {k.strip(): name for k in keys.split(",")}
        self.theme_changed_signal.subscribe(self, lambda _theme: self.refresh_view())
        for message in self._startup_warnings:
            self.notify(message, severity="warning", timeout=15, markup=False)
        for index in range(len(self.views)):
            self._follow(index)
        self.set_interval(1.0, self._tick)
        if len(self.views) > 1:
            # Installed, so that leaving it for a host keeps it (and its rows) for coming back.
            self.install_screen(self.fleet, name="fleet")
            self.push_screen("fleet")

    # --- hosts -------------------------------------------------------------------------

    def _follow(self, index: int) -> None:
        view = self.views[index]

        async def loop() -> None:
            await follow_host(
                view.source,
                self.interval,
                on_snapshot=lambda s, t, lat: self._record(index, s, t, lat),
                on_error=lambda err, wait: self._post(HostFailed(index, err, wait)),
                on_connecting=lambda n: self._post(HostConnecting(index, n)),
            )

        self.run_worker(
            loop(), name=f"host {view.name}", group=f"host-{index}", exclusive=True,
            exit_on_error=False,
        )

    def _post(self, message: Message) -> None:
        self.post_message(message)

    def _record(
        self, index: int, snapshot: HostSnapshot, result: HostTriage, rtt: float | None
    ) -> None:
        """Every sample is recorded as it arrives (history and triage miss none); only the
        redraw it asks for may be merged with the next one's."""
        self.views[index].record(snapshot, result, rtt, self.clock())
        self.post_message(HostUpdated(index))

    def on_host_updated(self, message: HostUpdated) -> None:
        if not self.screen_stack:  # shutting down
            return
        if self.fleet_shown:  # the host screen is hidden: one fleet row, nothing else
            self.fleet.host_changed(message.host)
        elif message.host == self.current_host:
            self._schedule_refresh()
            # The footer rebuilds its keys on every refresh_bindings: only when one
            # changed (availability follows the shown host only).
            available = tuple(self.availability(name)[0] for name in ACTIONS)
            if available != self._available:
                self._available = available
                self.refresh_bindings()
        else:
            self._schedule_host_rows(message.host)
        self._maybe_reverify(message.host)

    def _schedule_host_rows(self, host: int) -> None:
        """Another host's sample changes only its row in the host list: that row is
        redrawn, with every other one that changed meanwhile, at most ``MAX_FPS`` times
        a second (with 256 hosts, a redraw per sample was most of the CPU)."""
        self._dirty_hosts.add(host)
        if self._hosts_timer is not None:
            return
        wait = self._last_hosts + 1 / MAX_FPS - time.monotonic()
        if wait <= 0:
            self._flush_host_rows()
        else:
            self._hosts_timer = self.set_timer(wait, self._flush_host_rows)

    def _flush_host_rows(self) -> None:
        self._hosts_timer = None
        if not self.screen_stack:  # shutting down
            return
        self._last_hosts = time.monotonic()
        dirty, self._dirty_hosts = self._dirty_hosts, set()
        if self.main.ready:
            self.main.refresh_host_rows(dirty)

    def _schedule_refresh(self) -> None:
        """Redraw now, or once at the end of the current frame: data may arrive at 10 Hz,
        the screen is redrawn at most ``MAX_FPS`` times a second (every sample is still
        recorded, so history and triage miss nothing)."""
        if self._refresh_timer is not None:
            return
        wait = self._last_refresh + 1 / MAX_FPS - time.monotonic()
        if wait <= 0:
            self._flush_refresh()
        else:
            self._refresh_timer = self.set_timer(wait, self._flush_refresh)

    def _flush_refresh(self) -> None:
        self._refresh_timer = None
        if not self.screen_stack:  # shutting down
            return
        self._last_refresh = time.monotonic()
        self.refresh_view()

    def _maybe_reverify(self, host: int) -> None:
        """Samples flow again from a host where an action's outcome was left unknown."""
        plan = self.controller.take_reverify(host)
        if plan is None:
            return
        self._log_action(plan.host, plan.title, "link is back: re-verifying (nothing is re-sent)",
                         None)
        self._start_action(plan, host, act=False)

    def on_host_failed(self, message: HostFailed) -> None:
        if not self.screen_stack:  # shutting down
            return
        view = self.views[message.host]
        view.state = "error"
        view.error = clean(message.error)
        view.retry_at = None if message.retry_in is None else self.clock() + message.retry_in
        self._refresh_header()
        if self.fleet_shown:
            self.fleet.host_changed(message.host)

    def on_host_connecting(self, message: HostConnecting) -> None:
        if not self.screen_stack:  # shutting down
            return
        view = self.views[message.host]
        if message.attempt:
            view.state = "reconnecting"
            self._refresh_header()
            if self.fleet_shown:
                self.fleet.host_changed(message.host)

    def _tick(self) -> None:
        """Once a second: ages and staleness move on without samples. A header the
        current host's sample drew less than a second ago is left as it is (a second
        redraw a second, for "last sample 0.4 s ago")."""
        if not self.screen_stack:  # shutting down
            return
        if self.fleet_shown:
            self.fleet.tick()
        if time.monotonic() - self._last_refresh >= 0.9:
            self._refresh_header()
        elif len(self.views) > 1 and self.main.ready:
            self.main.refresh_host_rows(set(range(len(self.views))))

    # --- drawing -----------------------------------------------------------------------

    @property
    def view(self) -> HostView:
        return self.views[self.current_host]

    # The screen draws; these are what the app's logic asks of it.
    def refresh_view(self) -> None:
        self.main.refresh_view()

    @property
    def fleet_shown(self) -> bool:
        """The fleet table is what the operator sees (not the host screen), maybe under a
        dialog, the help or the command palette."""
        for screen in reversed(self.screen_stack):
            if not isinstance(screen, ModalScreen):
                return screen is self.fleet
        return False

    def _refresh_header(self) -> None:
        if self.main.ready and not self.fleet_shown:
            self.main.refresh_header()

    def _refresh_progress(self) -> None:
        if self.main.ready:
            self.main.refresh_progress()

    def _log_action(
        self, host: str, action: str, outcome: str, ok: bool | None,
        details: Sequence[str] = (),
    ) -> None:
        self.main.log_action(host, action, outcome, ok, details)
        self.last_actions[host] = LastAction(action, outcome, ok, self.clock())
        for index, view in enumerate(self.views):
            if view.name == host and self.fleet.ready:
                self.fleet.host_changed(index)

    def key_of(self, action: str) -> str:
        """The key the user presses for ``action``, after their keymap."""
        default = {name: spec.key for name, spec in ACTIONS.items()} | {
            "help": "question_mark", "quit": "q", "toggle_plot": "g", "filter": "slash",
            "journal": "j", "confirm.yes": "y", "confirm.no": "n", "confirm.escape": "escape",
            "fleet": "F", "fleet.sort": "greater_than_sign", "fleet.reverse": "less_than_sign"}
        keys = self._keymap.get(f"gpudash.{action}", default.get(action, action))
        return self.get_key_display(Binding(keys.split(",")[0].strip(), action))

    # --- availability ------------------------------------------------------------------

    def availability(self, action: str) -> tuple[bool | None, str]:
        """(True | None greyed | False hidden, why not) for one of the destructive actions."""
        if self.read_only:
            return False, "read-only mode: gpudash will not act on any host"
        if self.running:
            return None, "an action is running; wait for its result"
        view = self.view
        if view.snapshot is None or view.triage is None:
            return None, f"no sample from {view.name} yet"
        reason = ACTIONS[action].precheck(view.triage, self.selection())
        if reason is not None and ACTIONS[action].hidden_unless_fits:
            return False, reason
        return (True, "") if reason is None else (None, reason)

    def selection(self) -> Selection:
        """What the operator points at in the holders view, as the engine takes it."""
        owner, _unit, pid = selection_of(self.view.triage, self.selected_key)
        return selection_for(self.view.triage, owner, pid)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "command_palette" and isinstance(self.screen, ConfirmModal):
            return False  # the dialog is answered first: nothing is picked behind it
        if action in ACTIONS:
            if isinstance(self.screen, ModalScreen) or self.fleet_shown:
                return False  # the fleet acts on no host: open one first
            return self.availability(action)[0]
        if action == "fleet":
            return len(self.views) > 1 and not self.fleet_shown
        if action == "next_host":
            return len(self.views) > 1
        if action == "host":
            index = parameters[0] if parameters else 0
            return len(self.views) > 1 and isinstance(index, int) and index < len(self.views)
        if action == "hide_result":
            return self.result_shown
        return True

    def on_key(self, event: Key) -> None:
        # A disabled action's key reaches here instead of its binding: say why.
        if isinstance(self.screen, ModalScreen | FleetScreen):
            return
        action = self._key_to_action.get(event.key)
        if action is None:
            return
        available, reason = self.availability(action)
        if available is not True:
            event.stop()
            self.explain(action)

    def explain(self, action: str) -> None:
        """Say why ``action`` is not available now: once per reason while it shows, so a
        key pressed eight times does not stack eight notifications."""
        reason = self.availability(action)[1]
        title = ACTIONS[action].label
        now = time.monotonic()
        if self._toast_until.get((title, reason), 0.0) > now:
            return
        self._toast_until[(title, reason)] = now + self.NOTIFICATION_TIMEOUT
        self.notify(reason, title=title, severity="warning", markup=False)

    def palette_commands(self) -> list[tuple[str, str, str, bool]]:
        """(title, help, action, available) of what the command palette offers now.

        Actions that do not fit the selection are offered greyed, with the reason as
        their help, as the footer greys their keys; read-only mode leaves them out."""
        out: list[tuple[str, str, str, bool]] = []
        for name, spec in () if self.fleet_shown else ACTIONS.items():  # open a host first
            available, reason = self.availability(name)
            key = self.key_of(name)
            if available is True:
                out.append((spec.title, f"key {key}", name, True))
            elif available is None:
                out.append((spec.title, f"not now: {reason}", name, False))
        out.append(("Plot: toggle all GPUs / selected GPU", f"key {self.key_of('toggle_plot')}",
                    "toggle_plot", True))
        if len(self.views) > 1:
            out.append(("Fleet: every host in one table", f"key {self.key_of('fleet')}",
                        "fleet", not self.fleet_shown))
            for i, v in enumerate(self.views):
                out.append((f"Host: {clean(v.name)}", f"key {i + 1}", f"host({i})", True))
        return out

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Help: keys", "Show every key", self.action_help)

    # --- simple actions ----------------------------------------------------------------

    def action_toggle_plot(self) -> None:
        self.plot_all = not self.plot_all
        self.main.refresh_plot()
        if not self.main.memory_plot.display:
            width, height = self.size
            self.notify(
                f"Plot set to {'all GPUs' if self.plot_all else 'the selected GPU'}; it shows "
                f"on a terminal of at least {PLOT_MIN} (this one is {width}x{height}).",
                title="Memory plot", markup=False,
            )

    def action_fleet(self) -> None:
        """The fleet table (several hosts); Enter on a row comes back to that host."""
        if len(self.views) > 1 and not self.fleet_shown:
            self.push_screen("fleet")

    def open_host(self, index: int) -> None:
        """Leave the fleet table for host ``index``'s screen."""
        if self.fleet_shown:
            self.pop_screen()
        if index != self.current_host:
            self.action_host(index)
        else:
            self.refresh_view()  # drawn afresh: nothing was drawn while the fleet showed

    def action_next_host(self) -> None:
        self.action_host((self.current_host + 1) % len(self.views))

    def action_host(self, index: int) -> None:
        if 0 <= index < len(self.views) and index != self.current_host:
            self.current_host = index
            self.selected_key = None
            self.refresh_view()

    def action_hide_result(self) -> None:
        self.result_shown = False
        self._refresh_progress()

    @work(exclusive=True, group="filter", exit_on_error=False)
    async def action_filter(self) -> None:
        text = await self.push_screen_wait(FilterScreen(self.holder_filter))
        if text is None:
            return
        self.holder_filter = text.strip()
        title = "Holders (by owner)"
        if self.holder_filter:
            # border titles are markup: the typed text is escaped, never interpreted
            title += f" — filter: {escape(clean(self.holder_filter))}  (/ to change, empty clears)"
        self.main.holders.border_title = title
        self.refresh_view()

    def action_help(self) -> None:
        rows: list[tuple[str, str, bool | None]] = []
        def key(binding_id: str, default: str) -> str:  # as the user's keymap has it
            return self._keymap.get(f"gpudash.{binding_id}", default)

        for name, spec in ACTIONS.items():
            rows.append((key(name, spec.key), spec.title, self.availability(name)[0]))
        rows += [
            (key("toggle_plot", "g"), "Plot: all GPUs / the selected GPU", True),
            (key("filter", "/"), "Filter the holders (pid, user, unit, command)", True),
            (key("journal", "j"), "The selected unit's journal, live (/ filters)", True),
        ]
        if len(self.views) > 1:  # one host: nothing to switch to, no row for it
            last = min(9, len(self.views))
            rows.append((f"{key('next_host', 'h')}, 1-{last}", "Switch host", True))
            rows.append((key("fleet", "F"), "Fleet: every host in one table (type to "
                         "filter, > < sort, enter opens)", True))
        rows += [
            ("enter", "The selected owner, or log entry, in full", True),
            ("home, end", "First / last row", True),
            ("tab", "Move focus: holders, log, GPUs", True),
            (key("hide_result", "x"), "Hide the action result panel", True),
            (key("theme", "T"), "Pick a theme", True),
            ("ctrl+p", "Command palette", True),
            (key("quit", "q"), "Quit", True),
        ]
        self.push_screen(HelpScreen(rows, self.read_only))

    # --- destructive actions -----------------------------------------------------------
    # ``action_<name>`` of every spec is made below the class: one method, every action.

    def plan_action(self, action: str) -> None:
        """Plan ``action`` for the selection and ask for confirmation (or say why not)."""
        available, _reason = self.availability(action)
        if available is not True:
            self.explain(action)
            return
        spec = ACTIONS[action]
        if spec.kind in STARTING:
            self._plan_start(spec)  # what proves it serves is asked of the host first
            return
        snapshot = self.view.snapshot
        assert snapshot is not None
        try:
            plan = spec.plan(snapshot, self.selection())
        except PlanError as exc:
            self.notify(str(exc), title=spec.title, severity="warning")
            return
        self._confirm_and_run(plan, self.current_host)

    @work(exclusive=True, group="prepare", exit_on_error=False)
    async def _plan_start(self, spec: ActionSpec) -> None:
        """start / restart / swap: pick the target (swap), learn its ready URL and footprint,
        make sure the host reports it, then plan from a fresh sample and confirm."""
        host, view = self.current_host, self.view
        control, sel = view.source.control, self.selection()
        simulated = view.snapshot is not None and view.snapshot.source is SourceKind.DEMO
        target = sel.unit
        try:
            if spec.kind is ActionKind.SWAP:
                source = sel.unit or ""
                if sel.unit is None and sel.container is not None and view.snapshot:
                    owner = selected_owner(view.snapshot, sel)
                    source = owner.describe() if owner is not None else sel.container
                target = await self._pick_target(source, control, simulated)
                if target is None:
                    return
            assert target is not None
            watch(view.source, target)
            url, learned = await serving_request(control, view.name, target,
                                                 simulated=simulated)
            snapshot = await control.sample()
            plan = spec.plan(snapshot, Selection(
                unit=sel.unit, container=sel.container if spec.kind is ActionKind.SWAP else None,
                target=target if spec.kind is ActionKind.SWAP else None,
                ready_url=url, footprint=learned))
        except (PlanError, SourceError) as exc:
            self.notify(str(exc), title=spec.title, severity="warning")
            return
        self._confirm_and_run(plan, host)

    async def _pick_target(self, source_unit: str, control: HostControl, simulated: bool
                           ) -> str | None:
        found = (list(await control.model_units(self.settings.models))
                 if Capability.MODEL_UNITS in control.capabilities else [])
        choices = []
        for m in found:
            if m.name == source_unit:
                continue
            fp = footprints.lookup(self.view.name, m.name,
                                   footprints.store_path(simulated=simulated))
            choices.append(Choice(m.name, m.active_state or "?", m.unit_file_state or "?",
                                  m.port, m.description or "",
                                  max(fp.mib_per_gpu.values()) if fp else None,
                                  m.restart, fp.ready_s if fp else None))
        if not choices:
            self.notify("No other model-server units on this host.", title="Swap",
                        severity="warning")
            return None
        return await self.push_screen_wait(ModelPicker(
            f"Reclaim {source_unit}, then start:", choices))

    def action_journal(self) -> None:
        """The selected unit's journal, live."""
        unit = self.selection().unit or selection_of(self.view.triage, self.selected_key)[0]
        control = self.view.source.control
        can = Capability.JOURNAL in control.capabilities
        if unit is None or not can:
            self.notify("Select a unit (or one of its processes) whose journal to show."
                        if can else "This host cannot show journals.",
                        title="Journal", severity="warning")
            return
        self.push_screen(JournalScreen(unit, lambda: control.journal(unit, lines=200)))

    @work(exclusive=True, group="confirm", exit_on_error=False)
    async def _confirm_and_run(self, plan: ActionPlan, host: int) -> None:
        """Ask; then plan again from a fresh sample, so a dialog left open never runs on a
        stale baseline, and ask again if what would be sent changed meanwhile."""
        news: list[str] = []
        for _ in range(MAX_REPLANS):
            lines = plan.describe(self.exec_options.term_timeout)
            keys = (self.key_of("confirm.yes"), self.key_of("confirm.no"),
                    self.key_of("confirm.escape"))
            confirmed = await self.push_screen_wait(ConfirmModal(plan.title, news + lines, keys))
            if not confirmed:
                self._log_action(plan.host, plan.title, "cancelled: nothing was done", None)
                self.notify("Cancelled: nothing was done.")
                return
            try:
                fresh = await self.views[host].source.control.sample()
                plan, changes = replan(plan, fresh)
            except (PlanError, SourceError) as exc:
                why = f"not started: the host could not be checked again: {exc}" if isinstance(
                    exc, SourceError) else f"not started: the host changed: {exc}"
                self._log_action(plan.host, plan.title, why, None)
                self.notify(why, title=plan.title, severity="warning")
                return
            if self.running:  # another action started while the dialog was open
                self.notify("Another action is running; not started.", severity="warning")
                return
            if not changes:
                self._start_action(plan, host, act=True)
                return
            news = ["  ! The host changed while this dialog was open:",
                    *[f"  !   {c}" for c in changes], "  ! Confirm the plan as it is now:", ""]
        self.notify("The plan keeps changing on the host; not started.", severity="warning")

    def _start_action(self, plan: ActionPlan, host: int, *, act: bool) -> None:
        """Run (or, after a lost link, only re-verify) ``plan`` in the action worker."""
        running = self.controller.begin(plan, host, act=act)
        self._action_id = action_id = next(self._action_ids)
        self.running = True
        self.result_shown = True
        self._refresh_progress()
        self._action_worker = self.run_worker(
            self._execute(action_id, running),
            name=f"{'action' if act else 'reverify'} {action_id}", group="action",
            exit_on_error=False,
        )

    async def _execute(self, action_id: int, running: Running) -> None:
        """The action worker: the controller audits and runs; this only reports back."""
        report, error = await self.controller.run(
            running, self.views[running.host].source.control,
            on_progress=lambda p: self._post(ActionProgressed(action_id, p)),
            on_audit_error=lambda why: self.notify(
                f"Could not write the audit file: {why}", title="Audit", severity="warning"),
        )
        self._post(ActionFinished(action_id, running.host, running.plan, report, error))

    def on_action_progressed(self, message: ActionProgressed) -> None:
        if not self.screen_stack or message.action_id != self._action_id:
            return  # shutting down, or a late message of an earlier action
        self.controller.progressed(message.progress)
        self._refresh_progress()

    def on_action_finished(self, message: ActionFinished) -> None:
        if not self.screen_stack:  # shutting down: the audit record is written already
            return
        self.controller.finished(message.host, message.report, message.error)
        self.running = False
        self._action_worker = None
        self.result_shown = True
        self._refresh_progress()
        plan, report = message.plan, message.report
        if self._quit_when_done:
            self.exit(0)
        if report is None:
            self._log_action(plan.host, plan.title, f"failed: {message.error}", False)
            self.notify(str(message.error), title="Action failed", severity="error")
            return
        self._log_action(plan.host, plan.title, outcome_line(report),
                         report.verdict == "confirmed",
                         report.describe()[1:])  # line 0 repeats the title and summary
        # The verdict in full is in the Action panel and the log. A toast over them would
        # only repeat it and hide the log's new entry and the walkthrough: it is raised
        # only when another screen (help, the journal, a dialog) hides the panel.
        if self.screen is self.main:
            return
        if report.verdict == "confirmed":
            self.notify("✔ confirmed: see the Action panel", title=plan.title)
        else:
            self.notify(f"{VERDICT_TOAST.get(report.verdict, report.verdict)}: see the "
                        "Action panel", title=plan.title, severity="warning", timeout=10)

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

    # --- quitting ----------------------------------------------------------------------

    async def action_quit(self) -> None:
        if not self.running:
            self.exit(0)
            return
        self._ask_quit()

    @work(exclusive=True, group="quit", exit_on_error=False)
    async def _ask_quit(self) -> None:
        running = self.controller.running
        if running is None:
            self.exit(0)
            return
        choice = await self.push_screen_wait(QuitWhileActing(running.plan.title,
                                                             running.report.sent_lines()))
        if not self.running:  # it ended while the question was open
            self.exit(0)
        elif choice == AFTER:
            self._quit_when_done = True
            self.notify("gpudash quits as soon as the action has ended.")
        elif choice == NOW:
            await self._quit_now()

    async def _quit_now(self) -> None:
        worker = self._action_worker
        if worker is not None:
            worker.cancel()
            try:
                await worker.wait()
            except (WorkerCancelled, WorkerFailed):
                pass  # cancelled as asked: _execute audited what was sent
        self.exit(6)

    def _stop_from_outside(self, why: str) -> None:
        """SIGTERM, SIGHUP or the terminal gone: nobody is there to ask, so quit as "Quit
        now" does (an action running is stopped where it is and audited; exit 6), else
        quit (exit 0). ``gpudash.ui.stopping`` bounds how long that may take."""
        log.warning("%s: quitting%s", why,
                    " (interrupting the running action)" if self.running else "")
        if self.running:
            self.run_worker(self._quit_now(), group="quit", exclusive=True,
                            exit_on_error=False)
        else:
            self.exit(0)

    def _give_up_terminal(self) -> None:
        """Told to stop: a terminal that takes no more output is not waited for (called
        from a signal handler or another thread: it only sets a flag)."""
        if isinstance(self._driver, SafeLinuxDriver):
            self._driver.give_up_writes()

    def notify(
        self, message: str, *, title: str = "", severity: SeverityLevel = "information",
        timeout: float | None = None, markup: bool = False,
    ) -> None:
        """Every notification shows host text literally: reasons and unit names come from
        hosts, so control sequences are escaped and markup is never interpreted."""
        super().notify(
            "\n".join(clean(line) for line in str(message).split("\n")),
            title=clean(title), severity=severity, timeout=timeout, markup=False,
        )

    def drawing_failed(self, where: str, exc: Exception) -> None:
        log.error("%s failed on %s", where, self.view.name, exc_info=exc)
        message = f"{where}: {type(exc).__name__}: {exc}"
        if message != self._last_draw_error:  # once per distinct error, not per sample
            self._last_draw_error = message
            self.notify(f"Could not draw {self.view.name}: {message} (details in the log file)",
                        title="Display error", severity="error", timeout=10)


def _action_method(name: str) -> Callable[[GpudashApp], None]:
    def action(self: GpudashApp) -> None:
        self.plan_action(name)

    action.__name__ = f"action_{name}"
    action.__doc__ = ACTIONS[name].title
    return action


for _name in ACTIONS:
    setattr(GpudashApp, f"action_{_name}", _action_method(_name))


def run_dashboard(
    sources: list[HostSource],
    *,
    interval: float,
    read_only: bool,
    theme: str | None,
    exec_options: ExecOptions | None,
    demo: bool = False,
) -> DashboardOutcome:
    """Run the dashboard until the operator quits."""
    app = GpudashApp(
        sources, interval=interval, read_only=read_only, theme=theme, exec_options=exec_options,
        welcome=demo and not read_only,
    )
    try:
        result = app.run()
    finally:
        app.outside_stop.uninstall()  # its deadline, once started, still bounds the close
    code = result if isinstance(result, int) else (app.return_code or 0)
    return DashboardOutcome(code, app.interrupted_report)
