"""The wire's generic owner section: the facts of kinds with no section of their own (a
Slurm job's), by kind and key, and a process's claim on one. The host is untrusted: who
owns what is decided on these, so what is out of shape is refused, not passed on."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_wire import full, good, patch

from gpudash.collector.host.protocol import MAX_FACT_LIST, MAX_FACTS, MAX_OWNERS, TEXT_MAX
from gpudash.protocol.source import ProtocolError
from gpudash.protocol.wire import SnapshotDecoder

JOB = "slurm job"


def with_job(**facts: Any) -> dict[str, Any]:
    state = good()
    state["procs"]["100"]["claim"] = f"{JOB}:42"
    state["owners"] = {JOB: {"42": {"user": "alice", "gpus": [0, 1], "running": True,
                                    **facts},
                             "": {"node_state": "mixed"}}}
    return state


def test_facts_and_claims_arrive_as_the_model_holds_them() -> None:
    snap = SnapshotDecoder("h").feed(full(with_job(name="a [b] \x1b[31m")))
    assert snap.facts(JOB, "42") == {"user": "alice", "gpus": (0, 1), "running": True,
                                     "name": "a [b] \x1b[31m"}
    assert snap.facts(JOB, "") == {"node_state": "mixed"}
    assert snap.facts(JOB, "7") == {} and snap.facts("other", "42") == {}
    assert snap.process(100).claimed == (JOB, "42")  # type: ignore[union-attr]
    assert snap.process(101).claimed is None  # type: ignore[union-attr]


def test_long_text_is_cut_with_the_collectors_mark() -> None:
    snap = SnapshotDecoder("h").feed(full(with_job(name="x" * 5000)))
    name = snap.facts(JOB, "42")["name"]
    assert isinstance(name, str) and len(name) == TEXT_MAX and name.endswith("[truncated]")


@pytest.mark.parametrize(("owners", "said"), [
    ({"cron job": {"1": {}}}, "unknown owner kind"),
    ({JOB: {"4 2": {}}}, "not an owner key"),
    ({JOB: {"../x": {}}}, "not an owner key"),
    ({JOB: {"42": {"Bad Name": 1}}}, "not a fact name"),
    ({JOB: {"42": {"gpus": [0, "1"]}}}, "list of"),
    ({JOB: {"42": {"gpus": list(range(MAX_FACT_LIST + 1))}}}, "list of"),
    ({JOB: {"42": {"nested": {"a": 1}}}}, "expected text"),
    ({JOB: {"42": {"big": 2**60}}}, "out of range"),
    ({JOB: {str(i): {} for i in range(MAX_OWNERS + 1)}}, "owners"),
    ({JOB: {"42": {f"f{i}": 1 for i in range(MAX_FACTS + 1)}}}, "facts"),
    ({JOB: []}, "owners"),
    ([], "expected an object"),
])
def test_what_is_out_of_shape_is_refused(owners: object, said: str) -> None:
    state = good()
    state["owners"] = owners
    with pytest.raises(ProtocolError, match=said):
        SnapshotDecoder("h").feed(full(state))


@pytest.mark.parametrize("claim", ["cron job:1", "slurm job:4 2", "slurm job", 42])
def test_a_claim_of_an_unknown_kind_or_key_is_refused(claim: object) -> None:
    state = good()
    state["procs"]["100"]["claim"] = claim
    with pytest.raises(ProtocolError, match="claim"):
        SnapshotDecoder("h").feed(full(state))


def test_a_change_of_the_facts_is_a_change_of_who_owns_what() -> None:
    decoder = SnapshotDecoder("h")
    first = decoder.feed(full(with_job()))
    same = decoder.feed(patch({"cpu_pct": 13.0}))
    assert not same.changes.structure
    assert same.owners is first.owners  # not decoded again: the patch did not touch it
    ended = decoder.feed(patch({"owners": {JOB: {"42": {"running": False}}}}))
    assert ended.changes.structure
    assert ended.facts(JOB, "42")["running"] is False


def test_a_bad_patch_leaves_the_facts_as_they_were() -> None:
    decoder = SnapshotDecoder("h")
    decoder.feed(full(with_job()))
    with pytest.raises(ProtocolError):
        decoder.feed(patch({"owners": {JOB: {"42": {"gpus": [0, -1]}}}}))
    again = decoder.feed(patch({"cpu_pct": 14.0}))
    assert again.facts(JOB, "42")["gpus"] == (0, 1)
    assert json.dumps(list(again.facts(JOB, "42")))  # plain names
