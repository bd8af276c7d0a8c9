"""What the collector now tells of a process's owner and lineage (issue 17): its process
group, what its cgroup says (container, pod, a user's own systemd), its live parents and
group leader, why a process the driver lists cannot be read, and that another user's
rootless container is never asked of the host's own runtime."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from test_collector import FakeGpus, fake_proc
from test_containers import collector, fake_cli, host, inspect_json

from gpudash.collector.host.collector import HostCollector
from gpudash.collector.host.loop import Emitter, _command
from gpudash.collector.host.parsing import cgroup_facts
from gpudash.collector.host.procfs import in_child_pid_namespace, proc_hides_pids
from gpudash.collector.host.procs import ProcReader
from gpudash.collector.host.units import UnitReader
from gpudash.domain.triage import Flag, triage
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
    assert CID not in snap["containers"]
    assert snap["procs"]["4242"]["user_uid"] == 1000
    assert snap["procs"]["4242"]["container_id"] == CID
    decoded = SnapshotDecoder("h").feed(json.dumps({"k": "full", "s": snap}).encode())
    t = triage(decoded)
    assert t.orphans() == ()
    g = t.group_of(4242)
    assert g is not None and g.owner is not None and g.owner.user_uid == 1000


def test_the_cgroup_facts_of_each_owner_kind() -> None:
    facts = cgroup_facts
    assert facts(f"/system.slice/docker-{CID}.scope") == {
        "container_runtime": "docker", "container_id": CID}
    assert facts("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0a1b2c3d_"
                 f"4e5f_6789_abcd_ef0123456789.slice/cri-containerd-{CID}.scope") == {
        "container_runtime": "cri", "container_id": CID,
        "pod_uid": "0a1b2c3d-4e5f-6789-abcd-ef0123456789"}
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
