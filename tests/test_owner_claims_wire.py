"""Every owner kind rides the wire one way: a process's ``claim`` (``KIND:KEY``) names its
owner, and the snapshot's ``owners`` says what the host knows of it, by kind and key.
Containers and pods once had typed fields of their own (``container_runtime``,
``container_id``, ``pod_uid``) on the collector's process record and the decoder's
``Process``, and sections of their own (``containers``, ``pods``); a kind with fields of
its own is a kind every layer has to know by name. These tests fail when one comes back.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from test_collector import fake_proc
from test_containers import collector, fake_cli, host, inspect_json

from gpudash.collector.host.protocol import OWNER_KINDS, PROC_KEYS, PROTOCOL, SNAPSHOT_KEYS
from gpudash.domain.model import Process
from gpudash.domain.owners import OwnerKind
from gpudash.domain.triage import triage
from gpudash.protocol.source import ProtocolError
from gpudash.protocol.wire import SnapshotDecoder

CID = "3f4e1b2c" * 8
CID2 = "9a8b7c6d" * 8
POD = "1234abcd-0000-1111-2222-333344445555"
POD_CGROUP = (f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
              f"{POD.replace('-', '_')}.slice/cri-containerd-{CID2}.scope")
# a key of a process record that belongs to one kind: what these tests refuse
KIND_WORDS = ("container", "pod", "slurm", "job", *(k.replace(" ", "_") for k in OWNER_KINDS))


def kind_fields(names: object) -> list[str]:
    return [n for n in names if any(w in n for w in KIND_WORDS)]  # type: ignore[attr-defined]


def test_no_process_key_or_field_belongs_to_one_owner_kind() -> None:
    assert kind_fields(PROC_KEYS) == []
    assert kind_fields(f.name for f in dataclasses.fields(Process)) == []
    assert kind_fields(SNAPSHOT_KEYS) == []  # no section of one kind: "owners" has them all


def test_the_collectors_process_records_claim_their_container_and_pod(tmp_path: Path) -> None:
    host(tmp_path)
    fake_proc(tmp_path, 100, "vllm", f"/system.slice/docker-{CID}.scope")
    fake_proc(tmp_path, 200, "python", POD_CGROUP)
    fake_proc(tmp_path, 300, "llama", f"/machine.slice/libpod-{CID2}.scope")
    cli, _ = fake_cli(tmp_path, {CID: inspect_json(CID, "vllm", "always", 0)})
    snap = collector(tmp_path, {100: {0: 5000}, 200: {0: 3000}, 300: {0: 1000}},
                     {"docker": str(cli)}).sample()
    assert kind_fields(snap) == [] and set(snap["owners"]) == {"container", "pod"}
    assert set(snap["owners"]["container"]) == {f"docker/{CID}"}  # podman: no CLI here
    procs = snap["procs"]
    for pid, record in procs.items():
        assert set(record) <= set(PROC_KEYS), (pid, set(record) - set(PROC_KEYS))
        assert kind_fields(record) == [], (pid, record)
    assert procs["100"]["claim"] == f"container:docker/{CID}"
    assert procs["200"]["claim"] == f"pod:{POD}"
    assert procs["300"]["claim"] == f"container:podman/{CID2}"
    t = triage(SnapshotDecoder("h").feed(json.dumps({"k": "full", "s": snap}).encode()))
    kinds = {pid: g.kind for pid in (100, 200, 300) if (g := t.group_of(pid)) is not None}
    assert kinds == {100: OwnerKind.CONTAINER, 200: OwnerKind.POD, 300: OwnerKind.CONTAINER}
    g = t.group_of(100)
    assert g is not None and g.key == "docker:vllm" and g.owner is not None
    assert g.owner.container is not None and g.owner.container.restart_policy == "always"


def full(procs: dict[str, dict[str, object]], v: int = PROTOCOL) -> bytes:
    return json.dumps({"k": "full", "s": {
        "v": v, "host": "h", "taken_at": 1.0, "source": "nvml", "errors": [], "can_act": True,
        "gpus": {"0": {"index": 0}}, "procs": procs, "units": {}}}).encode()


def test_a_container_field_beside_no_claim_names_no_container() -> None:
    """A record that says ``container_id`` (what protocol 9 wrote) but claims nothing: the
    decoder reads no kind's field, so no container owns it."""
    decoded = SnapshotDecoder("h").feed(full({"7": {
        "pid": 7, "unit": f"docker-{CID}.scope", "gpu_memory_mib": {"0": 10},
        "container_runtime": "docker", "container_id": CID}}))
    (p,) = decoded.processes
    assert not hasattr(p, "container_id") and p.claim is None
    g = triage(decoded).group_of(7)
    assert g is not None and g.owner is not None and g.owner.claimed is None
    assert g.owner.rules.identity(g.owner).get("container_id") is None


@pytest.mark.parametrize("claim", [
    f"container:{CID}",  # no runtime: whose CLI would be asked?
    f"container:cri/{CID}",  # a pod's container is claimed as the pod
    f"container:docker/{CID.upper()}",
    "container:docker/abc",  # shorter than any runtime's id
    f"container:docker/{CID};rm",
    "pod:not a uid",
    f"pod:{POD}/{CID}",
    f"vm:{CID}",  # a kind gpudash does not know
])
def test_a_claim_out_of_its_kinds_shape_is_refused(claim: str) -> None:
    with pytest.raises(ProtocolError, match="claim"):
        SnapshotDecoder("h").feed(full({"7": {"pid": 7, "claim": claim}}))


def test_an_older_collector_that_wrote_container_fields_is_refused_by_its_version() -> None:
    """Protocol 9 named containers by fields of their own; this gpudash reads claims only,
    and says which protocol each side speaks (the collector is sent with gpudash)."""
    with pytest.raises(ProtocolError, match=f"collector speaks protocol {PROTOCOL - 1}, this "
                                            f"gpudash speaks {PROTOCOL}"):
        SnapshotDecoder("h").feed(full({"7": {
            "pid": 7, "container_runtime": "docker", "container_id": CID}}, v=PROTOCOL - 1))
