"""Draining a Slurm node with a reason, and resuming it (issue 31): for the operator who
decides the node is unhealthy. Planned (the node, the reason exactly as Slurm is given it,
the jobs left to finish), confirmed, audited, and proven by the node's state as Slurm
reports it; refused with the reason where it makes no sense. On the demo's Slurm node;
the real Slurm's in tests/test_lab_slurm.py (f)."""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpudash.cli.main import main
from gpudash.demo.fleet import SLURM_NODE, ScenarioHost
from gpudash.demo.host import DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.domain.model import HostSnapshot
from gpudash.domain.owners.slurm_node import (
    REASON_MAX,
    WORDS_MAX,
    drain_reason,
    node_argv,
    one_line,
    reason_matches,
    validate_node,
)
from gpudash.domain.triage import triage
from gpudash.engine import SPECS, ActionKind, ExecOptions, PlanError, Selection, execute
from gpudash.engine.plan import ActionPlan
from gpudash.session.lifecycle import Ended, Request, prepare

FAST = ExecOptions(term_timeout=3.0, verify_timeout=10.0, poll=0.5, settle=3)
DRAIN, RESUME = SPECS[ActionKind.DRAIN], SPECS[ActionKind.RESUME]
HOSTILE = 'GPU 3 "ECC"; $(reboot) `id` [bold red]x[/] \\n\nnext line'
KIND = "slurm job"


async def stepped(clock: SteppedClock, work: Any) -> Any:
    task = asyncio.ensure_future(work)
    for _ in range(4000):
        if task.done():
            break
        await clock.advance(0.25)
        await asyncio.sleep(0)
    return task.result()


class Ports:
    asks = False

    async def confirm(self, plan: ActionPlan, lines: list[str]) -> bool | None:
        return True

    async def pick(self, *args: object) -> None:
        return None


async def slurm_node() -> tuple[ScenarioHost, SteppedClock]:
    clock = SteppedClock()
    host = ScenarioHost(SLURM_NODE, "slurm", clock=clock)
    await host.sample()
    return host, clock


def with_node(snap: HostSnapshot, **node: Any) -> HostSnapshot:
    """``snap`` as a host whose Slurm node facts say ``node`` (None: no Slurm at all)."""
    section = dict(snap.owners.get(KIND, {}))
    section[""] = node
    return replace(snap, owners={KIND: section})


async def test_a_drain_names_the_node_the_reason_and_the_jobs_it_lets_finish() -> None:
    host, clock = await slurm_node()
    plan = await prepare(Request(ActionKind.DRAIN, Selection(), reason=HOSTILE), host,
                         host.name, Ports())
    assert isinstance(plan, ActionPlan), plan
    who = plan.selection.reason
    assert who is not None and who.startswith("gpudash: ") and " drained: GPU 3" in who
    assert "\n" not in who and who.endswith("[bold red]x[/] \\n next line")  # one line
    (step,) = plan.commands
    assert step.argv == ("scontrol", "update", f"NodeName={SLURM_NODE}", "State=DRAIN",
                         f'Reason="{who}"')  # one argument, whatever the reason holds
    text = "\n".join(plan.describe())
    assert f"node {SLURM_NODE}" in plan.title
    assert "job 4116 (carol's eval-harness, RUNNING, GPUs 4,5,6,7)" in text
    assert "job 4118 (bob's llama-ft, RUNNING, GPUs 0,1,2,3)" in text
    assert "the drain lets them finish" in text and "Expected back" not in text
    alive = {p.pid for p in (await host.sample()).processes}

    report = await stepped(clock, execute(plan, host, FAST))
    assert report.confirmed, report.summary
    assert report.summary.startswith(f"confirmed: scontrol show node {SLURM_NODE}: "
                                     "MIXED+DRAIN")
    assert "2 job(s) run on until they end" in report.summary
    after = await host.sample()
    node = after.facts(KIND, "")
    assert (node["drain"], node["reason"]) == (True, who)
    # a drain ends no job: every process is still there, every job still RUNNING
    assert {p.pid for p in after.processes} == alive
    assert after.facts(KIND, "4118")["state"] == "RUNNING"

    # drained: a second drain is refused; resume is offered, planned and proven
    result = triage(after)
    assert "drained already" in (DRAIN.precheck(result, Selection()) or "")
    assert RESUME.precheck(result, Selection()) is None
    back = await prepare(Request(ActionKind.RESUME, Selection()), host, host.name, Ports())
    assert isinstance(back, ActionPlan), back
    assert back.commands[0].argv == ("scontrol", "update", f"NodeName={SLURM_NODE}",
                                     "State=RESUME")
    assert "GPU 0 holds" not in "\n".join(back.describe())  # job 4118 has GPUs 0-3
    report = await stepped(clock, execute(back, host, FAST))
    assert report.confirmed, report.summary
    node = (await host.sample()).facts(KIND, "")
    assert (node["drain"], node["node_state"]) == (False, "MIXED") and "reason" not in node


