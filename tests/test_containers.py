"""Containers as owners: cgroup paths to container ids, the collector's batched inspect,
the wire, and the triage rules per owner kind (who brings a killed process back)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from test_collector import FakeGpus, fake_proc

from gpudash.collector.host.collector import HostCollector
from gpudash.collector.host.containers import ContainerReader, PodReader
from gpudash.collector.host.parsing import cgroup_facts, container_of_cgroup, unit_of_cgroup
from gpudash.collector.host.procs import ProcReader
from gpudash.collector.host.protocol import PROTOCOL, TEXT_MAX
from gpudash.collector.host.units import UnitReader
from gpudash.domain.model import Container, Gpu, HostSnapshot, Pod, Process
from gpudash.domain.owners import OwnerCapability, OwnerKind, owner_of
from gpudash.domain.triage import Flag, triage
from gpudash.protocol.source import ProtocolError
from gpudash.protocol.wire import SnapshotDecoder

CID = "3f4e1b2c" * 8
CID2 = "9a8b7c6d" * 8
POD = "1234abcd-0000-1111-2222-333344445555"


@pytest.mark.parametrize(
    ("cgroup", "ref"),
    [
        (f"/system.slice/docker-{CID}.scope", ("docker", CID, None)),
        (f"/docker/{CID}", ("docker", CID, None)),
        (f"/machine.slice/libpod-{CID}.scope", ("podman", CID, None)),
        (f"/machine.slice/libpod-conmon-{CID}.scope", None),  # podman's monitor, not it
        (f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
         f"{POD.replace('-', '_')}.slice/cri-containerd-{CID}.scope", ("cri", CID, POD)),
        (f"/kubepods.slice/kubepods-pod{POD.replace('-', '_')}.slice/crio-{CID}.scope",
         ("cri", CID, POD)),
        (f"/kubepods/burstable/pod{POD}/{CID}", ("cri", CID, POD)),
        ("/system.slice/vllm.service", None),
        ("/system.slice/docker.service", None),  # dockerd itself is a service
        ("/user.slice/user-1000.slice/session-4.scope", None),
        (None, None),
    ],
)
def test_container_ids_from_cgroup_paths(cgroup: str | None, ref: tuple | None) -> None:
    assert container_of_cgroup(cgroup) == ref


def inspect_json(cid: str, name: str, policy: str, count: int, status: str = "running",
                 pid: int = 100) -> dict:
    """The fields of ``docker inspect`` (Docker 20.10 .. 28) gpudash reads, as it prints them."""
    return {"Id": cid, "Name": "/" + name, "RestartCount": count,
            "State": {"Status": status, "Pid": pid if status == "running" else 0},
            "Config": {"Image": "vllm/vllm-openai:v0.11.0"},
            "HostConfig": {"RestartPolicy": {"Name": policy, "MaximumRetryCount": 0}}}


def fake_cli(tmp_path: Path, known: dict[str, dict], name: str = "docker") -> tuple[Path, Path]:
    """A docker CLI stand-in answering ``inspect`` like the real one: found ones on stdout
    as a JSON list, ``Error: No such container: ID`` on stderr and exit 1 for the others."""
    db = tmp_path / f"{name}.json"
    db.write_text(json.dumps(known))
    calls = tmp_path / f"{name}.calls"
    cli = tmp_path / name
    cli.write_text(
        "#!/usr/bin/env python3\n"
        "import json, sys\n"
        f"open({str(calls)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        f"known = json.load(open({str(db)!r}))\n"
        "ids = sys.argv[sys.argv.index('--') + 1:]\n"
        "print(json.dumps([known[i] for i in ids if i in known]))\n"
        "missing = [i for i in ids if i not in known]\n"
        "for i in missing: print('Error: No such container: ' + i, file=sys.stderr)\n"
        "sys.exit(1 if missing else 0)\n"
    )
    cli.chmod(cli.stat().st_mode | stat.S_IEXEC)
    return cli, calls


def host(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "stat").write_text("cpu 0\nbtime 1000\n")
    (tmp_path / "cgroup").mkdir()
    (tmp_path / "cgroup" / "cgroup.controllers").write_text("")
    (tmp_path / "run").mkdir()
    systemctl = tmp_path / "systemctl"
    systemctl.write_text("#!/bin/sh\nexit 0\n")
    systemctl.chmod(systemctl.stat().st_mode | stat.S_IEXEC)


def wire_containers(snap: dict) -> dict[str, dict]:
    """The containers a wire snapshot describes (``owners``, kind ``container``), by id,
    with the runtime and id their key says."""
    out = {}
    for key, facts in snap.get("owners", {}).get("container", {}).items():
        runtime, _, cid = key.partition("/")
        out[cid] = {"id": cid, "runtime": runtime, **facts}
    return out


def collector(tmp_path: Path, holders: dict, clis: dict[str, str | None]) -> HostCollector:
    return HostCollector(
        gpus=FakeGpus(holders),
        proc=ProcReader(str(tmp_path / "proc"), str(tmp_path / "cgroup")),
        units=UnitReader(str(tmp_path / "systemctl"), str(tmp_path / "run")),
        containers=ContainerReader(which=lambda name: clis.get(name)),
    )


def test_collector_inspects_only_the_containers_it_saw_in_one_batch(tmp_path: Path) -> None:
    host(tmp_path)
    fake_proc(tmp_path, 100, "vllm", f"/system.slice/docker-{CID}.scope")
    fake_proc(tmp_path, 200, "VLLM::Worker", f"/docker/{CID2}", ppid=1)
    fake_proc(tmp_path, 300, "python", "/system.slice/train.service")
    cli, calls = fake_cli(tmp_path, {CID: inspect_json(CID, "vllm", "always", 2)})
    c = collector(tmp_path, {100: {0: 5000}, 200: {0: 3000}, 300: {0: 100}},
                  {"docker": str(cli)})
    snap = c.sample()
    # described under its kind, keyed as its processes claim it (the key says id and runtime)
    assert snap["owners"]["container"][f"docker/{CID}"] == {
        "name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
        "state": "running", "restart_policy": "always", "restart_count": 2, "main_pid": 100,
        "health": "none", "init": "no"}  # docker run's defaults: no health check, no --init
    assert snap["owners"]["container"][f"docker/{CID2}"] == {"state": "removed"}
    assert "containers" not in snap and "pods" not in snap
    assert snap["errors"] == []
    lines = calls.read_text().splitlines()
    assert lines == [f"inspect --type container -- {CID} {CID2}"]
    c.sample()  # nothing changed: the cached answer serves
    assert len(calls.read_text().splitlines()) == 1
    decoded = SnapshotDecoder("h").feed(json.dumps({"k": "full", "s": snap}).encode())
    assert decoded.container("vllm") == Container(CID, "docker", "vllm",
                                                  "vllm/vllm-openai:v0.11.0", "running",
                                                  "always", 2, 100, "none", "no")
    assert decoded.container(CID2[:12]) is not None


def test_a_stopped_container_stays_reported_without_processes(tmp_path: Path) -> None:
    host(tmp_path)
    fake_proc(tmp_path, 100, "vllm", f"/system.slice/docker-{CID}.scope")
    cli, _calls = fake_cli(tmp_path, {CID: inspect_json(CID, "vllm", "always", 0)})
    c = collector(tmp_path, {100: {0: 5000}}, {"docker": str(cli)})
    assert wire_containers(c.sample())[CID]["state"] == "running"
    (tmp_path / "proc" / "100" / "stat").unlink()  # docker stop: its processes are gone
    c.gpus.holders.clear()  # type: ignore[attr-defined]
    (tmp_path / "docker.json").write_text(json.dumps(
        {CID: inspect_json(CID, "vllm", "no", 0, status="exited")}))
    later = c.sample(force_units=True)
    assert later["procs"] == {} and wire_containers(later)[CID]["state"] == "exited"
    assert wire_containers(later)[CID]["restart_policy"] == "no"
    assert "main_pid" not in wire_containers(later)[CID]


def test_no_container_cli_means_no_metadata_and_no_error(tmp_path: Path) -> None:
    host(tmp_path)
    fake_proc(tmp_path, 100, "vllm", f"/system.slice/docker-{CID}.scope")
    snap = collector(tmp_path, {100: {0: 5000}}, {}).sample()
    assert wire_containers(snap) == {} and snap["errors"] == []
    assert snap["procs"]["100"]["unit"] == f"docker-{CID}.scope"


def test_a_runtime_that_refuses_is_an_error_not_a_removed_container(tmp_path: Path) -> None:
    host(tmp_path)
    fake_proc(tmp_path, 100, "vllm", f"/system.slice/docker-{CID}.scope")
    cli = tmp_path / "docker"
    cli.write_text("#!/bin/sh\necho 'permission denied while trying to connect to the Docker "
                   "daemon socket at unix:///var/run/docker.sock' >&2\nexit 1\n")
    cli.chmod(0o755)
    snap = collector(tmp_path, {100: {0: 5000}}, {"docker": str(cli)}).sample()
    assert wire_containers(snap) == {}
    assert any("docker inspect: permission denied" in e for e in snap["errors"])


def test_podman_is_asked_with_podman(tmp_path: Path) -> None:
    host(tmp_path)
    fake_proc(tmp_path, 100, "vllm", f"/machine.slice/libpod-{CID}.scope")
    item = inspect_json(CID, "vllm", "", 0) | {"Name": "vllm"}  # podman: no slash, "" policy
    cli, calls = fake_cli(tmp_path, {CID: item}, "podman")
    snap = collector(tmp_path, {100: {0: 5000}}, {"podman": str(cli)}).sample()
    assert wire_containers(snap)[CID]["runtime"] == "podman"
    assert wire_containers(snap)[CID]["name"] == "vllm"
    assert wire_containers(snap)[CID]["restart_policy"] == "no"
    assert calls.read_text().startswith("inspect --type container -- ")


def test_the_wire_refuses_a_container_key_out_of_shape_and_cuts_names() -> None:
    def feed(containers: dict) -> HostSnapshot:
        s = {"v": PROTOCOL, "taken_at": 1.0, "owners": {"container": containers}}
        return SnapshotDecoder("h").feed(json.dumps({"k": "full", "s": s}).encode())

    for key in ("x;rm", CID, f"cri/{CID}", f"docker/{CID}/x"):
        with pytest.raises(ProtocolError, match="not an owner key"):
            feed({key: {}})
    with pytest.raises(ProtocolError, match="main_pid out of range"):
        feed({f"docker/{CID}": {"main_pid": 2**40}})  # a pid no kernel gives
    snap = feed({f"docker/{CID}": {"name": "n" * 5000}})
    (c,) = snap.containers
    assert (c.id, c.runtime) == (CID, "docker") and len(c.name or "") <= TEXT_MAX


# --- owners and triage ------------------------------------------------------------------


def proc(pid: int, ppid: int, cgroup: str, mem: int = 0, start: int = 10) -> Process:
    unit = unit_of_cgroup(cgroup)
    return Process(pid=pid, ppid=ppid, start_ticks=start, state="S", user="root", name="p",
                   cmdline="python3 -m vllm.entrypoints.openai.api_server", cgroup=cgroup,
                   unit=unit, gpu_memory_mib={0: mem} if mem else {},
                   **cgroup_facts(cgroup))  # as the collector parses it


def snap(procs: list[Process], containers: list[Container] = (), pods: list[Pod] = ()
         ) -> HostSnapshot:
    return HostSnapshot("h", 0.0, (Gpu(0, memory_total_mib=80000, memory_used_mib=40000),),
                        tuple(procs), (), containers=tuple(containers), pods=tuple(pods))


SCOPE = f"/system.slice/docker-{CID}.scope"


def vllm(**kw: object) -> Container:
    base: dict = dict(id=CID, runtime="docker", name="vllm", image="vllm/vllm-openai",
                      state="running", restart_policy="always", restart_count=0, main_pid=100)
    base.update(kw)
    return Container(**base)


def test_a_container_is_its_own_owner_and_says_docker_brings_it_back() -> None:
    s = snap([proc(100, 50, SCOPE, 30000), proc(101, 100, SCOPE, 10000)], [vllm()])
    t = triage(s)
    g = t.group("docker:vllm")
    assert g is not None and g.kind is OwnerKind.CONTAINER and g.owner is not None
    assert g.owner.respawner == "docker (restart policy always)"
    assert g.owner.capabilities == {OwnerCapability.STOP, OwnerCapability.DISABLE,
                                    OwnerCapability.REMOVE, OwnerCapability.RECLAIM,
                                    OwnerCapability.START}
    assert any("killing its main process makes docker restart it" in w for w in g.warnings)
    assert not any("Restart=" in w for w in g.warnings)  # no systemd advice for it
    assert t.group(f"docker-{CID}.scope") is None
    assert all(not f for f in t.flags.values())


def test_a_restarted_container_is_flagged_respawned() -> None:
    s = snap([proc(200, 50, SCOPE, 30000)], [vllm(restart_count=1, main_pid=200)])
    t = triage(s)
    assert Flag.RESPAWNED in t.flags[200]
    g = t.group("docker:vllm")
    assert g is not None and Flag.RESPAWNED in g.flags
    assert any("restarted this container 1 time(s)" in w for w in g.warnings)


@pytest.mark.parametrize("state", ["removed", "exited"])
def test_holders_of_a_gone_or_stopped_container_are_orphans(state: str) -> None:
    s = snap([proc(101, 1, SCOPE, 22000), proc(102, 1, SCOPE, 0)],
             [vllm(state=state, main_pid=None)])
    t = triage(s)
    assert [p.pid for p in t.orphans()] == [101]  # 102 holds nothing
    g = t.group("docker:vllm")
    assert g is not None and Flag.ORPHAN in g.flags
    assert any("1 orphaned process(es)" in w for w in g.warnings)


def test_a_holder_that_escaped_to_pid_1_from_a_running_container_is_an_orphan() -> None:
    s = snap([proc(100, 50, SCOPE, 100), proc(150, 1, SCOPE, 22000)], [vllm()])
    assert [p.pid for p in triage(s).orphans()] == [150]


def test_a_container_without_metadata_is_still_a_container() -> None:
    s = snap([proc(100, 50, f"/docker/{CID}", 30000)])
    t = triage(s)
    g = t.group(f"docker:{CID[:12]}")
    assert g is not None and g.kind is OwnerKind.CONTAINER and g.owner is not None
    assert not g.owner.capabilities
    assert "no docker CLI" in g.owner.unable(OwnerCapability.STOP)


def test_a_kubernetes_pod_offers_no_action_and_says_the_kubelet_restarts_it() -> None:
    cg = (f"/kubepods.slice/kubepods-pod{POD.replace('-', '_')}.slice/"
          f"cri-containerd-{CID}.scope")
    s = snap([proc(100, 50, cg, 30000)], pods=[Pod(POD, "ml", "vllm-0")])
    t = triage(s)
    g = t.group("pod:ml/vllm-0")
    assert g is not None and g.kind is OwnerKind.POD and g.owner is not None
    assert not g.owner.capabilities and g.owner.respawner == "the kubelet"
    why = g.owner.unable(OwnerCapability.STOP)
    assert "the kubelet restarts its containers" in why
    assert "kubectl -n ml delete pod vllm-0" in why and "scale" in why
    no_crictl = owner_of(s.processes[0], snap(list(s.processes)))
    assert no_crictl.key == f"pod:{POD}"


def test_a_stopped_container_without_processes_stays_in_view() -> None:
    t = triage(snap([], [vllm(state="exited", restart_policy="no", main_pid=None)]))
    g = t.group("docker:vllm")
    assert g is not None and g.total_gpu_memory_mib == 0 and not g.roots


def test_podman_cannot_turn_its_restart_policy_off_here() -> None:
    s = snap([proc(100, 50, f"/machine.slice/libpod-{CID}.scope", 30000)],
             [vllm(runtime="podman")])
    g = triage(s).group("podman:vllm")
    assert g is not None and g.owner is not None
    assert OwnerCapability.DISABLE not in g.owner.capabilities
    assert "not supported" in g.owner.unable(OwnerCapability.DISABLE)


def test_pods_get_namespace_and_name_where_crictl_answers(tmp_path: Path) -> None:
    host(tmp_path)
    cg = (f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
          f"{POD.replace('-', '_')}.slice/cri-containerd-{CID}.scope")
    fake_proc(tmp_path, 100, "vllm", cg)
    crictl = tmp_path / "crictl"
    crictl.write_text("#!/bin/sh\ncat <<'J'\n" + json.dumps({"items": [
        {"id": "s1", "metadata": {"name": "vllm-0", "uid": POD, "namespace": "ml"}},
        {"id": "s2", "metadata": {"name": "other", "uid": "bad uid;", "namespace": "x"}},
    ]}) + "\nJ\n")
    crictl.chmod(0o755)
    c = collector(tmp_path, {100: {0: 5000}}, {})
    c.pods = PodReader(which=lambda name: str(crictl) if name == "crictl" else None)
    snap = c.sample()
    assert snap["owners"]["pod"] == {POD: {"namespace": "ml", "name": "vllm-0"}}
    assert wire_containers(snap) == {}  # the kubelet's containers are not docker's to inspect
    decoded = SnapshotDecoder("h").feed(json.dumps({"k": "full", "s": snap}).encode())
    g = triage(decoded).group("pod:ml/vllm-0")
    assert g is not None and g.kind is OwnerKind.POD
    c.pods = PodReader(which=lambda name: None)  # no crictl: the UID only
    assert c.sample(force_units=True)["owners"]["pod"] == {POD: {}}
