"""Starting and restarting a container, as the dashboard and the CLI do it: the restart
policy gpudash turned off put back, the fit checked first, and proof that it runs with
its memory back on its GPUs; and its log, ``docker logs``, read as a journal is."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from support import stepped
from test_cli import gpudash

from gpudash.demo.host import EMBED_ID, EMBED_MIB, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.domain.triage import triage
from gpudash.engine import SPECS, ActionKind, ExecOptions, PlanError, execute
from gpudash.engine.actions import selection_for
from gpudash.session import audit
from gpudash.session.controller import learn_from
from gpudash.session.lifecycle import Request, prepare
from gpudash.transport.commands import container_argv, container_logs_argv
from gpudash.transport.loglines import container_log_line

FAST = ExecOptions(term_timeout=3.0, verify_timeout=30.0, poll=0.5, settle=3)
EMBED = "docker:vllm-embed"


@pytest.fixture
def demo() -> DemoHost:
    return DemoHost(clock=SteppedClock(), release_delay=1.0, containers=True)


class NoPorts:
    asks = False

    async def confirm(self, plan: Any, lines: list[str]) -> bool | None:
        return True

    async def pick(self, *args: Any) -> None:
        return None


async def reclaimed(demo: DemoHost) -> None:
    """The container reclaimed with proof (policy off, stopped), audited as the CLI does."""
    s = await demo.sample()
    sel = selection_for(triage(s), EMBED, None)
    report = await stepped(demo, execute(SPECS[ActionKind.RECLAIM].plan(s, sel), demo, FAST))
    assert report.confirmed, report.summary
    audit.write(audit.outcome_record(report, "a1"), audit.audit_path(simulated=True))
    assert learn_from(report) is not None  # what it held: the next start's fit


async def test_restart_of_a_running_container_is_proven_running_with_its_memory_back(
    demo: DemoHost,
) -> None:
    s = await demo.sample()
    before = s.container(EMBED_ID)
    assert before is not None and before.main_pid is not None
    sel = selection_for(triage(s), EMBED, None)
    assert SPECS[ActionKind.RESTART].precheck(triage(s), sel) is None
    plan = SPECS[ActionKind.RESTART].plan(s, sel)
    text = "\n".join(plan.describe(10))
    assert "$ docker restart -t 10 vllm-embed" in text and "systemctl" not in text
    assert ("Ready when: http://127.0.0.1:8100/health answers 200 from vllm-embed's own "
            "listener.") in text
    given = SPECS[ActionKind.RESTART].plan(
        s, dataclasses.replace(sel, ready_url="http://127.0.0.1:8100/v1/models"))
    assert given.selection.ready_url == "http://127.0.0.1:8100/v1/models"  # --ready-url kept
    report = await stepped(demo, execute(plan, demo, FAST))
    assert report.confirmed, report.summary
    assert [c.argv[:2] for c in report.commands] == [("docker", "restart")]
    after = report.container_after
    assert after is not None and after.state == "running"
    assert after.main_pid not in (None, before.main_pid)
    assert after.restart_policy == "always"  # a restart leaves the policy as it is
    assert "memory back: GPU7 1.0 GiB" in report.summary
    told = "\n".join(report.describe())
    assert "  docker:vllm-embed: READY, memory back after" in told
    # its published port's /health, asked for the container's own listener
    assert "; http://127.0.0.1:8100/health -> 200" in told
    assert "vllm-embed ready after" in report.summary


async def test_start_after_a_reclaim_puts_the_policy_back_checks_the_fit_and_proves_it(
    demo: DemoHost,
) -> None:
    await reclaimed(demo)
    s = await demo.sample()
    c = s.container(EMBED_ID)
    assert c is not None and c.state == "exited" and c.restart_policy == "no"
    plan = await prepare(Request(ActionKind.START, selection_for(triage(s), EMBED, None)),
                         demo, demo.name, NoPorts())
    assert not isinstance(plan, type(None)) and hasattr(plan, "describe"), plan
    text = "\n".join(plan.describe(10))  # type: ignore[union-attr]
    assert text.index("docker update --restart=always") < text.index("docker start")
    assert "fits: up to 1.0 GiB per GPU on 1 GPU(s), learned when it last ran here" in text
    assert c.port == 8100  # published: its /health is part of the proof
    report = await stepped(demo, execute(plan, demo, FAST))  # type: ignore[arg-type]
    assert report.confirmed, report.summary
    assert report.serving is not None and report.serving.ready_status == 200
    assert "vllm-embed ready after" in report.summary
    after = (await demo.sample()).container(EMBED_ID)
    assert after is not None and after.state == "running" and after.restart_policy == "always"
    g = triage(await demo.sample()).group(EMBED)
    assert g is not None and g.total_gpu_memory_mib == EMBED_MIB


async def test_start_refuses_a_running_container_and_one_that_does_not_fit(
    demo: DemoHost,
) -> None:
    s = await demo.sample()
    sel = selection_for(triage(s), EMBED, None)
    with pytest.raises(PlanError, match="already running"):
        SPECS[ActionKind.START].plan(s, sel)
    await reclaimed(demo)
    s = await demo.sample()
    huge = dataclasses.replace(sel, footprint={7: 10 ** 9})
    assert SPECS[ActionKind.START].precheck(triage(s), sel) is None
    with pytest.raises(PlanError, match="does not fit .*GPU7: needs"):
        SPECS[ActionKind.START].plan(s, huge)
    forced = SPECS[ActionKind.START].plan(s, dataclasses.replace(huge, force=True))
    assert forced.fit[0].startswith("FORCED")


def test_container_verbs_and_logs_are_validated_before_any_argv_is_built() -> None:
    assert container_argv("docker", "start", "abc", sudo=False) == [
        "docker", "start", "--", "abc"]
    assert container_argv("docker", "restart", "abc", sudo=True, stop_timeout=5) == [
        "sudo", "-n", "docker", "restart", "-t", "5", "--", "abc"]
    assert container_argv("docker", "restart-policy", "abc", sudo=False,
                          policy="on-failure:3") == [
        "docker", "update", "--restart=on-failure:3", "--", "abc"]
    for bad in ("always --privileged", "", "no;rm", None):
        with pytest.raises(ValueError):
            container_argv("docker", "restart-policy", "abc", sudo=False, policy=bad)
    with pytest.raises(ValueError):
        container_argv("podman", "restart-policy", "abc", sudo=False, policy="always")
    assert container_logs_argv("podman", "abc", lines=200, follow=True) == [
        "podman", "logs", "--follow", "--tail", "200", "--timestamps", "--", "abc"]
    with pytest.raises(ValueError):
        container_logs_argv("docker", "--since=1h", lines=200, follow=True)
    with pytest.raises(ValueError):
        container_logs_argv("nerdctl", "abc", lines=200, follow=True)


def test_a_docker_logs_line_keeps_its_time_and_text_literally() -> None:
    line = container_log_line(b"2026-12-02T06:01:54.123456789Z INFO: [bold]up[/]\n",
                              "docker:c0ffee")
    assert line.message == "INFO: [bold]up[/]" and line.origin == "docker:c0ffee"
    assert line.time is not None and abs(line.time - 1796191314.123456789) < 1e-3
    plain = container_log_line(b"no stamp here\xff", "docker:c0ffee")
    assert plain.time is None and plain.message.startswith("no stamp here")


async def test_the_demo_container_logs_plausible_lines_with_times(demo: DemoHost) -> None:
    tail = [line async for line in demo.container_logs("docker", EMBED_ID, follow=False)]
    assert len(tail) == 200 and all(ln.time is not None for ln in tail)
    assert all("POST /v1/embeddings" in ln.message for ln in tail)  # serving for 90 min
    every = [line async for line in demo.container_logs("docker", EMBED_ID, lines=10000,
                                                        follow=False)]
    assert any("Uvicorn running on" in ln.message for ln in every)
    times = [ln.time for ln in every]
    assert times == sorted(times)


def test_cli_start_container_refuses_a_running_one_and_needs_unit_or_container() -> None:
    r = gpudash("start", "--demo", "--container", "vllm-embed", "--yes")
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "vllm-embed is already running" in r.stderr
    r = gpudash("start", "--demo", "--yes")
    assert r.returncode == 2 and "--unit --container" in r.stderr
    r = gpudash("start", "--demo", "--container", "a;b", "--yes")
    assert r.returncode == 2 and "not a container name" in r.stderr


async def test_a_start_is_not_ready_while_someone_elses_server_holds_its_port(
    demo: DemoHost,
) -> None:
    # issue 19, item 6: while vllm-embed was down, nobody's server bound its port 8100;
    # it answers 200, yet proves nothing for the container, and the verdict says whose it is
    from gpudash.protocol.shell_listener import ShellListener

    await reclaimed(demo)
    demo.sim.squatters[8100] = ShellListener(
        4242, "python3\n", "0::/user.slice/user-65534.slice/session-7.scope\n")
    s = await demo.sample()
    plan = await prepare(Request(ActionKind.START, selection_for(triage(s), EMBED, None)),
                         demo, demo.name, NoPorts())
    told: list[str] = []
    report = await stepped(demo, execute(plan, demo, dataclasses.replace(  # type: ignore[arg-type]
        FAST, serve_timeout=5.0), lambda p: told.append(p.message)))
    assert not report.confirmed
    # the progress (CLI lines, the dashboard's action panel) says whose port it is
    assert any("is not container" in m and "pid 4242 (python3" in m for m in told), told
    assert report.summary.startswith("vllm-embed NOT confirmed ready: "), report.summary
    assert (f"port 8100 is not container {EMBED_ID[:12]}'s: pid 4242 (python3, "
            "session-7.scope) listens on it") in report.summary
    assert report.serving is not None and report.serving.ready_status is None
    after = (await demo.sample()).container(EMBED_ID)
    assert after is not None and after.state == "running"  # it runs; it is not proven ready
