"""A sample draws one frame: what did not change is not drawn again (issue 18 item 5, the
dashboard's cost beside nvitop). It drew three a second at 1 Hz: the header's "last sample
0.4 s ago" twice, and the unit panel's unchanged "cut" note once more."""

from __future__ import annotations

import collections
from dataclasses import replace

import pytest
from rich.text import Text
from support import settled, stepped_clock_of
from test_ui import select, wait_for
from textual._compositor import ChopsUpdate
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from gpudash.demo.host import MINIMAX, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.domain.model import Gpu
from gpudash.ui.app import GpudashApp
from gpudash.ui.compositor import BandCompositor, BandsUpdate, bands
from gpudash.ui.palette import Palette, palette
from gpudash.ui.widgets import gpus
from gpudash.ui.widgets.gpus import GpuTable
from gpudash.ui.widgets.header import HeaderBar
from gpudash.ui.widgets.holders import HoldersTable
from gpudash.ui.widgets.unit_panel import UnitPanel

# A sample a simulated minute: the holders' ages (in minutes) move from one to the next.
INTERVAL = 60.0


async def three_samples(pilot, app: GpudashApp) -> None:  # type: ignore[no-untyped-def]
    """Three samples, one each real second: the app's own once-a-second tick runs between
    them as it does beside a real host."""
    clock = stepped_clock_of(app)
    for _ in range(3):
        await clock.advance(INTERVAL)
        await pilot.pause(1.0)


async def test_while_samples_flow_only_what_changed_is_drawn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = GpudashApp([DemoHost(clock=SteppedClock())], interval=INTERVAL, read_only=False,
                     theme=None, exec_options=None)
    # every sample "just now": on CI's loaded machine one came 1.6 s late, and the header's
    # "1.6 s ago" was (rightly) drawn; what is tested is that the same line is not
    app.fresh_within = 3600.0
    async with app.run_test(size=(160, 50)) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.pause(1.5)
        drawn: collections.Counter[str] = collections.Counter()
        real = Widget.refresh

        def counted(self: Widget, *a: object, **k: object) -> Widget:
            drawn[type(self).__name__] += 1
            return real(self, *a, **k)  # type: ignore[arg-type]

        monkeypatch.setattr(Widget, "refresh", counted)
        await three_samples(pilot, app)
        monkeypatch.setattr(Widget, "refresh", real)
        assert drawn["HoldersTable"] > 0  # samples came (the demo's ages, CPU and SM% move)
        assert drawn["HeaderBar"] == 0, drawn  # "just now": the same line
        assert drawn["UnitPanel"] == 0, drawn  # the same facts, the same "cut" note
        assert drawn["GpuGrid"] == 0, drawn  # hidden at 160x50: not drawn at all


async def test_a_border_title_set_again_the_same_does_not_redraw_the_holders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Holders' title and subtitle were set on every sample, the same: Textual redraws the
    whole table then (every line of it, twice a second)."""
    app = GpudashApp([DemoHost(clock=SteppedClock())], interval=INTERVAL, read_only=False,
                     theme=None, exec_options=None)
    async with app.run_test(size=(160, 50)) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.pause(1.5)
        whole: collections.Counter[str] = collections.Counter()
        real = Widget.refresh

        def counted(self: Widget, *regions: object, **k: object) -> Widget:
            if not regions:
                whole[type(self).__name__] += 1
            return real(self, *regions, **k)  # type: ignore[arg-type]

        monkeypatch.setattr(Widget, "refresh", counted)
        await three_samples(pilot, app)
        monkeypatch.setattr(Widget, "refresh", real)
        assert whole["HoldersTable"] == 0, whole  # its changed rows only, by region


def _text_lines(strips: list[Strip]) -> list[list[str]]:
    return [list("".join(s.text for s in strip)) for strip in strips]


def _apply(grid: list[list[str]], update: object) -> None:
    """Write a partial update's chops into ``grid`` as a terminal would (one cell per
    character: the demo's text is narrow)."""
    parts = update.updates if isinstance(update, BandsUpdate) else [update]
    for part in parts:
        assert isinstance(part, ChopsUpdate)
        for y, x1, x2 in part.spans:
            for end, (x, strip) in zip(part.chop_ends[y], part.chops[y].items(), strict=False):
                if strip is None or x > x2 or end <= x1:
                    continue
                for i, char in enumerate("".join(s.text for s in strip)):
                    if x1 <= x + i < x2:
                        grid[y][x + i] = char


