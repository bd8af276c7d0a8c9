"""One pass per sample (issue 18): what changed is decided once, where the data enters
(the decoder, from the host's merge patch), carried with the snapshot, and the triage acts
on it: reused when nothing it rests on changed, its nodes refreshed when only the
processes' measurements did, computed again when the structure changed."""

from __future__ import annotations

import json
from typing import Any

from gpudash.collector.host.protocol import PROTOCOL
from gpudash.domain.model import EVERYTHING
from gpudash.domain.triage import retriage, triage
from gpudash.protocol.wire import SnapshotDecoder


def state() -> dict[str, Any]:
    return {
        "v": PROTOCOL, "host": "h", "taken_at": 1.7e9, "source": "nvml",
        "gpus": {str(i): {"index": i, "memory_total_mib": 81559, "memory_used_mib": 5000}
                 for i in range(2)},
        "procs": {
            "100": {"pid": 100, "ppid": 1, "start_ticks": 10, "name": "vllm", "state": "S",
                    "cmdline": "vllm serve m", "unit": "v.service", "cpu_pct": 1.0},
            "101": {"pid": 101, "ppid": 100, "start_ticks": 11, "name": "w", "state": "S",
                    "cmdline": "VLLM::EngineCore", "unit": "v.service", "cpu_pct": 50.0,
                    "gpu_memory_mib": {"0": 5000}},
        },
        "units": {"v.service": {"name": "v.service", "active_state": "active",
                                "main_pid": 100}},
    }


def full(s: dict[str, Any]) -> bytes:
    return json.dumps({"k": "full", "s": s}).encode()


def patch(p: dict[str, Any]) -> bytes:
    return json.dumps({"k": "patch", "s": p}).encode()


def test_the_decoder_says_what_a_patch_changed() -> None:
    d = SnapshotDecoder("h")
    first = d.feed(full(state()))
    assert first.changes is EVERYTHING  # nothing before it: everything may have changed
    quiet = d.feed(patch({"taken_at": 1.7e9 + 1}))
    assert quiet.changes.nothing and quiet.changes.processes == frozenset()
    cpu = d.feed(patch({"taken_at": 1.7e9 + 2, "procs": {"101": {"cpu_pct": 75.0}}}))
    assert cpu.changes.processes == {101} and not cpu.changes.structure
    gpu = d.feed(patch({"gpus": {"1": {"memory_used_mib": 6000}}}))
    assert gpu.changes.gpus == {1} and not gpu.changes.structure
    moved = d.feed(patch({"procs": {"101": {"ppid": 1}}}))
    assert moved.changes.processes == {101} and moved.changes.structure
    zombie = d.feed(patch({"procs": {"101": {"state": "Z"}}}))
    assert zombie.changes.structure  # entering Z is a flag, not a measurement
    gone = d.feed(patch({"procs": {"100": None}}))
    assert gone.changes.processes == {100} and gone.changes.structure
    unit = d.feed(patch({"units": {"v.service": {"active_state": "inactive"}}}))
    assert unit.changes.units == {"v.service"} and unit.changes.structure


def test_the_triage_is_reused_refreshed_or_computed_again_as_the_changes_say() -> None:
    d = SnapshotDecoder("h")
    s0 = d.feed(full(state()))
    t0 = retriage(s0, None, None)
    s1 = d.feed(patch({"taken_at": 1.7e9 + 1}))
    t1 = retriage(s1, s0, t0)
    assert t1.groups is t0.groups and t1.snapshot is s1  # nothing changed: reused
    s2 = d.feed(patch({"procs": {"101": {"cpu_pct": 75.0}}}))
    t2 = retriage(s2, s1, t1)
    node = next(n for g in t2.groups for n in g.nodes() if n.process.pid == 101)
    assert node.process.cpu_pct == 75.0  # the measurement is the new one
    assert t2 == triage(s2, s1)  # and the rest is what a full triage says
    s3 = d.feed(patch({"procs": {"101": {"ppid": 1, "start_ticks": 5}}}))
    t3 = retriage(s3, s2, t2)
    assert t3 == triage(s3, s2) and t3.groups is not t2.groups