async def test_a_resume_names_memory_no_running_job_has() -> None:
    """Resumed, the node hands its GPUs to the next job: memory left on one no running job
    has is named in the plan (the next job given it would run out)."""
    host, _clock = await slurm_node()
    await host.node_state("drain", SLURM_NODE, "gpudash: test drained")
    section = host.sim.owners[KIND]
    host.sim.owners = {KIND: {**section, "4118": {**section["4118"], "state": "CANCELLED"}}}
    plan = RESUME.plan(await host.sample(), Selection())
    text = "\n".join(plan.describe())
    assert "GPU 0 holds 96.0 GiB and no running job has it" in text
    assert "GPU 4 holds" not in text  # carol's job runs there


@pytest.mark.parametrize(("node", "why"), [
    (None, "is not a Slurm node"),
    ({"node": SLURM_NODE, "error": "scontrol not found (PATH, /usr/bin): Slurm unknown"},
     "Slurm did not say demo-gpu07's node state: scontrol not found"),
    ({"node": "gpu[01-04]", "node_state": "IDLE", "drain": False},
     "not a Slurm node name gpudash passes to scontrol: 'gpu[01-04]'"),
    ({"node": "-x", "node_state": "IDLE", "drain": False}, "not a Slurm node name"),
])
async def test_a_drain_is_refused_where_the_host_is_no_node_gpudash_can_name(
        node: dict[str, Any] | None, why: str) -> None:
    host, _clock = await slurm_node()
    snap = await host.sample()
    snap = replace(snap, owners={}) if node is None else with_node(snap, **node)
    for spec in (DRAIN, RESUME):
        said = spec.precheck(triage(snap), Selection())
        assert said is not None and why in said, said
        with pytest.raises(PlanError, match="Slurm|not a"):
            spec.plan(snap, Selection(reason="gpudash: x drained"))


async def test_read_only_or_a_login_that_may_not_act_is_refused() -> None:
    host, _clock = await slurm_node()
    snap = await host.sample()
    no = replace(snap, can_act=False, cannot_act_reason="not root: run with --sudo")
    assert DRAIN.precheck(triage(no), Selection()) == "not root: run with --sudo"
    with pytest.raises(PlanError, match="not root"):
        DRAIN.plan(no, Selection(reason="gpudash: x drained"))
    host.read_only = True
    assert DRAIN.precheck(triage(await host.sample()), Selection()) == "read-only mode"
    result = await host.node_state("drain", SLURM_NODE, "gpudash: x drained")
    assert result.returncode == 1 and "read-only" in result.output
    assert not (await host.sample()).facts(KIND, "").get("drain")


async def test_a_node_not_drained_has_nothing_to_resume() -> None:
    host, _clock = await slurm_node()
    said = RESUME.precheck(triage(await host.sample()), Selection())
    assert said == f"{SLURM_NODE} is not drained (MIXED): nothing to resume"


