"""The action controller, with no screen: audit, run, report, re-verify — never lose one."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from support import run_until, stepped

from gpudash.demo.host import MINIMAX, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.engine import REVERIFY, ActionKind, ExecOptions, Progress, plan_action
from gpudash.protocol.source import LinkLost, SignalOutcome
from gpudash.session.controller import ActionController

FAST = ExecOptions(term_timeout=2.0, verify_timeout=10.0, poll=0.5)


def audit() -> list[dict]:
    path = Path(os.environ["XDG_STATE_HOME"]) / "gpudash" / "audit-demo.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def test_a_run_is_audited_before_and_after_and_kept() -> None:
    demo = DemoHost(clock=SteppedClock())
    c = ActionController(FAST)
    plan = plan_action(await demo.sample(), ActionKind.RECLAIM, unit=MINIMAX)
    running = c.begin(plan, 0, act=True)
    assert c.busy and c.shown is not None and c.shown.report is None
    seen: list[Progress] = []
    outcome = await stepped(demo, c.run(running, demo, seen.append, lambda why: None))
    report, error = outcome.report, outcome.error
    assert error is None and report is not None and report.confirmed
    c.finished(0, report, error)
    assert not c.busy and c.last_report is report
    assert c.shown is not None and c.shown.report is report and c.shown.progress is None
    assert [r["record"] for r in audit()] == ["intent", "outcome"]


async def test_cancelling_a_run_keeps_what_was_sent_and_audits_it() -> None:
    demo = DemoHost(clock=SteppedClock())
    c = ActionController(ExecOptions(term_timeout=10.0, poll=0.5))
    plan = plan_action(await demo.sample(), ActionKind.RECLAIM, unit=MINIMAX)
    running = c.begin(plan, 0, act=True)
    waiting = asyncio.Event()
    task = asyncio.ensure_future(c.run(running, demo,
                                       lambda p: p.phase == "waiting" and waiting.set(),
                                       lambda why: None))
    await run_until(demo, waiting.is_set, what="TERM sent")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert c.interrupted is running.report and c.interrupted.interrupted
    intent, outcome = audit()
    assert outcome["interrupted"] is True and outcome["id"] == intent["id"]


class DropsOnSignal(DemoHost):
    async def signal(self, pid: int, start_ticks: int | None, sig: int, *,
                     boot_id: str | None = None) -> SignalOutcome:
        raise LinkLost("connection reset")


async def test_an_unknown_outcome_is_reverified_a_bounded_number_of_times() -> None:
    demo = DropsOnSignal(clock=SteppedClock())
    c = ActionController(FAST)
    s = await demo.sample()
    worker = next(p.pid for p in s.processes if p.cmdline == "VLLM::Worker_TP2")
    plan = plan_action(s, ActionKind.KILL, pid=worker)
    outcome = await stepped(demo, c.run(c.begin(plan, 3, act=True), demo, lambda p: None,
                                        lambda why: None))
    report, error = outcome.report, outcome.error
    assert report is not None and report.unknown
    # the signal the link dropped under may have gone out: the report says so
    assert report.sent_lines() == [f"SIGKILL {worker}: unknown"]
    c.finished(3, report, error)
    for attempt in range(REVERIFY.attempts):
        again = c.take_reverify(3)
        assert again is plan, attempt  # re-verified when host 3's samples flow again
        running = c.begin(again, 3, act=False)
        c.finished(3, running.report.__class__(again, unknown=True), None)  # still unknown
    assert c.take_reverify(3) is None  # given up: left to the log
    assert c.take_reverify(0) is None  # another host has nothing pending


async def test_a_reverification_continues_its_actions_audit_record_and_keeps_what_was_sent() -> (
    None
):
    # The dashboard's re-verification wrote an outcome under a new id with no intent and
    # no commands or signals: the audit could not tie it to the action it concluded.
    demo = DropsOnSignal(clock=SteppedClock())
    c = ActionController(FAST)
    s = await demo.sample()
    worker = next(p.pid for p in s.processes if p.cmdline == "VLLM::Worker_TP2")
    plan = plan_action(s, ActionKind.KILL, pid=worker)
    outcome = await stepped(demo, c.run(c.begin(plan, 0, act=True), demo, lambda p: None,
                                        lambda why: None))
    report, error = outcome.report, outcome.error
    c.finished(0, report, error)
    again = c.take_reverify(0)
    assert again is plan
    outcome = await stepped(demo, c.run(c.begin(again, 0, act=False), demo, lambda p: None,
                                        lambda why: None))
    looked, error = outcome.report, outcome.error
    assert looked is not None and looked.reverified
    assert looked.sent_lines() == [f"SIGKILL {worker}: unknown"]
    intent, first, second = audit()
    assert (intent["record"], first["record"], second["record"]) == ("intent", "outcome",
                                                                     "outcome")
    assert intent["id"] == first["id"] == second["id"]
    assert first["verdict"] == "unknown" and second["sent"] == [f"SIGKILL {worker}: unknown"]
