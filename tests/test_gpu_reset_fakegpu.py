"""``gpudash reset`` on this machine (the local collector) over the stand-in driver: real
processes, the real pynvml binding, the stand-in's nvidia-smi. A leak on a GPU nothing
holds is reset, audited and proven by its memory back to its baseline; a GPU a process
holds is refused with the process named, and nothing is sent. What was checked is in
``gpudash snapshot --json`` per GPU (issue 34)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fakegpu.fixtures import fakegpu_build, fakegpu_state  # noqa: F401  (fixtures)


def gpudash(state, *args: str) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    # the stand-in's nvidia-smi first on PATH: never a real one, whatever this machine has
    found = shutil.which("nvidia-smi", path=state.env["PATH"])
    assert found is not None and Path(found).parent == Path(state.out).resolve(), found
    return subprocess.run([sys.executable, "-m", "gpudash", *args], capture_output=True,
                          text=True, timeout=120, env=state.env)


def audit(name: str = "audit.jsonl") -> list[dict]:
    path = Path(os.environ["XDG_STATE_HOME"]) / "gpudash" / name
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def leaky(fakegpu_state):  # type: ignore[no-untyped-def]
    """Two GPUs: 6000 MiB leaked on GPU 1 (nothing holds it), 3000 on GPU 0 where a
    python3 holds 1000 MiB."""
    fakegpu_state.init(gpus=2, baseline_mib=200)
    fakegpu_state.cli("set", "--gpu", "1", "leak_mib=6000")
    fakegpu_state.cli("set", "--gpu", "0", "leak_mib=3000")
    fakegpu_state.holder = fakegpu_state.hold(0, 1000, name="python3")
    return fakegpu_state


def test_snapshot_json_says_what_was_checked_of_memory_no_process_holds(leaky) -> None:  # type: ignore[no-untyped-def]
    r = gpudash(leaky, "snapshot", "--json")
    assert r.returncode == 0, r.stderr
    (host,) = json.loads(r.stdout)["hosts"]
    gpus = {g["index"]: g for g in host["gpus"]}
    one = gpus[1]["unheld"]
    assert gpus[1]["unattributed_mib"] == 6200 and one["mib"] == 6200
    assert one["resettable"] is True and one["blockers"] == [] and one["holders"] == []
    assert one["checks"] == [
        "NVML's process list: read; it lists no process on it",
        "/dev/nvidia1: every process's open files and mappings read; none holds it",
        "PIDs: the collector sees every process",
    ]
    assert (gpus[1]["mig_mode"], gpus[1]["display_active"], gpus[1]["persistence_mode"]) == \
        ("off", "off", "on")
    zero = gpus[0]["unheld"]
    assert zero["resettable"] is False
    assert zero["holders"][0].startswith(f"pid {leaky.holder.pid} (fakegpu, root)")


def test_a_leaked_gpu_is_reset_audited_and_proven(leaky) -> None:  # type: ignore[no-untyped-def]
    r = gpudash(leaky, "reset", "--gpu", "1", "--yes", "--json")
    assert r.returncode == 0, r.stderr + r.stdout
    report = json.loads(r.stdout)
    assert report["action"] == "gpu-reset" and report["confirmed"] is True, report["summary"]
    assert [c["argv"] for c in report["commands"]] == [["nvidia-smi", "--gpu-reset", "-i", "1"]]
    (gpu,) = report["gpus"]
    assert (gpu["index"], gpu["before_mib"], gpu["after_mib"]) == (1, 6200, 200)
    intent, outcome = audit()
    assert intent["record"] == "intent" and outcome["id"] == intent["id"]
    assert "nvidia-smi --gpu-reset -i 1" in "\n".join(intent["plan"])
    # the stand-in's own reading: GPU 1 at its baseline, GPU 0 untouched
    q = leaky.run("nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits")
    assert q.stdout.split() == ["4200", "200"]


def test_a_gpu_a_process_holds_is_refused_with_it_named_and_nothing_sent(leaky) -> None:  # type: ignore[no-untyped-def]
    r = gpudash(leaky, "reset", "--gpu", "0", "--yes", "--json")
    assert r.returncode == 2, r.stderr
    assert f"GPU 0 not reset: pid {leaky.holder.pid} (fakegpu, root)" in r.stderr
    assert audit() == []  # nothing planned to be sent: nothing audited
    q = leaky.run("nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits")
    assert q.stdout.split() == ["4200", "6200"]
