"""The decoder against a compromised host: whatever it sends, gpudash gets a HostSnapshot
within bounds or a ProtocolError, and the state it keeps between patches stays bounded."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudash.collector.host import protocol
from gpudash.collector.host.protocol import (
    CMDLINE_MAX,
    ERROR_MAX,
    MAX_ERRORS,
    PROTOCOL,
    TEXT_MAX,
    TRUNCATED,
)
from gpudash.domain.model import Gpu, HostSnapshot, Process, Unit
from gpudash.protocol import wire
from gpudash.protocol.source import ProtocolError
from gpudash.protocol.wire import SnapshotDecoder, to_snapshot
from gpudash.render import jsondoc

BOOT = "f0376a21-a525-4d33-835c-5d4530f7f7f4"


def good(n_gpus: int = 2, n_procs: int = 3) -> dict[str, Any]:
    return {
        "v": PROTOCOL,
        "host": "h",
        "taken_at": 1.7e9,
        "boot_id": BOOT,
        "source": "nvml",
        "errors": [],
        "can_act": True,
        "cpu_pct": 12.5,
        "mem_used_mib": 1000,
        "mem_total_mib": 64000,
        "gpus": {
            str(i): {"index": i, "name": "H100", "memory_total_mib": 81559, "memory_used_mib": 10}
            for i in range(n_gpus)
        },
        "procs": {
            str(100 + p): {
                "pid": 100 + p,
                "ppid": 1,
                "start_ticks": 5000 + p,
                "started_at": 1.6e9,
                "name": "w",
                "cmdline": "python -m vllm",
                "unit": "v.service",
                "cpu_pct": 99.0,
                "rss_mib": 2048,
                "gpu_memory_mib": {"0": 100},
            }
            for p in range(n_procs)
        },
        "units": {"v.service": {"name": "v.service", "active_state": "active", "main_pid": 100}},
    }


def full(state: dict[str, Any]) -> bytes:
    return json.dumps({"k": "full", "s": state}).encode()


def patch(body: dict[str, Any]) -> bytes:
    return json.dumps({"k": "patch", "s": body}).encode()


def decode(state: dict[str, Any]) -> HostSnapshot:
    return SnapshotDecoder("h").feed(full(state))


# --------------------------------------------------------------- what crashed the dashboard


def test_absurd_memory_is_na_with_a_reason_not_an_overflow() -> None:
    state = good()
    state["gpus"]["0"]["memory_used_mib"] = 10**400
    state["procs"]["100"]["gpu_memory_mib"] = {"0": 10**400, "1": 5}
    snap = decode(state)
    assert snap.gpu(0).memory_used_mib is None  # type: ignore[union-attr]
    assert snap.gpu(0).memory_total_mib == 81559  # type: ignore[union-attr]
    p = snap.process(100)
    assert p is not None and p.gpu_memory_mib == {0: None, 1: 5}
    (note,) = [e for e in snap.errors if "out of range" in e]
    assert "gpu 0 memory_used_mib" in note and "2 values" in note and len(note) < 300


def test_absurd_times_refused_or_na() -> None:
    state = good()
    state["procs"]["100"]["started_at"] = -1e308
    snap = decode(state)
    assert snap.process(100).started_at is None  # type: ignore[union-attr]
    state["taken_at"] = 1e308
    with pytest.raises(ProtocolError, match="taken_at"):
        decode(state)


@pytest.mark.parametrize(
    ("section", "key", "entry"),
    [
        ("procs", "101", {"pid": 100}),  # a second object for pid 100
        ("procs", "0100", {"pid": 100}),
        ("gpus", "1", {"index": 0}),
        ("gpus", "00", {"index": 0}),
        ("units", "w.service", {"name": "v.service"}),
    ],
)
def test_object_keys_must_name_their_object(section: str, key: str, entry: dict) -> None:
    state = good()
    state[section][key] = entry
    with pytest.raises(ProtocolError, match="key"):
        decode(state)


@pytest.mark.parametrize(
    ("where", "value"),
    [
        (("procs", "100", "pid"), 2**40),
        (("procs", "100", "ppid"), -2),
        (("procs", "100", "start_ticks"), -1),
        (("gpus", "0", "index"), 10**6),
        (("units", "v.service", "main_pid"), 2**63),
        (("boot_id",), "x" * 500),
        (("boot_id",), "not a uuid; rm -rf /"),
        (("boot_id",), BOOT + "\n"),
    ],
)
def test_identities_out_of_range_are_refused(where: tuple[str, ...], value: object) -> None:
    state = good()
    target = state
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    if where[-1] in ("pid", "index"):  # keep the key matching: only the range is wrong
        section = state[where[0]]
        section[str(value)] = section.pop(where[1])
    with pytest.raises(ProtocolError):
        decode(state)


@pytest.mark.parametrize(
    ("section", "count"), [("gpus", 64), ("procs", 2048)]  # the shipped limits
)
def test_counts_are_capped(section: str, count: int) -> None:
    state = good(1, 1)
    assert count == getattr(protocol, f"MAX_{section.upper()}")
    assert len(decode(good(64, 2)).gpus) == 64
    if section == "gpus":
        state["gpus"] = {str(i): {"index": i} for i in range(count + 1)}
    else:
        state["procs"] = {str(i): {"pid": i} for i in range(1, count + 2)}
    with pytest.raises(ProtocolError, match="too many"):
        decode(state)
    state = good()
    state["errors"] = ["e"] * (MAX_ERRORS + 1)
    with pytest.raises(ProtocolError, match="too many"):
        decode(state)


def test_long_strings_are_cut_with_the_collectors_mark() -> None:
    state = good()
    state["procs"]["100"]["cmdline"] = "A" * 10**6
    state["gpus"]["0"]["name"] = "N" * 10**5
    state["errors"] = ["E" * 10**5]
    snap = decode(state)
    cmdline = snap.process(100).cmdline  # type: ignore[union-attr]
    assert cmdline.endswith(TRUNCATED) and len(cmdline) == CMDLINE_MAX
    assert len(snap.gpu(0).name or "") <= TEXT_MAX  # type: ignore[union-attr]
    assert len(snap.errors[0]) <= ERROR_MAX


def test_patches_cannot_grow_the_kept_state() -> None:
    """Each patch adds unknown keys and long strings: what the decoder keeps stays bounded,
    and a refused patch leaves the last good state in place."""
    decoder = SnapshotDecoder("h")
    decoder.feed(full(good()))
    for i in range(40):
        junk = "J" * 200_000
        decoder.feed(
            patch(
                {
                    f"junk{i}": junk,
                    "gpus": {"0": {f"x{i}": junk, "name": junk}},
                    "procs": {str(500 + i): {"pid": 500 + i, "cmdline": junk, f"y{i}": [junk]}},
                }
            )
        )
    kept = len(json.dumps(decoder.state))
    assert kept < 40 * (CMDLINE_MAX + 1000) + 10_000
    before = copy.deepcopy(decoder.state)
    with pytest.raises(ProtocolError):
        decoder.feed(patch({"procs": {"100": {"pid": 7}}}))
    assert decoder.state == before
    assert decoder.feed(patch({"cpu_pct": 50})).cpu_pct == 50.0


# ---------------------------------------------------------------------- the protocol version


def test_other_protocol_version_is_named() -> None:
    state = good()
    state["v"] = PROTOCOL + 1
    message = f"collector speaks protocol {PROTOCOL + 1}, this gpudash speaks"
    with pytest.raises(ProtocolError, match=message):
        decode(state)
    del state["v"]
    with pytest.raises(ProtocolError, match="protocol"):
        decode(state)
    with pytest.raises(ProtocolError, match=message):
        wire.check_ready({"k": "ready", "v": PROTOCOL + 1})
    wire.check_ready({"k": "ready", "v": PROTOCOL})


# ------------------------------------------------------------------------------ one schema


@pytest.mark.parametrize(
    ("keys", "cls", "extra"),
    [
        ("GPU_KEYS", Gpu, set()),
        ("PROC_KEYS", Process, set()),
        ("UNIT_KEYS", Unit, set()),
        ("SNAPSHOT_KEYS", HostSnapshot, {"v", "procs"}),
    ],
)
def test_wire_keys_are_the_model_fields(keys: str, cls: type, extra: set) -> None:
    declared = getattr(protocol, keys)
    names = {f.name for f in dataclasses.fields(cls)}
    if cls is HostSnapshot:
        names -= {"processes", "changes"}  # changes: what the decoder saw, not host text
        names -= {"containers", "pods"}  # the typed view of two kinds' "owners"
    assert set(declared) == names | extra


def test_json_output_has_every_model_field() -> None:
    snap = decode(good())
    host = jsondoc.host_to_json(snap)
    for cls, rows in ((Gpu, host["gpus"]), (Process, host["processes"]), (Unit, host["units"])):
        assert {f.name for f in dataclasses.fields(cls)} <= set(rows[0])
    assert {"boot_id", "cpu_pct", "mem_used_mib", "mem_total_mib"} <= set(host)
    assert host["processes"][0]["cpu_pct"] == 99.0 and host["processes"][0]["rss_mib"] == 2048


# ------------------------------------------------------------------------------ under fuzz


def within_bounds(snap: HostSnapshot) -> None:
    """What the UI relies on, checked against numbers written here, not the decoder's."""
    assert len(snap.gpus) <= 64 and len(snap.processes) <= 2048 and len(snap.units) <= 256
    assert len({g.index for g in snap.gpus}) == len(snap.gpus)
    assert len({p.pid for p in snap.processes}) == len(snap.processes)
    assert len({u.name for u in snap.units}) == len(snap.units)
    assert 0 <= snap.taken_at <= 1e10 and len(snap.errors) <= 64
    for value in (snap.cpu_pct, snap.mem_used_mib, snap.mem_total_mib):
        assert value is None or 0 <= value < 2**40
    for obj in (*snap.gpus, *snap.processes, *snap.units):
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if isinstance(value, str):
                assert len(value) <= 4096
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                assert math.isfinite(value) and -1000 <= value < 2**63
    for p in snap.processes:
        assert 0 < p.pid <= 2**22
        for index, mib in p.gpu_memory_mib.items():
            assert 0 <= index < 64 and (mib is None or 0 <= mib < 2**40)
        if p.started_at is not None:
            int(snap.taken_at - p.started_at)  # the age the UI shows


