"""``gpudash fix``: the unit's configuration that sets the trap, fixed by one drop-in of
gpudash's own, previewed as a diff, proven by ``systemctl show``, reverted exactly."""

from __future__ import annotations

import asyncio
import io
import json

import pytest
from support import SelfSteppingClock
from test_cli import audit_records, gpudash

from gpudash.cli.args import parse
from gpudash.cli.fix import run_fix
from gpudash.cli.terminal import Terminal
from gpudash.demo.host import MINIMAX, DemoHost
from gpudash.domain import dropin
from gpudash.engine import unit_ref
from gpudash.render import jsondoc
from gpudash.transport.commands import cat_argv, drop_in_argvs

PATH = "/etc/systemd/system/vllm-minimax-m25.service.d/50-gpudash.conf"


def _fix(demo: DemoHost, *argv: str) -> tuple[int, str, str]:
    _cmd, args = parse(["fix", "--demo", "--unit", "vllm-minimax-m25", *argv])
    out, err = io.StringIO(), io.StringIO()
    code = run_fix(args, demo, Terminal(out, err, io.StringIO()))
    return code, out.getvalue(), err.getvalue()


def _lint(demo: DemoHost) -> list[dict]:
    doc = jsondoc.document([asyncio.run(demo.sample())], {})
    text = json.dumps(doc)
    data = json.loads(text)
    found = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if node.get("unit") == MINIMAX and "lint" in node:
                found.extend(node["lint"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(data)
    return found


def test_dry_run_prints_the_diff_and_sends_nothing() -> None:
    # issue 33, item 7: the plan and the diff went to stderr: `> fix.diff` was empty
    r = gpudash("fix", "--demo", "--unit", "vllm-minimax-m25", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert f"+# {PATH}" in r.stdout and "+KillMode=mixed" in r.stdout
    assert "+StartLimitIntervalSec=600s" in r.stdout and "--dry-run: nothing sent" in r.stderr
    assert "KillMode: in force from its next stop or restart" in r.stdout
    assert audit_records() == []
    j = gpudash("fix", "--demo", "--unit", "vllm-minimax-m25", "--dry-run", "--json")
    doc = json.loads(j.stdout)
    assert doc["dry_run"] is True and doc["action"] == "fix"
    assert "[Service] KillMode=mixed" in doc["settings"]


def test_yes_writes_reloads_verifies_and_audits() -> None:
    r = gpudash("fix", "--demo", "--unit", "vllm-minimax-m25", "--yes", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["action"] == "fix"
    sent = report["sent"]
    assert sent[0].startswith(f"tee -- {PATH}") and sent[1].startswith("systemctl daemon-reload")
    intent, outcome = audit_records()
    assert intent["action"] == outcome["action"] == "fix" and intent["id"] == outcome["id"]
    assert any(f"+# {PATH}" in line for line in intent["plan"])


def test_the_lint_clears_and_revert_brings_it_back() -> None:
    demo = DemoHost(clock=SelfSteppingClock(), containers=True)
    before = _lint(demo)
    assert {f["setting"].split("=")[0] for f in before} >= {"KillMode", "Restart"}
    code, _out, err = _fix(demo, "--yes")
    assert code == 0, err
    assert _lint(demo) == []  # snapshot --json: the unit panel stops warning
    u = asyncio.run(demo.sample()).unit(MINIMAX)
    assert u is not None and u.kill_mode == "mixed" and u.active_state == "active"
    text = asyncio.run(demo.unit_text(MINIMAX))
    assert dropin.ours_in(text, MINIMAX) is not None
    # once fixed there is nothing left to fix
    code, _out, err = _fix(demo, "--yes")
    assert code == 2 and "nothing to fix" in err
    code, _out, err = _fix(demo, "--revert", "--yes")
    assert code == 0, err
    assert f"-# {PATH}" in err and "Only " + PATH + " is removed" in err
    assert _lint(demo) == before
    assert dropin.ours_in(asyncio.run(demo.unit_text(MINIMAX)), MINIMAX) is None
    code, _out, err = _fix(demo, "--revert", "--yes")
    assert code == 2 and "nothing to revert" in err


def test_after_the_fix_a_kill_of_the_main_leaves_no_orphan() -> None:
    demo = DemoHost(clock=SelfSteppingClock(), containers=True)
    assert _fix(demo, "--yes")[0] == 0
    snap = asyncio.run(demo.sample())
    u = snap.unit(MINIMAX)
    assert u is not None and u.main_pid is not None
    workers = {p.pid for p in snap.processes if p.unit == MINIMAX and p.pid != u.main_pid}
    import signal

    p = snap.process(u.main_pid)
    assert p is not None
    asyncio.run(demo.signal(u.main_pid, p.start_ticks, signal.SIGKILL))
    after = asyncio.run(demo.sample())
    assert not workers & {q.pid for q in after.processes}  # the cgroup went with it


def test_read_only_is_refused_and_nothing_is_audited() -> None:
    demo = DemoHost(clock=SelfSteppingClock(), read_only=True)
    code, _out, err = _fix(demo, "--yes")
    assert code == 2 and "read-only" in err
    assert audit_records() == []
    assert demo.units[MINIMAX].drop_in is None


@pytest.mark.parametrize("argv, said", [
    (["--unit", "session-4.scope"], "services only"),
    (["--unit", "--now"], "expected one argument"),
    (["--unit", "a b"], "not a systemd unit name"),
    ([], "--unit"),
])
def test_argument_errors_exit_2(argv: list[str], said: str) -> None:
    r = gpudash("fix", "--demo", *argv)
    assert r.returncode == 2 and said in r.stderr
    assert audit_records() == []


def test_no_terminal_and_no_yes_does_nothing() -> None:
    r = gpudash("fix", "--demo", "--unit", "vllm-minimax-m25")
    assert r.returncode == 5 and "nothing done" in r.stderr
    assert audit_records() == []


def test_the_host_commands_take_no_shell_and_only_gpudash_s_path() -> None:
    assert drop_in_argvs("vllm.service", True, sudo=True) == [
        ["sudo", "-n", "install", "-d", "-m", "0755", "--",
         "/etc/systemd/system/vllm.service.d"],
        ["sudo", "-n", "tee", "--", "/etc/systemd/system/vllm.service.d/50-gpudash.conf"]]
    assert drop_in_argvs("foo@bar.service", False, sudo=False) == [
        ["rm", "-f", "--", "/etc/systemd/system/foo@bar.service.d/50-gpudash.conf"]]
    assert cat_argv("vllm.service")[-2:] == ["--", "vllm.service"]
    for bad in ("../x.service", "x.service\n", "-x.service", "x.scope"):
        with pytest.raises(ValueError):
            drop_in_argvs(bad, True, sudo=False)


def test_the_precheck_agrees_with_the_planner_once_the_unit_is_read() -> None:
    from gpudash.engine import SPECS, ActionKind, PlanError, Selection
    from gpudash.engine.config_plans import fix_fits

    demo = DemoHost(clock=SelfSteppingClock())
    spec = SPECS[ActionKind.FIX]
    for unit in demo.units:
        text = asyncio.run(demo.unit_text(unit))
        snap = asyncio.run(demo.sample())
        for revert in (False, True):
            sel = Selection(owner=unit_ref(unit), revert=revert, unit_text=text)
            reason = fix_fits(snap, sel)
            try:
                spec.plan(snap, sel)
            except PlanError as exc:
                assert reason == str(exc)
            else:
                assert reason is None


def test_the_drop_in_gives_the_stop_time_learned_here() -> None:
    # the lint held TimeoutStopSec=90s against a learned 200 s stop, and fix wrote none:
    # the unit was still SIGKILLed mid-shutdown after "the fix"
    from gpudash.state import footprints

    footprints.learn_stop("demo-gpu01", MINIMAX, 200.0, footprints.store_path(simulated=True))
    demo = DemoHost(clock=SelfSteppingClock())
    code, out, err = _fix(demo, "--dry-run")
    assert code == 0, err
    assert "+TimeoutStopSec=300s" in out, out  # 200 s x 1.5, in tens of seconds
    code, out, err = _fix(demo, "--yes")
    assert code == 0, err + out  # proven: systemctl show reports what the lint wants
    assert demo.units[MINIMAX].timeout_stop_s == 300.0


def test_the_plan_says_what_mixed_does_to_workers_that_ignored_sigterm_here() -> None:
    # KillMode=mixed is what the fix writes; workers that ignored gpudash's SIGTERM on
    # this host would then hold a stop until TimeoutStopSec: the plan says so before, the
    # lint after, and the fix is confirmed all the same (no drop-in setting mends it).
    from gpudash.state import footprints

    demo = DemoHost(clock=SelfSteppingClock())
    code, out, err = _fix(demo, "--dry-run")
    assert code == 0 and "workers ignore SIGTERM" not in out, err  # nothing seen yet
    footprints.learn_term_ignored("demo-gpu01", MINIMAX, 1,
                                  footprints.store_path(simulated=True))
    code, out, err = _fix(demo, "--dry-run")
    assert code == 0, err
    assert "Once in force, KillMode=mixed, workers ignore SIGTERM: 1 of its processes" in out
    code, out, err = _fix(demo, "--yes")
    assert code == 0, err + out
    settings = [f["setting"] for f in _lint(demo)]
    assert "KillMode=mixed, workers ignore SIGTERM" not in settings  # _lint reads nothing
    learned = footprints.learned("demo-gpu01", footprints.store_path(simulated=True))
    doc = jsondoc.document([asyncio.run(demo.sample())], {}, lambda _s: learned)
    [owner] = [o for h in doc["hosts"] for o in h["owners"] if o.get("unit") == MINIMAX]
    assert [f["setting"] for f in owner["lint"]] == ["KillMode=mixed, workers ignore SIGTERM"]
