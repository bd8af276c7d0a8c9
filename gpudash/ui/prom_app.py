"""``gpudash --prometheus``: the fleet table from Prometheus, refreshed every interval.

The app shows the table until the operator quits (``chosen`` None) or presses Enter on a
host (``chosen``: its SSH name). The command line then opens that host exactly as
``gpudash HOST`` does (``gpudash.ui.app.run_dashboard``: every action, the proof) and,
when it is quit, comes back here with the filter, order and cursor as they were
(``run_prom_fleet``'s ``memory``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from textual.binding import Binding

from gpudash.fleetprom.client import PromClient
from gpudash.fleetprom.fleet import FeedState, PromFeed
from gpudash.fleetprom.sshname import SshNameTemplate
from gpudash.state.promconfig import PromSettings
from gpudash.ui.bindings import binding_table, bindings
from gpudash.ui.heap import steady_heap
from gpudash.ui.notices import LiteralNotices
from gpudash.ui.prom_screen import PromFleetScreen, TableMemory
from gpudash.ui.screens import HelpScreen
from gpudash.ui.startup import chosen_theme, load_user_files
from gpudash.ui.themes import VARIABLE_DEFAULTS

log = logging.getLogger("gpudash.ui")

DEFAULT_THEME = "gpudash-night"


class PromFleetApp(LiteralNotices):
    """The fleet from Prometheus; ``chosen`` is the host to open when it exits."""

    TITLE = "gpudash"
    CSS_PATH = "app.tcss"
    BINDINGS = bindings("app")

    def __init__(self, settings: PromSettings, *, interval: float, theme: str | None,
                 memory: TableMemory | None = None, clock: Callable[[], float] = time.time,
                 theme_dirs: Sequence[Path] | None = None) -> None:
        super().__init__()
        if settings.url is None:
            raise ValueError("no Prometheus URL")
        self.read_only = True  # the table acts on nothing: a host opened does
        self.chosen: str | None = None
        self.client = PromClient(settings)
        self.feed = PromFeed(self.client, interval, self._fed)
        files = load_user_files(theme_dirs)
        self._keymap, self._warnings = files.keymap, files.warnings
        for t in files.themes:
            self.register_theme(t)
        picked, unknown = chosen_theme(theme, self.available_themes, DEFAULT_THEME)
        self.theme = picked or self.theme
        self._warnings += [[unknown]] if unknown else []
        self._last_draw_error: str | None = None
        self.fleet = PromFleetScreen(self, settings.url, SshNameTemplate(settings.ssh_name),
                                     self.open_ssh, memory or TableMemory(), clock)

    @property
    def keymap(self) -> Mapping[str, str]:
        return self._keymap

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(VARIABLE_DEFAULTS)

    def get_default_screen(self) -> PromFleetScreen:
        return self.fleet

    def on_mount(self) -> None:
        if self._keymap:
            self.set_keymap(self._keymap)
        for message in self._warnings:
            self.notify(message, severity="warning", timeout=15, markup=False)
        self.run_worker(self.feed.run(), name="prometheus", group="prometheus",
                        exclusive=True, exit_on_error=False)
        self.set_interval(1.0, self.fleet.tick)

    def on_unmount(self) -> None:
        self.client.close()

    def _fed(self, state: FeedState) -> None:
        try:
            self.fleet.update(state)
        except Exception as exc:  # noqa: BLE001 - logged; the feed and the screen go on
            self.drawing_failed("fleet from prometheus", exc)

    def open_ssh(self, name: str) -> None:
        """Leave the table for host ``name`` (over SSH, as ``gpudash NAME``)."""
        self.chosen = name
        self.exit(0)

    def key_of(self, action: str) -> str:
        """The key pressed for ``action`` (a binding id less "gpudash."), keymap applied."""
        default = binding_table().get(f"gpudash.{action}", (action, ""))[0]
        keys = self._keymap.get(f"gpudash.{action}", default)
        return self.get_key_display(Binding(keys.split(",")[0].strip(), action))

    def drawing_failed(self, where: str, exc: Exception) -> None:
        log.error("%s failed", where, exc_info=exc)
        message = f"{where}: {type(exc).__name__}: {exc}"
        if message != self._last_draw_error:  # once per distinct error, not per refresh
            self._last_draw_error = message
            self.notify(f"Could not draw: {message} (details in the log file)",
                        title="Display error", severity="error", timeout=10)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.fleet.help_rows(), False,
                                    self.fleet.help_sections()))

    async def action_quit(self) -> None:
        self.chosen = None
        self.exit(0)


def run_prom_fleet(settings: PromSettings, *, interval: float, theme: str | None,
                   memory: TableMemory | None) -> tuple[str | None, TableMemory]:
    """Show the table until the operator quits (None) or opens a host (its SSH name);
    what the table was, for coming back to it."""
    app = PromFleetApp(settings, interval=interval, theme=theme, memory=memory)
    with steady_heap():  # a full collection then skips start-up's objects, as the dashboard's
        app.run()
    return app.chosen, app.fleet.remember()
