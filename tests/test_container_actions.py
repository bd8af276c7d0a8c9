"""A container-owned model on the demo host, driven through the engine as the dashboard and
the CLI do: the restart trap one layer up, reclaim with proof, orphans of a removed one,
and a Kubernetes pod that gpudash explains instead of touching."""

from __future__ import annotations

import json

import pytest
from support import stepped
from test_cli import gpudash
from test_containers import CID, POD, proc, snap, vllm

from gpudash.demo.host import EMBED_ID, EMBED_MIB, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.domain.model import Pod
from gpudash.domain.owners import OwnerRef
from gpudash.domain.triage import Flag, triage
from gpudash.engine import (
    SPECS,
    ActionKind,
    ExecOptions,
    PlanError,
    container_ref,
    execute,
    plan_action,
)
from gpudash.engine.actions import selection_for
from gpudash.transport.commands import container_argv, validate_container

FAST = ExecOptions(term_timeout=3.0, verify_timeout=30.0, poll=0.5, settle=3)
EMBED = "docker:vllm-embed"


@pytest.fixture
def demo() -> DemoHost:
    return DemoHost(clock=SteppedClock(), release_delay=1.0, containers=True)


async def test_kill_9_of_the_containers_main_is_restarted_by_docker(demo: DemoHost) -> None:
    before = await demo.sample()
    t = triage(before)
    g = t.group(EMBED)
    assert g is not None and g.owner is not None
    assert g.owner.respawner == "docker (restart policy always)"
    assert any("makes docker restart it" in w for w in g.warnings)
    c = before.container(EMBED_ID)
    assert c is not None and c.main_pid is not None
    plan = plan_action(before, ActionKind.KILL, pid=c.main_pid)
    assert any("docker will restart it" in n for n in plan.notes)
    assert not any("systemd" in n for n in plan.notes)
    report = await stepped(demo, execute(plan, demo, FAST))
    assert not report.confirmed
    assert "docker restarted container vllm-embed" in report.summary
    after = await demo.sample()
    c2 = after.container(EMBED_ID)
    assert c2 is not None and c2.restart_count == 1 and c2.main_pid not in (None, c.main_pid)
    t2 = triage(after)
    assert Flag.RESPAWNED in t2.flags[c2.main_pid]
    g2 = t2.group(EMBED)
    assert g2 is not None and Flag.RESPAWNED in g2.flags


async def test_reclaim_a_container_turns_its_policy_off_stops_it_and_proves_it(
    demo: DemoHost,
) -> None:
    before = await demo.sample()
    sel = selection_for(triage(before), EMBED, None)
    assert sel.owner == container_ref(EMBED_ID)
    spec = SPECS[ActionKind.RECLAIM]
    assert spec.precheck(triage(before), sel) is None
    plan = spec.plan(before, sel)
    text = "\n".join(plan.describe())
    assert "docker update --restart=no vllm-embed" in text
    assert "docker stop -t 10 vllm-embed" in text
    assert "systemctl" not in text
    assert text.index("update --restart=no") < text.index("docker stop")
    assert dict(plan.expected_free_mib) == {7: EMBED_MIB}
    report = await stepped(demo, execute(plan, demo, FAST))
    assert report.confirmed, report.summary
    assert [c.argv[:2] for c in report.commands] == [("docker", "update"), ("docker", "stop")]
    after = report.container_after
    assert after is not None and after.state == "exited" and after.restart_policy == "no"
    assert "docker container vllm-embed: exited, restart policy no" in "\n".join(
        report.describe())
    # a stopped container stays in view, and now only remove fits it
    g = triage(await demo.sample()).group(EMBED)
    assert g is not None and g.total_gpu_memory_mib == 0
    rm = SPECS[ActionKind.REMOVE].plan(await demo.sample(), sel)
    assert (await stepped(demo, execute(rm, demo, FAST))).confirmed
    assert (await demo.sample()).container(EMBED_ID) is None


async def test_remove_refuses_a_running_container_and_unit_verbs_refuse_none(
    demo: DemoHost,
) -> None:
    s = await demo.sample()
    t = triage(s)
    sel = selection_for(t, EMBED, None)
    assert "stop or reclaim it first" in (SPECS[ActionKind.REMOVE].precheck(t, sel) or "")
    with pytest.raises(PlanError, match="stop or reclaim it first"):
        SPECS[ActionKind.REMOVE].plan(s, sel)
    assert "already running: restart it instead" in (SPECS[ActionKind.START].precheck(t, sel) or "")
    assert "no boot setting" in (SPECS[ActionKind.ENABLE].precheck(t, sel) or "")
    # a service row: remove does not fit it, and is hidden rather than greyed
    svc = selection_for(t, "vllm-minimax-m25.service", None)
    assert SPECS[ActionKind.REMOVE].precheck(t, svc) == "select a stopped container"
    assert SPECS[ActionKind.REMOVE].hidden_unless_fits


async def test_holders_of_a_removed_container_are_orphans_and_reaped(demo: DemoHost) -> None:
    s = await demo.sample()
    c = s.container(EMBED_ID)
    assert c is not None
    # a worker that escaped the container's PID namespace (ppid 1) keeps its memory
    worker = demo.spawn(ppid=1, user="root", name="VLLM::Worker", cmdline="VLLM::Worker",
                        unit=f"docker-{EMBED_ID}.scope", gpu_memory_mib={6: 900}, age=100)
    stop = plan_action(await demo.sample(), ActionKind.STOP, container="vllm-embed")
    assert any("escaped" in n for n in stop.notes)
    await stepped(demo, execute(stop, demo, FAST))
    assert worker.pid in demo.processes  # docker stop ended the namespace, not it
    await demo.container("docker", "rm", EMBED_ID)
    t = triage(await demo.sample())
    assert [p.pid for p in t.orphans()] == [worker.pid]
    reap = plan_action(await demo.sample(), ActionKind.REAP)
    assert [x.pid for x in reap.targets] == [worker.pid]
    report = await stepped(demo, execute(reap, demo, FAST))
    assert report.confirmed, report.summary
    assert worker.pid not in demo.processes


