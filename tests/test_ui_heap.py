"""A dashboard run freezes start-up's objects out of the cyclic collector (gpudash.ui.heap:
with 256 hosts full collections of 150-270 ms every 2-3 s held keys back), leaves its
thresholds as they are, and unfreezes them when the run ends, however it ends."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

from gpudash.demo.host import DemoHost
from gpudash.ui import app as app_module


class Cycle:
    def __init__(self) -> None:
        self.me = self


def run_with(monkeypatch: pytest.MonkeyPatch, inside: Any) -> None:
    monkeypatch.setattr(app_module.GpudashApp, "run", lambda self: inside())
    app_module.run_dashboard([DemoHost()], interval=1.0, read_only=True, theme=None,
                             exec_options=None)


def test_a_run_freezes_start_up_and_keeps_the_thresholds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    before = gc.get_threshold()
    seen: dict[str, Any] = {}

    def inside() -> int:
        seen["frozen"] = gc.get_freeze_count()
        seen["threshold"] = gc.get_threshold()
        # what dies in a cycle during the run is still collected
        c = Cycle()
        ref = weakref.ref(c)
        del c
        gc.collect()
        seen["cycle_freed"] = ref() is None
        return 0

    run_with(monkeypatch, inside)
    assert seen["frozen"] > 10_000, seen  # the modules, classes and the app built so far
    assert seen["threshold"] == before  # a wider young generation only kept garbage longer
    assert seen["cycle_freed"] is True
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_the_heap_is_put_back_when_the_run_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    before = gc.get_threshold()

    def inside() -> int:
        raise RuntimeError("the terminal went away")

    with pytest.raises(RuntimeError):
        run_with(monkeypatch, inside)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
