"""The audit file: written whatever the host's text, private, and never missing an
action that reached the host, even one that failed half-way."""

from __future__ import annotations

import io
import json
import os
import stat
from pathlib import Path

from support import SelfSteppingClock, stepped
from test_cli_escaping import ERASE

from gpudash.cli.act import run_reclaim
from gpudash.cli.args import parse
from gpudash.cli.terminal import Terminal
from gpudash.demo.host import DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.engine import ActionKind, ActionReport, plan_action
from gpudash.protocol.wire import SnapshotDecoder
from gpudash.session import audit

UNIT = "vllm-minimax-m25"
SURROGATE = "\udcff"  # what os.fsdecode makes of a byte that is not UTF-8


def audit_file() -> Path:
    return Path(os.environ["XDG_STATE_HOME"]) / "gpudash" / "audit-demo.jsonl"


def records() -> list[dict]:
    return [json.loads(line) for line in audit_file().read_text(encoding="ascii").splitlines()]


async def test_lone_surrogates_and_escapes_are_written_as_ascii_json(tmp_path: Path) -> None:
    demo = DemoHost(clock=SteppedClock())
    name = f"evil{SURROGATE}{ERASE}\u202e"
    demo.spawn(ppid=1, user=name, name=name, cmdline=name, unit=None, gpu_memory_mib={1: 100})
    # as a hostile host may write it: JSON escapes (\ud800) that decode to a lone
    # surrogate (the collector's own lines would carry "?" for it)
    line = json.dumps({"k": "full", "s": demo.wire()}).encode()
    plan = plan_action(SnapshotDecoder(demo.name).feed(line), ActionKind.RECLAIM, unit=UNIT)
    trail = audit.AuditTrail(plan, 10.0, tmp_path / "a.jsonl")
    trail.intent()  # raised UnicodeEncodeError (not OSError): the app crashed
    trail.outcome(ActionReport(plan))
    data = (tmp_path / "a.jsonl").read_bytes()
    assert data.isascii() and b"\x1b" not in data
    intent, _outcome = (json.loads(line) for line in data.splitlines())
    assert any(name in line for line in intent["plan"])  # the text itself, intact


def test_an_existing_audit_file_is_made_private(tmp_path: Path) -> None:
    # written by an older gpudash (0644 in 0755): every user could read what was done
    directory = tmp_path / "gpudash"
    directory.mkdir(mode=0o755)
    path = directory / "audit.jsonl"
    path.write_text("")
    path.chmod(0o644)
    directory.chmod(0o755)
    audit.write({"record": "intent"}, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700


class FailsAfterSending(DemoHost):
    """systemctl runs; the first signal hits something nobody foresaw."""

    async def signal(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("the host said something nobody foresaw")


def test_an_action_that_fails_after_sending_still_leaves_its_outcome() -> None:
    _cmd, args = parse(["reclaim", "--demo", "--unit", UNIT, "--yes", "--term-timeout", "1"])
    err = io.StringIO()
    # a bug in the engine: one line, exit 70 (the traceback in the log), never a crash
    code = run_reclaim(args, FailsAfterSending(clock=SelfSteppingClock()),
                       Terminal(io.StringIO(), err, io.StringIO()))
    assert code == 70 and "internal error" in err.getvalue()
    intent, outcome = records()
    assert (intent["record"], outcome["record"]) == ("intent", "outcome")
    assert outcome["id"] == intent["id"] and outcome["verdict"] == "failed"
    assert [c["argv"][-1] for c in outcome["commands"]] == [f"{UNIT}.service"] * 2
    assert "RuntimeError" in outcome["summary"] and "systemctl" in outcome["summary"]
    assert "systemctl" in err.getvalue()  # the operator is told what was sent, too


async def test_the_dashboards_failed_action_still_leaves_its_outcome() -> None:
    from gpudash.engine import ExecOptions
    from gpudash.session.controller import ActionController

    demo = FailsAfterSending(clock=SteppedClock())
    plan = plan_action(await demo.sample(), ActionKind.RECLAIM, unit=UNIT)
    controller = ActionController(ExecOptions(term_timeout=1.0, poll=0.1, verify_timeout=5.0))
    running = controller.begin(plan, 0, act=True)
    outcome = await stepped(demo, controller.run(running, demo, lambda p: None,
                                                 lambda e: None))
    report, error = outcome.report, outcome.error
    assert report is None and error is not None and "RuntimeError" in error
    intent, outcome = records()
    assert (intent["record"], outcome["record"]) == ("intent", "outcome")
    assert outcome["verdict"] == "failed" and len(outcome["commands"]) == 2
