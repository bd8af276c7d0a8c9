"""The real dashboard under a compromised host's snapshots: it keeps running and keeps
the host in view, whatever numbers, keys and text the host sends.

Two paths. What a host can really send arrives through the decoder (``wire``): absurd
numbers, NaN and infinities, negative values, duplicate JSON keys, hostile text; what
decodes must draw without a display error. And, as defence in depth, snapshots no decoder
would let through (duplicate pids and GPU indices, NaN where an int belongs, 10**400):
no redraw, key or triage may end the app.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from support import until
from test_ui import SIZE, make_app
from test_wire import good

from gpudash.demo.host import DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.domain.model import HostSnapshot
from gpudash.protocol.source import ProtocolError
from gpudash.protocol.wire import SnapshotDecoder
from gpudash.ui.app import GpudashApp

HUGE = 10**400
NAN, INF = math.nan, math.inf


class Scripted(DemoHost):
    """A host whose stream sends ``current`` every tick (the demo's own snapshot when
    it is None: the host recovered)."""

    def __init__(self) -> None:
        super().__init__("hostile", clock=SteppedClock())
        self.current: HostSnapshot | None = None

    async def stream(self, interval: float) -> AsyncIterator[HostSnapshot]:  # type: ignore[override]
        while True:
            snap = self.current
            yield snap if snap is not None else dataclasses.replace(super().snapshot())
            await self.sleep(0.05)


def wire_lines() -> list[bytes]:
    """What a compromised host can put on the wire, as full snapshots."""
    out: list[dict[str, Any]] = []

    def variant(**changes: Any) -> dict[str, Any]:
        state = copy.deepcopy(good(n_gpus=4, n_procs=6))
        for path, value in changes.items():
            *where, last = path.split("__")
            target = state
            for key in where:
                target = target[key]
            target[last] = value
        out.append(state)
        return state

    for whole, real in zip((HUGE, -HUGE, -1, 2**63, 2**24 + 1),
                           (NAN, INF, -INF, 1e308, -HUGE), strict=True):
        variant(  # integers where the model holds ints, anything numeric where floats
            gpus__0__memory_used_mib=whole, gpus__0__memory_total_mib=whole,
            gpus__1__temperature_c=whole, gpus__2__utilization_pct=whole,
            gpus__1__power_w=real, gpus__3__power_limit_w=real,
            procs__100__started_at=real, procs__101__cpu_pct=real, procs__102__rss_mib=whole,
            procs__103__gpu_memory_mib={"0": whole, "1": 5},
            cpu_pct=real, mem_used_mib=whole, mem_total_mib=whole,
        )["units"]["v.service"]["n_restarts"] = whole
    variant(procs__103__cmdline="\x1b]52;c;cHduZWQ=\x07\u202e" + "\udcff" * 5000 + "[b]x[/b]",
            procs__104__name="\n@frame 1\n", procs__105__user="\x9b2J")
    lines = [json.dumps({"k": "full", "s": state}).encode() for state in out]
    # duplicate JSON keys: the last wins, as json.loads reads them, never two objects
    dup = json.dumps({"k": "full", "s": good(n_gpus=2, n_procs=2)})
    dup = dup.replace('"100": {', '"100": {"pid": 100, "rss_mib": 1e999, ', 1)
    dup = dup.replace('{"k": "full", "s": {', '{"k": "full", "s": {"gpus": {}, ', 1)
    lines.append(dup.encode())
    return lines


def decoded() -> list[HostSnapshot]:
    snaps = []
    for line in wire_lines():
        try:
            snaps.append(SnapshotDecoder("hostile").feed(line))
        except ProtocolError:  # refused whole: test_wire's business
            pass
    return snaps


def watch_drawing(app: GpudashApp, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    failures: list[str] = []
    real = app.drawing_failed

    def record(where: str, exc: Exception) -> None:
        failures.append(f"{where}: {type(exc).__name__}: {exc}")
        real(where, exc)

    monkeypatch.setattr(app, "drawing_failed", record)
    return failures


KEYS = (("down", "down", "enter", "escape"), ("g", "tab", "down"), ("g", "tab", "enter"))


async def exercise(pilot, app: GpudashApp, turn: int) -> None:  # type: ignore[no-untyped-def]
    """Keys that redraw every part (holders, GPUs, the plot of all GPUs, details), a
    different set each turn."""
    await pilot.press(*KEYS[turn % len(KEYS)])
    await pilot.pause(0.05)
    assert app.is_running


async def test_whatever_decodes_from_a_hostile_host_draws_without_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    snaps = decoded()
    assert len(snaps) >= 7  # measurements out of range are N/A, not a refused message
    host = Scripted()
    app = make_app(host)
    failures = watch_drawing(app, monkeypatch)
    async with app.run_test(size=SIZE) as pilot:
        for turn, snap in enumerate(snaps):  # one at a time: drawn, keys pressed on it
            host.current = snap
            await until(pilot, lambda s=snap: app.view.snapshot is s)  # type: ignore[misc]
            await exercise(pilot, app, turn)
            assert app.view.state == "connected", app.view.error
        assert app.is_running
    assert failures == []


def absurd() -> list[HostSnapshot]:
    """Snapshots no decoder lets through: duplicates, wrong types, unbounded numbers."""
    base = DemoHost("hostile").snapshot()
    out = []
    for value in (HUGE, -HUGE, NAN, INF, -INF, -(2**63)):
        gpus = tuple(dataclasses.replace(
            g, memory_used_mib=value, memory_total_mib=value, memory_reserved_mib=value,
            utilization_pct=value, temperature_c=value, power_w=value, power_limit_w=value,
        ) for g in base.gpus)
        procs = tuple(dataclasses.replace(
            p, gpu_memory_mib={g: value for g in p.gpu_memory_mib}, cpu_pct=value,
            rss_mib=value, started_at=value, start_ticks=value,
        ) for p in base.processes)
        units = tuple(dataclasses.replace(u, n_restarts=value) for u in base.units)
        out.append(dataclasses.replace(
            base, gpus=gpus, processes=procs, units=units, taken_at=value,
            cpu_pct=value, mem_used_mib=value, mem_total_mib=value,
        ))
    # the same pid twice, the same GPU index twice, the same unit twice
    out.append(dataclasses.replace(
        base, gpus=base.gpus + base.gpus[:1], processes=base.processes + base.processes[:2],
        units=base.units + base.units[:1],
    ))
    return out


async def test_no_snapshot_at_all_can_end_the_app_or_lose_the_host() -> None:
    host = Scripted()
    app = make_app(host)
    async with app.run_test(size=SIZE) as pilot:
        for turn, snap in enumerate(absurd()):
            host.current = snap
            await until(pilot, lambda s=snap: app.view.snapshot is s)  # type: ignore[misc]
            await exercise(pilot, app, turn)
            assert app.view.state == "connected", app.view.error
        # and once the host sends sane snapshots again, it is back in view as before
        host.current = None
        await until(pilot, lambda: app.view.snapshot is not None
                    and app.view.snapshot.taken_at < 1e10 and app.view.state == "connected",
                    what="the host back in view")
        await exercise(pilot, app, 0)
        assert app.is_running


@pytest.mark.parametrize("history", [
    # the host's clock went back ~3 years, and it used more than its GPU has
    [(1.796e9, {0: 96801}), (1.796e9 + 6, {0: 96801}), (1.7e9, {0: 10})],
    # or jumped ~4 months ahead, its last reading below the earlier ones above the limit
    [(1.7e9, {0: 96801}), (1.7e9 + 1e7, {0: 96801}), (1.7e9 + 1e7 + 6, {0: 10})],
])
def test_plot_survives_clock_jumps_and_readings_above_the_limit(history: list) -> None:
    # plotext dies with std::bad_alloc (SIGABRT, no exception) on such points: only a
    # child process can show that it did
    code = (
        "from gpudash.ui.plot import render_history\n"
        f"text = render_history({history!r}, [0], width=56, height=9, ymax=79.6)\n"
        "assert text.plain.strip()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-500:]