numbers = st.one_of(
    st.integers(),
    st.integers(-(10**400), 10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 2**22, 2**22 + 1, 2**63, 1e308, -1e308]),
)
scalars = st.one_of(numbers, st.text(max_size=20), st.booleans(), st.none())


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    """A plausible snapshot with a few values replaced by anything."""
    state = good(draw(st.integers(0, 3)), draw(st.integers(0, 3)))
    paths: list[tuple[Any, str]] = [(state, k) for k in list(state)]
    for section in ("gpus", "procs", "units"):
        for entry in state[section].values():
            paths += [(entry, k) for k in list(entry)]
    for _ in range(draw(st.integers(1, 4))):
        target, key = draw(st.sampled_from(paths))
        target[key] = draw(scalars)
    return state


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(mutated().map(full), mutated().map(patch), st.binary(max_size=50))))
def test_decoder_gives_a_bounded_snapshot_or_a_protocol_error(lines: list[bytes]) -> None:
    decoder = SnapshotDecoder("h")
    for line in lines:
        try:
            snap = decoder.feed(line)
        except ProtocolError:
            continue
        within_bounds(snap)
        jsondoc.host_to_json(snap)


@settings(max_examples=200)
@given(mutated())
def test_one_off_dicts_decode_the_same_way(state: dict[str, Any]) -> None:
    try:
        snap = to_snapshot(state, "h")
    except ProtocolError:
        return
    within_bounds(snap)