async def test_a_non_slurm_host_hides_both_keys_with_the_reason() -> None:
    snap = await DemoHost(clock=SteppedClock()).sample()
    for spec in (DRAIN, RESUME):
        assert spec.hidden_unless_fits
        assert "is not a Slurm node" in (spec.precheck(triage(snap), Selection()) or "")


def test_the_reason_is_one_line_and_says_gpudash_and_who() -> None:
    said = drain_reason("alice", "GPU 3\nECC\terrors ")
    assert said == "gpudash: alice drained: GPU 3 ECC errors"
    assert drain_reason("alice", None) == "gpudash: alice drained"
    assert drain_reason("alice", "  \n ") == "gpudash: alice drained"
    assert one_line("a\x1b[31mb\u2028c\x00") == "a [31mb c"


@pytest.mark.parametrize("bad", ["gpu[1-4]", "a,b", "-n", "a b", "x=y", "", "a\nb",
                                 "n;reboot", "$(id)", "a" * 65])
def test_only_one_node_name_is_ever_put_in_the_command(bad: str) -> None:
    with pytest.raises(ValueError):
        validate_node(bad)
    with pytest.raises(ValueError):
        node_argv("drain", bad, "gpudash: x drained")


def test_the_reason_goes_as_one_argument_quoted_for_scontrol_only() -> None:
    """scontrol takes off one leading and one trailing double quote (seen on 22.05): the
    reason goes wrapped in a pair, so its own quotes arrive as they are."""
    reason = 'gpudash: a drained: say "hi"'
    argv = node_argv("drain", "gpu01", reason)
    assert argv[-1] == f'Reason="{reason}"' and len(argv) == 5
    for bad in ("two\nlines", "", "x" * (REASON_MAX + 1)):
        with pytest.raises(ValueError):
            node_argv("drain", "gpu01", bad)
    with pytest.raises(ValueError):
        node_argv("resume", "gpu01", "a reason")  # a resume takes none
    with pytest.raises(ValueError):
        node_argv("down", "gpu01")


def test_a_reason_the_wire_cut_still_proves_the_drain() -> None:
    sent = "gpudash: alice drained: " + "x" * 120
    assert reason_matches(sent, sent)
    assert reason_matches(sent[:100] + "…", sent)
    assert not reason_matches("gpudash: bob drained: y", sent)
    assert not reason_matches(None, sent)


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_drain_dry_run_prints_the_plan_and_sends_nothing(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["drain", "--demo", "--reason", HOSTILE, "--dry-run"], capsys)
    assert code == 0, err
    assert out.startswith("Drain the Slurm node") and "--dry-run: nothing sent" in err
    assert "Reason=\"gpudash: " in out and "job 4116" in out
    code, out, err = run_cli(["drain", "--demo", "--reason", "ECC", "--dry-run", "--json"],
                             capsys)
    doc = json.loads(out)
    assert (code, doc["action"], doc["node"]) == (0, "drain", SLURM_NODE)
    assert doc["reason"].startswith("gpudash: ") and doc["reason"].endswith(" drained: ECC")


