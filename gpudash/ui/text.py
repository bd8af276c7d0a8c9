"""Untrusted text from hosts (process names, command lines, unit names, error messages).

Everything a host sends is shown literally: never parsed as markup (callers wrap it in
``rich.text.Text``, which does not interpret markup) and never passed to the terminal
raw: control characters become a visible ``\\xNN`` escape.
"""

from __future__ import annotations

from rich.text import Text

from gpudash.domain.untrusted import clean, clean_lines

__all__ = ["clean", "clean_lines", "literal", "duration", "same_text"]


def same_text(a: Text, b: Text) -> bool:
    """Whether two cells draw the same: Rich's ``==`` compares only the characters and
    spans, not the base style (a memory bar's colour, a theme change) nor alignment."""
    return (a.plain == b.plain and a.spans == b.spans and a.style == b.style
            and a.justify == b.justify and a.overflow == b.overflow and a.no_wrap == b.no_wrap)


def literal(value: object, style: str = "") -> Text:
    """A Rich ``Text`` that shows ``value`` exactly, whatever brackets it contains."""
    return Text(clean(value), style=style, no_wrap=True, overflow="ellipsis")


def duration(seconds: float | None) -> str:
    """Compact age, in the steps a person reads it in: ``7s`` (each second of the first
    ten: a process just started or respawned, what an operator watches), ``40s`` (tens
    of seconds to a minute), ``7m``, ``2h00m``, ``3d04h``. A column of ages ticking every
    second redrew every holder's row every second, about half of the dashboard's CPU beside
    nvitop, and told nothing the coarser step does not; the order by age stays exact."""
    if seconds is None:
        return "N/A"
    s = max(0, int(seconds))
    if s < 10:
        return f"{s}s"
    if s < 60:
        return f"{s // 10 * 10}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"
