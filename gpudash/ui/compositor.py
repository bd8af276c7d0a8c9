"""A compositor that draws each changed part of the screen apart.

Textual's compositor (8.2) draws a partial update by rendering every widget inside the
one rectangle that surrounds all the changed regions: the header's round trip on the
first line and one holder's age forty lines below made it render the whole screen, every
widget in between, once a second. Here the changed regions are taken in vertical bands
(regions that touch or nearly touch are one band) and each band is rendered within its
own rectangle; what reaches the terminal is the same, only the widgets that changed are
rendered again.

And it renders only the widgets seen within the changed part. Textual's picks every
widget whose clip overlaps it, and a widget's clip is its container's: the footer, the
action log and every panel on the screen were asked for their lines to draw the header's
(cached, mostly; the footer's line was drawn again, 0.2 ms a frame).

It overrides two methods of Textual's private compositor; where the compositor is not as
expected (another Textual), it draws as Textual does.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console, ConsoleOptions, RenderResult
from textual._compositor import ChopsUpdate, Compositor, CompositorUpdate
from textual.geometry import Region
from textual.strip import Strip

GAP = 2  # lines between two changed regions that still make them one band


def bands(regions: set[Region], gap: int = GAP) -> list[list[Region]]:
    """``regions`` in vertical bands: a region joins the band above it when it starts
    within ``gap`` lines of that band's bottom."""
    grouped: list[list[Region]] = []
    bottom = 0
    for region in sorted(regions, key=lambda r: (r.y, r.x)):
        if grouped and region.y <= bottom + gap:
            grouped[-1].append(region)
            bottom = max(bottom, region.bottom)
        else:
            grouped.append([region])
            bottom = region.bottom
    return grouped


class BandsUpdate(CompositorUpdate):
    """Several chops updates written one after the other."""

    def __init__(self, updates: list[ChopsUpdate]) -> None:
        self.updates = updates

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for update in self.updates:
            yield from update.__rich_console__(console, options)

    def render_segments(self, console: Console) -> str:
        return "".join(update.render_segments(console) for update in self.updates)


class BandCompositor(Compositor):
    """``render_partial_update`` per band of changed regions, each rendering only the
    widgets seen in it."""

    def _get_renders(self, crop: Region | None = None
                     ) -> Iterable[tuple[Region, Region, list[Strip]]]:
        """Textual's (8.2), but for a ``crop``, only the widgets whose part on screen
        (their region within their clip) overlaps it: another widget's lines there are
        none, whatever its clip."""
        if crop is None or not hasattr(self, "visible_widgets"):
            yield from super()._get_renders(crop)
            return
        overlaps = crop.overlaps
        for widget, (region, clip) in self.visible_widgets.items():
            shown = region.intersection(clip)
            if not shown or not overlaps(shown):
                continue
            yield region, clip, widget.render_lines(
                Region(shown.x - region.x, shown.y - region.y, shown.width, shown.height))

    def render_partial_update(self) -> ChopsUpdate | None:
        regions = self._dirty_regions.copy()
        grouped = bands(regions)
        if len(grouped) < 2 or not hasattr(self, "_render_chops"):
            return super().render_partial_update()
        self._dirty_regions.clear()
        screen = self.size.region
        chop_ends = [cut_set[1:] for cut_set in self.cuts]
        updates: list[ChopsUpdate] = []
        for band in grouped:
            crop = Region.from_union(band).intersection(screen)
            spans = list(self._regions_to_spans(band))
            if not crop or not spans:
                continue
            rendered = {y for y, _, _ in spans}.__contains__
            updates.append(ChopsUpdate(self._render_chops(crop, rendered), spans, chop_ends))
        if not updates:
            return None
        # A ChopsUpdate in Textual's eyes: the app writes what render_segments returns.
        return BandsUpdate(updates)  # type: ignore[return-value]
