"""Textual's style caches, let go with their widgets.

Textual 8.2 caches ``StylesCache.get_inner_outer`` with ``functools.lru_cache`` on the
method, so each key holds the instance: the style caches of the last 1,024 widgets drawn
stay alive after their widgets go, with every line they rendered (Textualize/textual#6665,
open). Every toast, dialog and redrawn key leaves one. The method reads its two colours
only; here they are the whole key, and nothing else is changed. Where Textual's method is
not a cached one (another Textual), it is left as it is.
"""

from __future__ import annotations

from functools import lru_cache

from textual._styles_cache import StylesCache
from textual.color import Color
from textual.style import Style


@lru_cache(1024)
def inner_outer(base_background: Color, background: Color) -> tuple[Style, Style]:
    """Inner and outer background styles, as ``StylesCache.get_inner_outer`` makes them."""
    return (Style(background=base_background + background), Style(background=base_background))


def _get_inner_outer(_cache: StylesCache, base_background: Color, background: Color
                     ) -> tuple[Style, Style]:
    return inner_outer(base_background, background)


def let_go() -> None:
    """Put ``inner_outer`` in the place of Textual's cached method (once)."""
    if hasattr(StylesCache.__dict__.get("get_inner_outer"), "cache_info"):
        StylesCache.get_inner_outer = _get_inner_outer  # type: ignore[assignment]
