"""A sample draws one frame: what did not change is not drawn again (issue 18 item 5, the
dashboard's cost beside nvitop). It drew three a second at 1 Hz: the header's "last sample
0.4 s ago" twice, and the unit panel's unchanged "cut" note once more."""

from __future__ import annotations

import collections

import pytest
from test_ui_sizes import select
from textual.widget import Widget

from gpudash.demo.host import MINIMAX, DemoHost
from gpudash.ui.app import GpudashApp


async def test_while_samples_flow_only_what_changed_is_drawn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = GpudashApp([DemoHost(speed=50)], interval=1.0, read_only=False, theme=None,
                     exec_options=None)
    async with app.run_test(size=(160, 50)) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.pause(1.5)
        drawn: collections.Counter[str] = collections.Counter()
        real = Widget.refresh

        def counted(self: Widget, *a: object, **k: object) -> Widget:
            drawn[type(self).__name__] += 1
            return real(self, *a, **k)  # type: ignore[arg-type]

        monkeypatch.setattr(Widget, "refresh", counted)
        await pilot.pause(3.0)
        monkeypatch.setattr(Widget, "refresh", real)
        assert drawn["HoldersTable"] > 0  # samples came (the demo's ages, CPU and SM% move)
        assert drawn["HeaderBar"] == 0, drawn  # "just now": the same line
        assert drawn["UnitPanel"] == 0, drawn  # the same facts, the same "cut" note
        assert drawn["GpuGrid"] == 0, drawn  # hidden at 160x50: not drawn at all
