"""The signal picker: S on a process, a signal picked, the pinned plan confirmed, and the
verdict says what the process did; at the sizes an operator uses."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import until
from test_ui import NOTEBOOK, make_app, select, wait_for

from gpudash.demo.host import MINIMAX, NOTEBOOK_MIB, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.engine import ActionKind
from gpudash.ui.screens import ConfirmModal
from gpudash.ui.signal_picker import SignalPicker


def workers(demo: DemoHost) -> list[int]:
    return sorted(p.pid for p in demo.processes.values() if p.cmdline.startswith("VLLM::Worker"))


@pytest.mark.parametrize("size", [(80, 24), (120, 35)])
async def test_int_to_the_notebook_kernel_through_the_picker(tmp_path: Path,
                                                             size: tuple[int, int]) -> None:
    demo = DemoHost(clock=SteppedClock(), release_delay=2)
    app = make_app(demo)
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.view.snapshot is not None)
        await select(pilot, app, f"p:{NOTEBOOK}")
        await pilot.press("S")
        await wait_for(pilot, lambda: isinstance(app.screen, SignalPicker))
        heading = str(app.screen.query_one("Static").render())
        assert f"pid {NOTEBOOK} (alice" in heading and "ipykernel_launcher" in heading
        await pilot.press("i", "enter")  # i: INT
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        shown = "\n".join(app.screen.lines)
        assert f"kill -INT {NOTEBOOK}" in shown and "Expected: delivered" in shown
        assert "alice's login session" in shown  # whose work it is, as for TERM and KILL
        await pilot.press("y")
        await until(pilot, lambda: app.last_report is not None, what="the report")
        report = app.last_report
        assert report is not None and report.plan.kind is ActionKind.SIGNAL
        assert report.confirmed, report.summary
        assert report.summary.startswith(f"delivered: INT to pid {NOTEBOOK}")
        assert "still runs" in report.summary
        assert demo.processes[NOTEBOOK].gpu_memory_mib == {0: NOTEBOOK_MIB}


async def test_escape_in_the_picker_sends_nothing(tmp_path: Path) -> None:
    demo = DemoHost(clock=SteppedClock(), release_delay=2)
    app = make_app(demo)
    async with app.run_test(size=(120, 35)) as pilot:
        await wait_for(pilot, lambda: app.view.snapshot is not None)
        pid = workers(demo)[0]
        await select(pilot, app, f"p:{pid}")
        await pilot.press("S")
        await wait_for(pilot, lambda: isinstance(app.screen, SignalPicker))
        await pilot.press("k")  # KILL highlighted
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, SignalPicker))
        await pilot.pause(0.3)
        assert not isinstance(app.screen, ConfirmModal)
        assert app.last_report is None and pid in demo.processes


async def test_stop_pauses_a_worker_shown_in_the_table(tmp_path: Path) -> None:
    demo = DemoHost(clock=SteppedClock(), release_delay=2)
    app = make_app(demo)
    async with app.run_test(size=(120, 35)) as pilot:
        await wait_for(pilot, lambda: app.view.snapshot is not None)
        pid = workers(demo)[2]
        await select(pilot, app, f"p:{pid}")
        await pilot.press("S")
        await wait_for(pilot, lambda: isinstance(app.screen, SignalPicker))
        await pilot.press("s", "t", "enter")  # "st": STOP, not the first S (none) or TERM
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        assert f"kill -STOP {pid}" in "\n".join(app.screen.lines)
        await pilot.press("y")
        await until(pilot, lambda: app.last_report is not None, what="the report")
        assert "paused (state T)" in app.last_report.summary  # type: ignore[union-attr]
        assert demo.processes[pid].state == "T"


async def test_on_an_owner_row_s_says_to_select_a_process(tmp_path: Path) -> None:
    demo = DemoHost(clock=SteppedClock(), release_delay=2)
    app = make_app(demo)
    async with app.run_test(size=(120, 35)) as pilot:
        await wait_for(pilot, lambda: app.view.snapshot is not None)
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("S")
        await pilot.pause(0.3)
        assert not isinstance(app.screen, SignalPicker)
        assert any("select a process" in str(n.message) for n in app._notifications)
