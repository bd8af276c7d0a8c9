"""What the collector now tells of a process's owner and lineage (issue 17): its process
group, what its cgroup says (container, pod, a user's own systemd), its live parents and
group leader, why a process the driver lists cannot be read, and that another user's
rootless container is never asked of the host's own runtime."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from test_collector import FakeGpus, fake_proc
from test_containers import collector, fake_cli, host, inspect_json, wire_containers

from gpudash.collector.host.collector import HostCollector
from gpudash.collector.host.containers import PodReader
from gpudash.collector.host.loop import Emitter, _command
from gpudash.collector.host.parsing import cgroup_facts
from gpudash.collector.host.procfs import in_child_pid_namespace, proc_hides_pids
from gpudash.collector.host.procs import ProcReader
from gpudash.collector.host.units import UnitReader
from gpudash.domain.model import Gpu, HostSnapshot, Pod, Process
from gpudash.domain.owners import OwnerCapability, OwnerKind, container_members, owner_of
from gpudash.domain.triage import Flag, triage
from gpudash.engine import SPECS, ActionKind, Signal, plan_action, selection_for
from gpudash.engine.verdict import explain
from gpudash.protocol.wire import SnapshotDecoder

CID = "ab" * 32


def test_a_holders_parent_and_group_leader_are_listed_with_its_group(tmp_path: Path) -> None:
    # A real tree: sh leads its own session and group; its child holds "GPU memory".
    leader = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    assert leader.stdout is not None
    child = int(leader.stdout.readline())
    c = HostCollector(gpus=FakeGpus({child: {0: 100}}), proc=ProcReader(),
                  units=UnitReader("systemctl", str(tmp_path / "no-systemd")))
    try:
        snap = c.sample()
        assert snap["procs"][str(child)]["pgid"] == leader.pid
        assert snap["procs"][str(leader.pid)]["pgid"] == leader.pid  # listed: it is alive
        os.kill(leader.pid, signal.SIGKILL)
        leader.wait()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            snap = c.sample(force_units=True)
            if str(leader.pid) not in snap["procs"]:
                break
            time.sleep(0.05)
        assert str(leader.pid) not in snap["procs"]  # gone: its group lost its leader
        assert snap["procs"][str(child)]["pgid"] == leader.pid
    finally:
        os.kill(child, signal.SIGKILL)
        leader.kill()
        c.proc.close()


def test_a_listed_process_that_is_gone_says_so(tmp_path: Path) -> None:
    host(tmp_path)
    snap = collector(tmp_path, {4242: {0: 700}}, {}).sample()
    assert snap["procs"]["4242"] == {"pid": 4242, "gpu_memory_mib": {"0": 700},
                                     "unreadable": "gone"}
    decoded = SnapshotDecoder("h").feed(json.dumps({"k": "full", "s": snap}).encode())
    assert Flag.UNREADABLE in triage(decoded).flags[4242]


def test_hidepid_and_child_pid_namespaces_are_recognised(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    line = "23 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc {}\n"
    (proc / "self" / "mountinfo").write_text(line.format("rw,hidepid=invisible"))
    (proc / "self" / "status").write_text("Name:\tx\nNSpid:\t4242\t17\n")
    assert proc_hides_pids(str(proc)) and in_child_pid_namespace(str(proc))
    (proc / "self" / "mountinfo").write_text(line.format("rw"))
    (proc / "self" / "status").write_text("Name:\tx\nNSpid:\t4242\n")
    assert not proc_hides_pids(str(proc)) and not in_child_pid_namespace(str(proc))
    # and this machine's own /proc, read for real
    assert in_child_pid_namespace() is False


def test_in_a_child_pid_namespace_the_drivers_pids_are_not_read_as_ours(tmp_path: Path
                                                                        ) -> None:
    host(tmp_path)
    fake_proc(tmp_path, 4242, "bash", "/", cmdline="an unrelated process of this namespace")
    c = collector(tmp_path, {4242: {0: 700}}, {})
    c.proc.nested = True  # as read from /proc/self/status in a container
    assert c.sample()["procs"]["4242"]["unreadable"] == "namespace"


def test_alices_rootless_container_is_not_asked_of_roots_podman(tmp_path: Path) -> None:
    host(tmp_path)
    rootless = ("/user.slice/user-1000.slice/user@1000.service/user.slice/"
                f"libpod-{CID}.scope/container")
    fake_proc(tmp_path, 4242, "python", rootless)
    fake_proc(tmp_path, 100, "vllm", f"/machine.slice/libpod-{'cd' * 32}.scope", ppid=90)
    cli, calls = fake_cli(tmp_path, {"cd" * 32: inspect_json("cd" * 32, "vllm", "", 0)
                                     | {"Name": "vllm"}}, "podman")
    snap = collector(tmp_path, {4242: {0: 8000}, 100: {0: 100}}, {"podman": str(cli)}).sample()
    assert CID not in calls.read_text()  # root's store would say "no such container"
    assert CID not in wire_containers(snap)
    assert snap["procs"]["4242"]["user_uid"] == 1000
    assert snap["procs"]["4242"]["claim"] == f"container:podman/{CID}"
    decoded = SnapshotDecoder("h").feed(json.dumps({"k": "full", "s": snap}).encode())
    t = triage(decoded)
    assert t.orphans() == ()
    g = t.group_of(4242)
    assert g is not None and g.owner is not None and g.owner.user_uid == 1000


def test_the_cgroup_facts_of_each_owner_kind() -> None:
    facts = cgroup_facts
    assert facts(f"/system.slice/docker-{CID}.scope") == {"claim": f"container:docker/{CID}"}
    assert facts(f"/machine.slice/libpod-{CID}.scope") == {"claim": f"container:podman/{CID}"}
    # a pod's process claims the pod (the owner), not the container in it
    assert facts("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0a1b2c3d_"
                 f"4e5f_6789_abcd_ef0123456789.slice/cri-containerd-{CID}.scope") == {
        "claim": "pod:0a1b2c3d-4e5f-6789-abcd-ef0123456789"}
    assert facts("/kubepods/besteffort/pod0a1b2c3d-4e5f-6789-abcd-ef0123456789") == {
        "claim": "pod:0a1b2c3d-4e5f-6789-abcd-ef0123456789"}  # the pod's own cgroup
    assert facts("/user.slice/user-1001.slice/user@1001.service/app.slice/jupyter.service") == {
        "user_uid": 1001, "user_unit": "jupyter.service"}
    assert facts("/user.slice/user-1001.slice/session-4.scope") == {}
    assert facts("/system.slice/vllm.service") == {} and facts(None) == {}


def test_a_signalled_process_is_listed_until_it_is_gone(tmp_path: Path) -> None:
    """An orphaned VLLM::EngineCore holds no GPU memory itself: once its worker was gone
    it was listed no more, and the engine took "not listed" for "exited" (a reap left a
    live engine behind, seen on the lab's real vLLM). Signalled on gpudash's request, a
    process now stays listed until it is gone."""
    sleeper = subprocess.Popen(["sleep", "60"])
    c = HostCollector(gpus=FakeGpus({}), proc=ProcReader(),
                  units=UnitReader("systemctl", str(tmp_path / "no-systemd")))
    try:
        start = c.proc.start_ticks(sleeper.pid)
        assert str(sleeper.pid) not in c.sample()["procs"]  # nothing makes it relevant
        reply = _command(json.dumps({"op": "signal", "id": 1, "pid": sleeper.pid,
                                              "start": start, "sig": signal.SIGCONT}).encode(),
                                  c, Emitter(None))
        assert reply is not None and reply["outcome"] == "sent"
        assert c.sample()["procs"][str(sleeper.pid)]["start_ticks"] == start
        sleeper.kill()
        sleeper.wait()
        assert str(sleeper.pid) not in c.sample()["procs"] and c.signalled == {}
    finally:
        sleeper.kill()
        c.proc.close()


# --- a user's own subtree is theirs, whatever its cgroups are named (issue 29, item 10) ---

POD = "0a1b2c3d-4e5f-6789-abcd-ef0123456789"
POD_SLICE = f"kubepods-besteffort-pod{POD.replace('-', '_')}.slice"
REAL_POD = f"/kubepods.slice/kubepods-besteffort.slice/{POD_SLICE}/cri-containerd-{'cd' * 32}.scope"
# systemd delegates everything under user@1000.service to uid 1000: any name can be made
ALICE = "/user.slice/user-1000.slice/user@1000.service/app.slice/"


def crictl_knowing(tmp_path: Path) -> tuple[Path, Path]:
    """A ``crictl`` answering ``pods -o json`` with the real pod ``prod/llm-serving-7d9f``,
    and the file its calls are logged in."""
    calls = tmp_path / "crictl.calls"
    crictl = tmp_path / "crictl"
    crictl.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\ncat <<'J'\n" + json.dumps({"items": [
        {"id": "s1", "metadata": {"name": "llm-serving-7d9f", "uid": POD, "namespace": "prod"}},
    ]}) + "\nJ\n")
    crictl.chmod(0o755)
    return crictl, calls


def no_pod_word(*texts: str) -> None:
    for text in texts:
        low = text.lower()
        assert "kubectl" not in low and "pod" not in low and "llm-serving" not in low, text


def test_a_users_cgroup_named_like_a_kubelet_pod_is_theirs_not_the_pod(tmp_path: Path) -> None:
    """Seen: alice's own ``.../app.slice/kubepods-besteffort-pod<uid>.slice/cri-containerd-
    <id>.scope`` was the real pod ``prod/llm-serving-7d9f`` (crictl's name for the UID),
    with the advice to delete it."""
    host(tmp_path)
    fake_proc(tmp_path, 100, "vllm", REAL_POD, ppid=90)  # its shim's child
    fake_proc(tmp_path, 4242, "python", f"{ALICE}{POD_SLICE}/cri-containerd-{CID}.scope")
    crictl, calls = crictl_knowing(tmp_path)
    c = collector(tmp_path, {100: {0: 30000}, 4242: {0: 8000}}, {})
    c.pods = PodReader(which=lambda name: str(crictl) if name == "crictl" else None)
    snap = c.sample()
    assert snap["procs"]["100"]["claim"] == "pod:" + POD  # the kubelet's pod is still a pod
    assert not snap["procs"]["4242"]["claim"].startswith("pod:")
    assert snap["procs"]["4242"]["user_uid"] == 1000
    decoded = SnapshotDecoder("h").feed(json.dumps({"k": "full", "s": snap}).encode())
    t = triage(decoded)
    real = t.group_of(100)
    assert real is not None and real.key == "pod:prod/llm-serving-7d9f"
    g = t.group_of(4242)
    assert g is not None and g.owner is not None and g is not real
    assert g.kind is not OwnerKind.POD and g.owner.user_uid == 1000 and g.owner.pod is None
    assert not g.owner.capabilities
    no_pod_word(g.key, g.owner.describe(), *g.warnings,
                *(g.owner.unable(cap) for cap in OwnerCapability))
    sel = selection_for(t, g.key, 4242)
    assert sel.owner is None
    for spec in SPECS.values():  # what each action says of it in the dashboard and CLI
        no_pod_word(spec.precheck(t, sel) or "")
    assert t.orphans() == ()


def test_crictl_is_not_asked_about_a_pod_named_in_a_users_subtree(tmp_path: Path) -> None:
    host(tmp_path)
    fake_proc(tmp_path, 4242, "python", f"{ALICE}{POD_SLICE}/cri-containerd-{CID}.scope")
    crictl, calls = crictl_knowing(tmp_path)
    c = collector(tmp_path, {4242: {0: 8000}}, {})
    c.pods = PodReader(which=lambda name: str(crictl) if name == "crictl" else None)
    snap = c.sample(force_units=True)
    assert "pod" not in snap.get("owners", {}) and not calls.exists()


def test_the_operator_side_takes_no_pod_from_a_users_subtree() -> None:
    """What a host (an older collector, the shell fallback) says is held to the same rule:
    a process under user@UID.service is never a pod's, even with a pod UID beside it."""
    p = Process(4242, ppid=1, user="alice", name="python", unit="user@1000.service",
                cgroup=f"{ALICE}{POD_SLICE}/cri-containerd-{CID}.scope",
                gpu_memory_mib={0: 8000}, claim="pod:" + POD, user_uid=1000)
    snap = HostSnapshot("h", 0.0, (Gpu(0, memory_total_mib=80000),), (p,), (),
                        pods=(Pod(POD, "prod", "llm-serving-7d9f"),))
    owner = owner_of(p, snap)
    assert owner.kind is not OwnerKind.POD and owner.user_uid == 1000 and owner.pod is None
    no_pod_word(owner.key, owner.describe(), *(owner.unable(c) for c in OwnerCapability))


def test_a_users_cgroup_named_like_a_host_container_is_not_one_of_its_members(
        tmp_path: Path) -> None:
    """alice names her cgroup ``docker-<id of root's vllm container>.scope``: she must not
    become part of that container (its reclaim would pin and signal her process)."""
    vllm_id = "ef" * 32
    host(tmp_path)
    fake_proc(tmp_path, 100, "vllm", f"/system.slice/docker-{vllm_id}.scope", ppid=90)
    fake_proc(tmp_path, 4242, "python", f"{ALICE}docker-{vllm_id}.scope")
    cli, _calls = fake_cli(tmp_path, {vllm_id: inspect_json(vllm_id, "vllm", "always", 0)})
    snap = collector(tmp_path, {100: {0: 30000}, 4242: {0: 8000}},
                     {"docker": str(cli)}).sample()
    decoded = SnapshotDecoder("h").feed(json.dumps({"k": "full", "s": snap}).encode())
    vllm = decoded.container("vllm")
    assert vllm is not None
    assert [p.pid for p in container_members(decoded, vllm)] == [100]
    t = triage(decoded)
    g = t.group_of(4242)
    assert g is not None and g.key != "docker:vllm" and g.owner is not None
    assert g.owner.user_uid == 1000 and g.owner.container is None
    plan = plan_action(decoded, ActionKind.RECLAIM, container="vllm")
    pinned = {s.target.pid for s in plan.steps if isinstance(s, Signal)}
    assert pinned == {100}
    # her process started after the plan was made: what is left on GPU 0 afterwards is
    # not called the container's new process
    later = dataclasses.replace(plan, untouched=())
    leftovers = [x for x in explain(later, decoded, [0]) if x.pid == 4242]
    assert leftovers and all("container" not in x.reason for x in leftovers)
