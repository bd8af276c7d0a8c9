"""Notifications that show host text literally, and the Ctrl+C hint in plain words.

Reasons and unit names come from hosts, so a notification never interprets markup and
every control character is escaped; a ``str`` is one line (a host's newline is shown
escaped), several come as a list. Textual's own Ctrl+C hint was written in markup
(``Press [b]ctrl+q[/b] to quit``) and showed its brackets here: it is said without.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import App
from textual.notifications import SeverityLevel

from gpudash.ui.text import clean, clean_lines


class LiteralNotices(App[int]):
    """The App's ``notify``, literal, and its Ctrl+C hint."""

    def notify(self, message: str | Sequence[str], *, title: str = "",
               severity: SeverityLevel = "information", timeout: float | None = None,
               markup: bool = False) -> None:
        super().notify("\n".join(clean_lines(message)), title=clean(title),
                       severity=severity, timeout=timeout, markup=False)

    def action_help_quit(self) -> None:
        """Ctrl+C (a reflex): how to quit, in plain words, with the user's quit key."""
        for key, active in self.active_bindings.items():
            if active.binding.action in ("quit", "app.quit"):
                self.notify(f"Press {key} to quit the app", title="Do you want to quit?")
                return
