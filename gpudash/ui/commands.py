"""Command palette entries: what the screen under the palette offers — on a host, its
actions (greyed with the reason when they do not fit the selection, as the footer greys
their keys), host switching and the plot mode; on the fleet, its hosts."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Protocol, runtime_checkable

from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.content import Content


@runtime_checkable
class Offers(Protocol):
    """A screen with palette entries: (title, help, action, available)."""

    def palette_commands(self) -> list[tuple[str, str, str, bool]]: ...


class DashboardCommands(Provider):
    """The entries of the screen the palette was opened on."""

    def _commands(self) -> list[tuple[str, str, str, bool]]:
        return self.screen.palette_commands() if isinstance(self.screen, Offers) else []

    def _run(self, action: str, available: bool) -> Callable[[], object]:
        # A greyed action picked anyway says why, like its key.
        return partial(self.screen.run_action, action if available else f"explain({action!r})")

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