def test_a_pod_offers_no_action_and_the_reason_says_what_to_do() -> None:
    cg = (f"/kubepods.slice/kubepods-pod{POD.replace('-', '_')}.slice/"
          f"cri-containerd-{CID}.scope")
    s = snap([proc(100, 50, cg, 30000)], pods=[Pod(POD, "ml", "vllm-0")])
    t = triage(s)
    sel = selection_for(t, "pod:ml/vllm-0", None)
    assert sel.owner == OwnerRef("pod", POD)
    for kind in (ActionKind.STOP, ActionKind.RECLAIM, ActionKind.DISABLE):
        why = SPECS[kind].precheck(t, sel) or ""
        assert "kubelet restarts" in why and "kubectl" in why
        with pytest.raises(PlanError, match="kubelet"):
            SPECS[kind].plan(s, sel)


def test_container_stop_of_a_stopped_container_sends_nothing_to_stop() -> None:
    s = snap([], [vllm(state="exited", restart_policy="always", main_pid=None)])
    plan = plan_action(s, ActionKind.RECLAIM, container="vllm")
    assert [c.verb for c in plan.commands] == ["no-restart"]  # policy off, nothing to stop


def test_container_commands_are_argv_lists_of_validated_words() -> None:
    assert container_argv("docker", "stop", "vllm", sudo=True, stop_timeout=10) == [
        "sudo", "-n", "docker", "stop", "-t", "10", "--", "vllm"]
    assert container_argv("docker", "no-restart", CID, sudo=False) == [
        "docker", "update", "--restart=no", "--", CID]
    assert container_argv("podman", "rm", "x", sudo=False) == ["podman", "rm", "--", "x"]
    for bad in ("-f", "--rm", "a b", "a;b", "", "x/../y", "$(id)", "\nx", "x" * 300):
        with pytest.raises(ValueError):
            validate_container(bad)
    with pytest.raises(ValueError, match="not supported"):
        container_argv("podman", "no-restart", "x", sudo=False)
    for runtime, verb in (("nerdctl", "stop"), ("docker", "kill"), ("docker", "exec")):
        with pytest.raises(ValueError):
            container_argv(runtime, verb, "x", sudo=False)


def test_cli_reclaim_container_on_the_demo_exits_0_with_proof() -> None:
    r = gpudash("reclaim", "--demo", "--container", "vllm-embed", "--yes", "--json",
                "--term-timeout", "3")
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    assert rec["confirmed"] is True
    assert any("docker stop -t 10 vllm-embed" in line for line in rec["plan"])
    assert [g["index"] for g in rec["gpus"]] == [7]
    after = rec["container_after"]
    assert (after["name"], after["state"], after["restart_policy"]) == (
        "vllm-embed", "exited", "no")


def test_cli_reclaim_takes_a_unit_or_a_container_not_both() -> None:
    r = gpudash("reclaim", "--demo", "--container", "x", "--unit", "y")
    assert r.returncode == 2 and "not allowed with" in r.stderr


def test_snapshot_json_has_owner_objects_with_capabilities() -> None:
    r = gpudash("snapshot", "--demo", "--json")
    assert r.returncode == 0, r.stderr
    (host,) = json.loads(r.stdout)["hosts"]
    owners = {o["key"]: o for o in host["owners"]}
    embed = owners[EMBED]
    assert embed["kind"] == "container" and embed["runtime"] == "docker"
    assert embed["container_id"] == EMBED_ID
    assert embed["capabilities"] == ["disable", "reclaim", "remove", "start", "stop"]
    assert embed["respawner"] == "docker (restart policy always)"
    assert embed["gpu_memory_mib"] == {"7": EMBED_MIB}
    (c,) = host["containers"]
    assert (c["name"], c["restart_policy"], c["restart_count"]) == ("vllm-embed", "always", 0)
    main = next(p for p in host["processes"] if p["pid"] == c["main_pid"])
    assert main["owner"] == EMBED
    svc = owners["vllm-minimax-m25.service"]
    assert svc["kind"] == "service" and "start" in svc["capabilities"]
    assert svc["respawner"] == "systemd (Restart=always)"
    kernel = next(p for p in host["processes"] if p["pid"] == 90211)
    assert owners[kernel["owner"]]["kind"] == "session"


def test_reclaiming_a_podman_container_stops_it_and_says_the_policy_stays() -> None:
    s = snap([proc(100, 50, f"/machine.slice/libpod-{CID}.scope", 30000)],
             [vllm(runtime="podman")])
    plan = plan_action(s, ActionKind.RECLAIM, container="vllm")
    assert [(c.runtime, c.verb) for c in plan.commands] == [("podman", "stop")]
    assert any("cannot turn a restart policy off" in n for n in plan.notes)
    assert [t.pid for t in plan.targets] == [100]
    with pytest.raises(PlanError, match="not supported"):
        plan_action(s, ActionKind.DISABLE, container="vllm")