# Issue 29 item 11: on Python 3.12 and 3.13 json.loads nests about a thousand deep (3.11's
# refuses sooner), and a merge patch that deep raised RecursionError out of feed().
NESTED_CHECK = r"""
import json, sys
sys.path.insert(0, sys.argv[1])  # -I: the checkout only, no site-packages
from gpudash.protocol.source import ProtocolError
from gpudash.protocol.wire import SnapshotDecoder

decoder = SnapshotDecoder("h")
decoder.feed(sys.argv[2].encode())
kept = decoder.state
said = {}
for depth in (30, 500, 990, 1000, 1100, 5000, 50000):
    nested = '{"a":' * depth + "{}" + "}" * depth
    for where, line in (
        ("a patch's value", '{"k":"patch","s":{"can_act":%s}}' % nested),
        ("a process", '{"k":"patch","s":{"procs":{"100":{"gpu_memory_mib":%s}}}}' % nested),
        ("a full snapshot", '{"k":"full","s":{"errors":[%s]}}' % nested),
    ):
        try:
            decoder.feed(line.encode())
            said[f"{where} {depth} deep"] = "decoded"
        except ProtocolError:
            said[f"{where} {depth} deep"] = "ProtocolError"
        except BaseException as exc:  # what must never come out of feed()
            said[f"{where} {depth} deep"] = type(exc).__name__
        if decoder.state is not kept:
            said[f"{where} {depth} deep"] += ", and the state changed"
decoder.feed(b'{"k":"patch","s":{"cpu_pct":1.5}}')  # the link goes on
print(json.dumps({"version": list(sys.version_info[:2]), "said": said}))
"""
WANTED_PYTHONS = ("3.12", "3.13")


