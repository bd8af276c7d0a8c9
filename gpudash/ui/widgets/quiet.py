"""A Static that draws only when what it shows changed.

``Static.update`` re-renders the widget and, by default, lays out the whole screen
again: the header, the plot and the unit panel were updated with the same text on most
samples and every second, which cost more than drawing what did change. A border title
set again, the same, redraws its whole widget too (Textual 8): ``quiet_border`` sets it
only when it changed.
"""

from __future__ import annotations

from typing import Literal
from weakref import WeakKeyDictionary

from rich.text import Text
from textual.visual import VisualType
from textual.widget import Widget
from textual.widgets import Static

from gpudash.ui.text import same_text


class QuietStatic(Static):
    """``update`` with the text already shown does nothing. ``FIXED_SIZE``: the widget's
    size never follows its text (the CSS fixes it), so an update needs no new layout."""

    FIXED_SIZE = False
    _shown: Text | None = None

    def update(self, content: VisualType = "", *, layout: bool | None = None) -> None:
        if isinstance(content, Text):
            if self._shown is not None and same_text(self._shown, content):
                return
            self._shown = content
        else:
            self._shown = None
        super().update(content, layout=not self.FIXED_SIZE if layout is None else layout)


_BORDERS: WeakKeyDictionary[Widget, dict[str, str | Text | None]] = WeakKeyDictionary()


def quiet_border(widget: Widget, which: Literal["title", "subtitle"],
                 value: str | Text | None) -> None:
    """Set ``widget``'s border title or subtitle, unless it already shows ``value``."""
    shown = _BORDERS.setdefault(widget, {})
    if which in shown:
        old = shown[which]
        if (old == value if not isinstance(old, Text) or not isinstance(value, Text)
                else same_text(old, value)):
            return
    shown[which] = value
    setattr(widget, f"border_{which}", value)
