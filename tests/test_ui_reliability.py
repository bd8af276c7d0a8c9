"""The dashboard never loses an action, a sample, or the operator's terminal."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support import until
from test_ui import NOTEBOOK, SIZE, main_pid, make_app, select, wait_for
from textual.app import App

from gpudash.demo.host import MINIMAX, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.domain.model import HostSnapshot
from gpudash.ui.app import GpudashApp
from gpudash.ui.quit import QuitWhileActing
from gpudash.ui.screens import ConfirmModal


def audit(tmp_path: Path) -> list[dict]:
    path = Path(os.environ["XDG_STATE_HOME"]) / "gpudash" / "audit-demo.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def workers(demo: DemoHost) -> list[int]:
    return sorted(p.pid for p in demo.processes.values() if p.cmdline.startswith("VLLM::Worker"))


async def start_reclaim(pilot, app: GpudashApp) -> None:  # type: ignore[no-untyped-def]
    await select(pilot, app, f"u:{MINIMAX}")
    await pilot.press("r")
    await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
    await pilot.press("y")
    await wait_for(pilot, lambda: app.running)


async def test_quit_while_acting_asks_and_keep_running_keeps_it(tmp_path: Path) -> None:
    demo = DemoHost(clock=SteppedClock(), release_delay=2)  # still till stepped: quit mid-action
    app = make_app(demo)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.view.snapshot is not None)
        await start_reclaim(pilot, app)
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, QuitWhileActing))
        assert app.is_running
        await pilot.press("n")
        await wait_for(pilot, lambda: not isinstance(app.screen, QuitWhileActing))
        await until(pilot, lambda: app.last_report is not None, what="the reclaim's report")
        assert app.last_report is not None and app.last_report.confirmed
        assert app.is_running  # nothing quit behind the operator's back


async def test_keep_running_keeps_the_dashboard_when_the_action_ended_meanwhile(
        tmp_path: Path) -> None:
    """The action ends while the question is open; "Keep running" still keeps it (CI saw
    the dashboard quit behind a "n" that arrived after the verdict)."""
    demo = DemoHost(clock=SteppedClock(), release_delay=2)
    app = make_app(demo)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.view.snapshot is not None)
        await start_reclaim(pilot, app)
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, QuitWhileActing))
        await until(pilot, lambda: app.last_report is not None, what="the reclaim's report")
        assert isinstance(app.screen, QuitWhileActing)  # the question is still open
        await pilot.press("n")
        await wait_for(pilot, lambda: not isinstance(app.screen, QuitWhileActing))
        await pilot.pause(0.3)
        assert app.is_running


async def test_quit_now_interrupts_and_audits_what_was_sent(tmp_path: Path) -> None:
    demo = DemoHost(clock=SteppedClock(), release_delay=2)
    app = make_app(demo)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.view.snapshot is not None)
        await start_reclaim(pilot, app)
        await until(pilot, lambda: app.controller.running is not None and any(
            s == "SIGTERM" for _p, s, _o in app.controller.running.report.signals),
            what="SIGTERM sent")
        # TP5 ignores TERM; in uninterruptible sleep its KILL stays pending: the action is
        # still running when "Quit now" comes (the host's time stands still meanwhile too)
        next(p for p in demo.processes.values() if p.cmdline == "VLLM::Worker_TP5").state = "D"
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, QuitWhileActing))
        assert app.controller.running is not None
        await pilot.press("y")
        await wait_for(pilot, lambda: not app.is_running)
    report = app.interrupted_report
    assert report is not None and report.interrupted and report.sent_anything
    assert app.return_value == 6
    intent, outcome = audit(tmp_path)
    assert (intent["record"], outcome["record"]) == ("intent", "outcome")
    assert outcome["interrupted"] is True and outcome["id"] == intent["id"]
    assert "SIGTERM" in {s["signal"] for s in outcome["signals"]}


async def test_quit_when_done_waits_for_the_verdict(tmp_path: Path) -> None:
    demo = DemoHost(clock=SteppedClock(), release_delay=2)
    app = make_app(demo)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.view.snapshot is not None)
        await start_reclaim(pilot, app)
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, QuitWhileActing))
        await pilot.press("w")
        await until(pilot, lambda: not app.is_running, what="the verdict, then the quit")
    assert app.interrupted_report is None
    assert app.last_report is not None and app.last_report.confirmed
    assert [r["record"] for r in audit(tmp_path)] == ["intent", "outcome"]


async def test_a_dialog_left_open_does_not_give_a_false_not_confirmed() -> None:
    demo = DemoHost(clock=SteppedClock(), release_delay=1)
    app = make_app(demo)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.view.snapshot is not None)
        tp3 = next(p for p in demo.processes.values() if p.cmdline == "VLLM::Worker_TP3")
        await select(pilot, app, f"p:{tp3.pid}")
        await pilot.press("k")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        # While the operator reads, somebody starts 1 GiB of work on the same GPU.
        demo.spawn(ppid=1, user="bob", name="python", cmdline="python train.py",
                   unit="session-9.scope", gpu_memory_mib={3: 1024})
        await pilot.pause(0.3)
        await pilot.press("y")
        await until(pilot, lambda: app.last_report is not None, what="the kill's report")
        report = app.last_report
        assert report is not None
        assert report.confirmed, report.describe()  # the baseline was taken again at "y"
        assert report.plan.used_before_mib[3] == tp3.gpu_memory_mib[3] + 1024


async def test_a_changed_plan_is_shown_again_before_anything_is_sent() -> None:
    demo = DemoHost(clock=SteppedClock(), release_delay=1)
    app = make_app(demo)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.view.snapshot is not None)
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        first = app.screen
        # One worker dies meanwhile: the plan that would run is not the one on screen.
        gone = workers(demo)[4]
        await demo.signal(gone, demo.processes[gone].start_ticks, 9)
        await pilot.press("y")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed
                       and app.screen is not first)
        text = "\n".join(app.screen.lines)  # type: ignore[attr-defined]
        assert "The host changed while you read the plan" in text
        assert f"no longer signalled (exited or changed): {gone}" in text
        assert not app.running and demo.units[MINIMAX].active  # nothing sent yet
        await pilot.press("n")
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmModal))
        assert demo.units[MINIMAX].active


class Hostile(DemoHost):
    """A host whose refusal reason carries terminal control sequences (in what it sends
    on the wire: the decoder keeps text as it is)."""

    def wire(self) -> dict[str, Any]:
        return {**super().wire(), "can_act": False,
                "cannot_act_reason": "login \x1b]0;pwned\x07 \x1b[31mred\x9b2J\u202e"}


async def test_notifications_never_carry_host_escapes() -> None:
    app = make_app(Hostile(clock=SteppedClock()))
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, f"p:{NOTEBOOK}")
        await pilot.press("k")
        await wait_for(pilot, lambda: len(app._notifications) > 0)
        for n in app._notifications:
            for text in (n.message, n.title):
                assert not any(c in text for c in "\x1b\x07\x9b\u202e"), repr(text)
        assert any("\\x1b]0;pwned\\x07" in n.message for n in app._notifications)


class Burst:
    """A host that sends 60 samples at once, faster than any screen redraws."""

    def __init__(self) -> None:
        self.name = "burst"
        self.demo = DemoHost("burst")

    async def stream(self, interval: float):  # type: ignore[no-untyped-def]
        base = self.demo.snapshot()
        for i in range(60):
            yield dataclasses.replace(base, taken_at=base.taken_at + i)
        await self.demo.sleep(3600)

    round_trip_s = None  # (HostSource) nothing measured

    @property
    def route(self) -> str:
        return f"the source {self.name}"

    @property
    def control(self):  # type: ignore[no-untyped-def]
        return self.demo

    async def close(self) -> None:
        return None


async def test_every_sample_is_recorded_even_when_redraws_are_merged() -> None:
    app = GpudashApp([Burst()], interval=0.25, read_only=False, theme=None, exec_options=None)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.view.snapshot is not None)
        await pilot.pause(0.3)
        assert len(app.view.history) == 60


async def test_textual_logging_still_works(monkeypatch: pytest.MonkeyPatch) -> None:
    # The app once defined its own `_log`, shadowing Textual's: with devtools connected
    # (`textual run --dev`) every `app.log(...)` raised TypeError.
    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.view.snapshot is not None)
        monkeypatch.setattr(App, "_is_devtools_connected", property(lambda self: True))
        app.log("a", "b", key=1)
        assert main_pid(app)


def absurd(snap: HostSnapshot) -> HostSnapshot:
    gpus = tuple(dataclasses.replace(g, memory_used_mib=10**400, memory_total_mib=10**400,
                                     power_w=1e308) for g in snap.gpus)
    return dataclasses.replace(snap, gpus=gpus, taken_at=1e308)


class Absurd(DemoHost):
    """A host (compromised, or a driver gone mad) reporting impossible numbers, put in
    its snapshots past the wire's decoder (which would refuse or blank them): what the
    screen does with numbers nobody bounded."""

    def snapshot(self) -> HostSnapshot:
        return absurd(super().snapshot())

    async def stream(self, interval: float) -> AsyncIterator[HostSnapshot]:
        async for snap in super().stream(interval):
            yield absurd(snap)


async def test_no_redraw_can_end_the_app() -> None:
    app = make_app(Absurd(clock=SteppedClock()))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.view.snapshot is not None)
        await until(pilot, lambda: len(app.view.history) >= 3, what="3 samples")  # redrawn
        await pilot.pause(0.3)
        assert app.is_running
        await pilot.press("down", "g", "tab")
        await pilot.pause(0.3)
        assert app.is_running


class Measured(DemoHost):
    """A host whose transport measured a 250 ms request round trip."""

    round_trip_s = 0.25


async def test_header_shows_the_measured_round_trip_not_arrival_jitter() -> None:
    app = make_app(Measured(clock=SteppedClock()))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "rtt 250 ms" in str(app.query_one("#header").render()))
    demo = make_app(DemoHost(clock=SteppedClock()))
    async with demo.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "rtt N/A" in str(demo.query_one("#header").render()))


async def test_holders_show_each_process_cpu_and_rss_and_the_header_the_hosts() -> None:
    demo = DemoHost(clock=SteppedClock())
    app = make_app(demo)
    async with app.run_test(size=SIZE) as pilot:
        tp0 = next(p for p in demo.processes.values() if p.cmdline == "VLLM::Worker_TP0")
        await select(pilot, app, f"p:{tp0.pid}")
        from gpudash.ui.widgets.holders import HoldersTable

        row = [str(c) for c in app.query_one(HoldersTable).get_row(f"p:{tp0.pid}")]
        assert "99 %" in row and "9.0 GiB" in row  # a spinning worker, not an idle one
        kernel = [str(c) for c in app.query_one(HoldersTable).get_row(f"p:{NOTEBOOK}")]
        assert "0 %" in kernel and "2.3 GiB" in kernel
        header = str(app.query_one("#header").render())
        assert "cpu " in header and "ram " in header and "/2063.0 GiB" in header
