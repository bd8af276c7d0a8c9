"""Command palette entries: the actions (greyed with the reason when they do not fit the
selection, as the footer greys their keys), host switching and the plot mode."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.content import Content

if TYPE_CHECKING:
    from gpudash.ui.app import GpudashApp


class DashboardCommands(Provider):
    """gpudash's actions for the selection, host switching and the plot mode."""

    def _commands(self) -> list[tuple[str, str, str, bool]]:
        app = cast("GpudashApp", self.app)
        return app.palette_commands()

    def _run(self, action: str, available: bool) -> Callable[[], object]:
        app = cast("GpudashApp", self.app)
        # A greyed action picked anyway says why, like its key.
        return partial(app.run_action, action) if available else partial(app.explain, action)

    async def discover(self) -> Hits:
        for title, help_text, action, available in self._commands():
            display = Content(title) if available else Content.styled(title, "dim")
            yield DiscoveryHit(display, self._run(action, available), text=title,
                               help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, action, available in self._commands():
            score = matcher.match(title)
            if score > 0:
                display = matcher.highlight(title)
                if not available:
                    display = display.stylize("dim")
                yield Hit(score if available else score / 2, display,
                          self._run(action, available), text=title, help=help_text)