def test_cli_drain_acts_audits_and_exits_0_when_proven(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    code, out, err = run_cli(["drain", "--demo", "--reason", HOSTILE, "--yes", "--json"],
                             capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["verdict"] == "confirmed" and doc["action"] == "drain"
    [command] = doc["commands"]
    assert command["argv"][:4] == ["scontrol", "update", f"NodeName={SLURM_NODE}",
                                   "State=DRAIN"] and command["rc"] == 0
    records = [json.loads(line) for line in
               (tmp_path / "gpudash" / "audit-demo.jsonl").read_text().splitlines()]
    assert [r["record"] for r in records] == ["intent", "outcome"]
    assert records[0]["action"] == "drain" and command["argv"][4] in records[0]["plan"][1]
    assert records[1]["operator"] == records[0]["operator"]


def test_cli_resume_of_a_node_not_drained_is_a_plan_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["resume", "--demo", "--yes"], capsys)
    assert (code, out) == (2, "")
    assert "is not drained (MIXED): nothing to resume" in err


def test_cli_drain_refuses_a_reason_too_long_before_contacting_anything(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["drain", "no-such-host.invalid", "--reason", "x" * (WORDS_MAX + 1)])
    assert done.value.code == 2
    assert f"at most {WORDS_MAX}" in capsys.readouterr().err


async def test_ended_is_said_where_a_drain_has_no_node() -> None:
    plan = await prepare(Request(ActionKind.DRAIN, Selection(), reason="x"),
                         DemoHost(clock=SteppedClock()), "demo-gpu01", Ports())
    assert isinstance(plan, Ended) and "is not a Slurm node" in plan.why


def fake_scontrol(tmp_path: Path, rc: int = 0, said: str = "") -> Path:
    """An ``scontrol`` that records its argv, one NUL-ended argument each, and answers
    ``rc`` with ``said`` on stderr, as Slurm's does."""
    log = tmp_path / "argv"
    tool = tmp_path / "bin" / "scontrol"
    tool.parent.mkdir()
    tool.write_text(f"#!/bin/sh\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done >>{log}\n"
                    f"printf '%s\\n' '{said}' >&2\nexit {rc}\n")
    tool.chmod(0o755)
    return log


async def test_the_host_gets_the_reason_as_one_argument_never_a_shell_line(
        tmp_path: Path) -> None:
    """Through the real transport (a local host: its command runs as a process of its
    own), a hostile reason arrives as one argument, byte for byte."""
    from gpudash.transport.local import LocalSource

    log = fake_scontrol(tmp_path)
    path = f"{tmp_path / 'bin'}:{os.environ.get('PATH', '')}"
    reason = drain_reason("alice", HOSTILE)
    source = LocalSource("here", env={"PATH": path}, in_process=True)
    try:
        result = await source.control.node_state("drain", "node7", reason)
        assert result.returncode == 0, result.output
        argv = log.read_bytes().split(b"\0")[:-1]
        assert [a.decode() for a in argv] == [
            "update", "NodeName=node7", "State=DRAIN", f'Reason="{reason}"']
        refused = await source.control.node_state("drain", "gpu[1-4]", reason)
        assert refused.returncode == 2 and "not a Slurm node name" in refused.output
        assert len(log.read_bytes().split(b"\0")) == 5  # nothing more was run
    finally:
        await source.close()


async def test_slurms_refusal_is_the_commands_answer(tmp_path: Path) -> None:
    """A login Slurm does not take node updates from (not root, not SlurmUser): its own
    words come back as the command's failure; read-only, nothing is run at all."""
    from gpudash.transport.local import LocalSource

    log = fake_scontrol(tmp_path, rc=1, said="slurm_update error: Invalid user id")
    path = f"{tmp_path / 'bin'}:{os.environ.get('PATH', '')}"
    source = LocalSource("here", env={"PATH": path}, in_process=True)
    try:
        result = await source.control.node_state("resume", "node7", None)
        assert result.returncode == 1 and "Invalid user id" in result.output
    finally:
        await source.close()
    log.unlink()
    source = LocalSource("here", env={"PATH": path}, read_only=True, in_process=True)
    try:
        result = await source.control.node_state("resume", "node7", None)
        assert result.returncode == 1 and "read-only" in result.output
        assert not log.exists()
    finally:
        await source.close()


async def test_the_longest_words_the_cli_and_the_prompt_take_still_make_a_plan() -> None:
    """Seen: --reason (and the prompt) took 160 characters, the reason Slurm gets adds
    "gpudash: USER drained: ", and the plan then refused it as too long."""
    host, _clock = await slurm_node()
    words = "x" * WORDS_MAX
    plan = await prepare(Request(ActionKind.DRAIN, Selection(), reason=words), host,
                         host.name, Ports())
    assert isinstance(plan, ActionPlan), plan
    assert WORDS_MAX == 149 and len(drain_reason("u" * 32, words)) == REASON_MAX
