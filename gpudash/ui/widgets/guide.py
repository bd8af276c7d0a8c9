"""The demo's walkthrough line above the footer (gpudash/ui/walkthrough.py words it)."""

from __future__ import annotations

from gpudash.domain.triage import HostTriage
from gpudash.ui.walkthrough import KeyOf, guide_text
from gpudash.ui.widgets.quiet import QuietStatic


class Guide(QuietStatic):
    """Shown only in the demo (not read-only)."""

    def show(self, result: HostTriage | None, key: KeyOf, running: bool = False) -> None:
        """The step the demo is at, with the user's keys."""
        self.add_class("-shown")
        self.update(guide_text(result, key, running))
