"""Command palette entries: only the actions that fit the current selection, plus views."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

if TYPE_CHECKING:
    from gpudash.ui.app import GpudashApp


class DashboardCommands(Provider):
    """gpudash's actions for the selection, host switching and the plot mode."""

    def _commands(self) -> list[tuple[str, str, str]]:
        app = cast("GpudashApp", self.app)
        return app.palette_commands()

    async def discover(self) -> Hits:
        app = cast("GpudashApp", self.app)
        for title, help_text, action in self._commands():
            yield DiscoveryHit(title, partial(app.run_action, action), help=help_text)

    async def search(self, query: str) -> Hits:
        app = cast("GpudashApp", self.app)
        matcher = self.matcher(query)
        for title, help_text, action in self._commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), partial(app.run_action, action),
                          help=help_text)