def python(version: str) -> str | None:
    """An interpreter of ``version`` on this machine: pyenv's (``$PYENV_ROOT``), else
    ``python3.1x`` on PATH, that runs and is that version (a pyenv shim of a version not
    selected is not)."""
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    found = sorted(root.glob(f"versions/{version}.*/bin/python{version}"),
                   key=lambda p: [int(x) if x.isdigit() else -1
                                  for x in p.parents[1].name.split(".")], reverse=True)
    for candidate in [*map(str, found), shutil.which(f"python{version}")]:
        if candidate is None:
            continue
        try:
            ran = subprocess.run([candidate, "-I", "-c", "import sys; print(sys.version[:5])"],
                                 capture_output=True, text=True, timeout=30)
        except OSError:
            continue
        if ran.returncode == 0 and ran.stdout.strip().rsplit(".", 1)[0] == version:
            return candidate
    return None


@pytest.mark.parametrize("version", ["this", *WANTED_PYTHONS])
def test_a_deeply_nested_message_is_a_protocol_error_on_every_python(version: str) -> None:
    if version == "this":
        interpreter: str | None = sys.executable
    else:
        interpreter = python(version)
    if interpreter is None:
        required = os.environ.get("GPUDASH_REQUIRE_PYTHONS", "").split()
        if version in required:  # tests/run.sh made sure it is there
            pytest.fail(f"Python {version} is required (GPUDASH_REQUIRE_PYTHONS) but absent")
        pytest.skip(f"no Python {version} on this machine (tests/run.sh installs it)")
    repo = str(Path(__file__).resolve().parents[1])
    first = json.dumps({"k": "full", "s": good()})
    ran = subprocess.run([interpreter, "-I", "-c", NESTED_CHECK, repo, first],
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-3000:]
    doc = json.loads(ran.stdout)
    if version != "this":
        assert doc["version"] == [int(x) for x in version.split(".")]
    wrong = {k: v for k, v in doc["said"].items() if v != "ProtocolError"}
    assert not wrong, wrong
