"""Widgets that go let their style caches go (Textualize/textual#6665: Textual's cached
``get_inner_outer`` kept the last 1,024, with every line each had drawn)."""

from __future__ import annotations

import gc
import weakref

from support import settled
from test_ui import SIZE, make_app
from textual.widgets import Static

from gpudash.demo.host import DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.ui.styles_cache import inner_outer


async def test_a_removed_widgets_style_cache_is_let_go() -> None:
    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=SIZE) as pilot:
        await settled(pilot)
        caches = []
        for round_ in range(3):  # as toasts and dialogs come and go
            notes = [Static(f"note {round_}.{i}", classes="note") for i in range(20)]
            await app.screen.mount_all(notes)
            await settled(pilot)
            assert all(n.region.area for n in notes[:1])  # drawn
            caches += [weakref.ref(n._styles_cache) for n in notes]
            await app.screen.query(".note").remove()
            del notes
        await settled(pilot)
        gc.collect()
        # all but the last round's: Textual keeps a screen's last list of children shown
        # until it is next read
        assert not [c for c in caches[:-20] if c() is not None]
        assert inner_outer.cache_info().currsize  # the colours are still cached