class Frames:
    """From now on: which widgets render (by class) and what is written to the terminal,
    over what it showed before."""

    def __init__(self, app: GpudashApp, monkeypatch: pytest.MonkeyPatch) -> None:
        self.screen = app.screen
        self.grid = _text_lines(self.screen._compositor.render_strips())
        self.updates: list[object] = []
        self.rendered: collections.Counter[str] = collections.Counter()
        monkeypatch.setattr(app, "_display", lambda _screen, update: self.updates.append(update))
        real = Widget.render_lines

        def counted(widget: Widget, crop: Region) -> list[Strip]:
            self.rendered[type(widget).__name__] += 1
            return real(widget, crop)

        monkeypatch.setattr(Widget, "render_lines", counted)
        self._stop = lambda: monkeypatch.setattr(Widget, "render_lines", real)

    def stop(self) -> list[object]:
        """The updates written, each applied to the terminal's lines (``grid``)."""
        self._stop()
        written = [u for u in self.updates if u is not None]
        for update in written:
            _apply(self.grid, update)
        return written

    def lines(self) -> list[str]:
        return ["".join(line) for line in self.grid]

    def full_redraw(self) -> list[str]:
        return ["".join(line) for line in _text_lines(self.screen._compositor.render_strips())]


async def test_the_header_and_a_holder_changed_draw_those_two_and_nothing_between(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Textual draws every widget inside the rectangle around all changed regions: the
    header's first line and one holder's age made it render the whole screen. The bands
    render only what is in them, and the terminal ends up showing what a full redraw
    shows."""
    app = GpudashApp([DemoHost(clock=SteppedClock())], interval=3600.0, read_only=False, theme=None,
                     exec_options=None)
    async with app.run_test(size=(160, 50)) as pilot:
        table = app.query_one(HoldersTable)
        await wait_for(pilot, lambda: table.row_count > 3)
        await settled(pilot)
        assert isinstance(app.screen._compositor, BandCompositor)
        frames = Frames(app, monkeypatch)
        row = str(list(table.rows)[2].value)
        app.query_one(HeaderBar).update(Text("gpudash  a header that changed"))
        table.set_cells(row, {"age": Text("99s", justify="right")})
        await settled(pilot)  # drawn, however long that takes here
        updates, rendered = frames.stop(), frames.rendered
        assert any(isinstance(u, BandsUpdate) and len(u.updates) >= 2 for u in updates), updates
        assert rendered["HeaderBar"] and rendered["HoldersTable"], rendered
        assert not rendered["GpuTable"] and not rendered["HistoryPlot"], rendered
        assert frames.lines() == frames.full_redraw()
        assert any("99s" in line for line in frames.lines())


async def test_a_header_that_changed_is_drawn_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Textual asks every widget whose clip overlaps a change for its lines, and a
    widget's clip is its container's: the footer (drawn again each time), the action log
    and every panel rendered for the header's line, once a second."""
    app = GpudashApp([DemoHost(clock=SteppedClock())], interval=3600.0, read_only=False,
                     theme=None, exec_options=None)
    async with app.run_test(size=(160, 50)) as pilot:
        table = app.query_one(HoldersTable)
        await wait_for(pilot, lambda: table.row_count > 3)
        await settled(pilot)
        frames = Frames(app, monkeypatch)
        app.query_one(HeaderBar).update(Text("gpudash  a header that changed"))
        await settled(pilot)
        assert frames.stop()
        rendered = frames.rendered
        assert rendered["HeaderBar"], rendered
        assert set(rendered) <= {"HeaderBar", type(app.screen).__name__}, rendered
        assert frames.lines() == frames.full_redraw()
        assert "a header that changed" in frames.lines()[0]


async def test_a_gpu_the_sample_did_not_change_is_not_built_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The decoder keeps the very object of a GPU whose readings did not change: the GPU
    table built every row's cells on every sample, to find them the same."""
    app = GpudashApp([DemoHost(clock=SteppedClock())], interval=3600.0, read_only=False,
                     theme=None, exec_options=None)
    async with app.run_test(size=(160, 50)) as pilot:
        table = app.query_one(GpuTable)
        await wait_for(pilot, lambda: table.row_count > 2)
        snap, pal = app.view.snapshot, palette(app)
        assert snap is not None
        table.show(snap, pal)
        built: list[int] = []
        real = gpus.gpu_cells

        def counted(gpu: Gpu, p: Palette) -> list[Text]:
            built.append(gpu.index)
            return real(gpu, p)

        monkeypatch.setattr(gpus, "gpu_cells", counted)
        # no await below: no sample or tick of the app's own comes between
        table.show(replace(snap), pal)  # a new snapshot, the same GPUs
        assert built == []
        one = replace(snap.gpus[1], utilization_pct=77)
        table.show(replace(snap, gpus=(snap.gpus[0], one, *snap.gpus[2:])), pal)
        assert built == [1]
        assert str(table.get_cell("1", "util")).strip() == "77 %"
        table.show(replace(snap, gpus=(snap.gpus[0], one, *snap.gpus[2:])),
                   replace(pal, ok="#010203"))  # another theme: every row again
        assert sorted(built[1:]) == [g.index for g in snap.gpus]


async def test_the_unit_panel_shown_the_same_asks_nothing_after_the_refresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whether the panel's text is cut was measured again after every sample (a message
    to the panel, its text laid out at its width), the text unchanged."""
    app = GpudashApp([DemoHost(clock=SteppedClock())], interval=3600.0, read_only=False,
                     theme=None, exec_options=None)
    async with app.run_test(size=(160, 50)):
        panel = app.query_one(UnitPanel)
        asked: list[object] = []
        monkeypatch.setattr(panel, "call_after_refresh",
                            lambda callback, *a, **k: asked.append(callback) or True)
        panel.show(Text("the facts"))
        panel.show(Text("the facts"))
        assert len(asked) == 1
        panel.show(Text("other facts"))
        assert len(asked) == 2


def test_bands_join_regions_that_nearly_touch() -> None:
    header, row_a, row_b, far = (Region(0, 0, 160, 1), Region(1, 30, 100, 1),
                                 Region(1, 32, 100, 1), Region(1, 40, 100, 2))
    assert bands({header, row_a, row_b, far}) == [[header], [row_a, row_b], [far]]
    assert bands({row_a}) == [[row_a]]


async def test_the_help_screen_is_drawn_alone_not_over_a_dimmed_dashboard() -> None:
    """A translucent modal makes Textual render the dashboard beneath it and blend every
    segment (BackgroundScreen): with 256 hosts that was most of the help key's 90 ms."""
    from textual.renderables.background_screen import BackgroundScreen

    from gpudash.ui.screens import HelpScreen

    app = GpudashApp([DemoHost(clock=SteppedClock())], interval=1.0, read_only=False, theme=None,
                     exec_options=None)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert app.screen.styles.background.a == 1.0
        assert not isinstance(app.screen.render(), BackgroundScreen)
        assert "Keys" in app.screen.query_one("Static").render().plain  # type: ignore[union-attr]


async def test_the_tick_leaves_a_header_that_still_says_just_now(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The once-a-second tick redraws the header only once the last sample's redraw is
    older than "just now": while samples flow it would draw the same line again (a tick
    that fell just before each sample drew the header twice a second)."""
    import time

    app = GpudashApp([DemoHost(clock=SteppedClock())], interval=1.0, read_only=False,
                     theme=None, exec_options=None)
    async with app.run_test(size=(160, 50)) as pilot:
        await settled(pilot)
        headers: list[float] = []
        monkeypatch.setattr(app.main, "refresh_header", lambda: headers.append(1.0))
        assert app.fresh_within == 1.5
        app.feeds.view_redraw.last = time.monotonic() - 0.95  # a sample drew it 0.95 s ago
        app.feeds.tick()
        assert headers == []
        app.feeds.view_redraw.last = time.monotonic() - 1.6  # the next sample is late
        app.feeds.tick()
        assert headers == [1.0]
