"""The command line as a script would use it: real subprocesses, exit codes, JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def gpudash(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpudash", *args],
        capture_output=True, text=True, timeout=60, input=stdin, env=os.environ.copy(),
    )


def test_snapshot_json_follows_schema_1() -> None:
    r = gpudash("snapshot", "--demo", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == 1
    (host,) = doc["hosts"]
    assert len(host["gpus"]) == 8
    g0 = host["gpus"][0]
    assert {"index", "uuid", "name", "memory_total_mib", "memory_used_mib"} <= set(g0)
    assert g0["memory_used_mib"] == 96801 and g0["memory_total_mib"] == 97887
    kernel = next(p for p in host["processes"] if p["pid"] == 90211)
    assert kernel["gpu_memory_mib"] == {"0": 2048} and kernel["flags"] == []
    unit = next(u for u in host["units"] if u["name"] == "vllm-minimax-m25.service")
    assert (unit["restart"], unit["kill_mode"], unit["n_restarts"]) == ("always", "process", 0)
    assert isinstance(unit["main_pid"], int)


def test_snapshot_text_names_units_and_warnings() -> None:
    r = gpudash("snapshot", "--demo")
    assert r.returncode == 0
    assert "vllm-minimax-m25.service" in r.stdout
    assert "Restart=always: killing the main PID respawns it" in r.stdout


def test_reclaim_demo_exits_0_with_a_per_gpu_report(tmp_path: Path) -> None:
    r = gpudash("reclaim", "--demo", "--unit", "vllm-minimax-m25", "--yes")
    assert r.returncode == 0, r.stdout + r.stderr
    for i in range(8):
        assert f"GPU{i}: freed" in r.stdout
    assert "confirmed: " in r.stdout
    assert "ignored SIGTERM: escalated to SIGKILL" in r.stdout
    audit = Path(os.environ["XDG_STATE_HOME"]) / "gpudash" / "audit.jsonl"
    (record,) = [json.loads(line) for line in audit.read_text().splitlines()]
    assert record["action"] == "reclaim" and record["confirmed"] is True
    assert len(record["gpus"]) == 8


def test_reclaim_json_report() -> None:
    r = gpudash("reclaim", "--demo", "--unit", "vllm-minimax-m25", "--yes", "--json",
                "--term-timeout", "3")
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    assert any("-KILL after 3 s if alive" in line for line in rec["plan"])
    assert rec["confirmed"] is True
    assert all(g["confirmed"] for g in rec["gpus"])
    assert 90211 not in [t["pid"] for t in rec["targets"]]


def test_reclaim_without_yes_off_a_terminal_does_nothing() -> None:
    r = gpudash("reclaim", "--demo", "--unit", "vllm-minimax-m25", stdin="")
    assert r.returncode == 2
    assert "nothing done" in r.stderr
    assert "systemctl stop vllm-minimax-m25.service" in r.stdout  # the plan was shown


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["reclaim", "--demo", "--unit", "nope", "--yes"], "not known"),
        (["reclaim", "--demo", "--unit", "session-4.scope", "--yes"], "not a system service"),
        (["--demo", "--interval", "0"], "--interval must be > 0"),
    ],
)
def test_usage_errors_are_clear_and_exit_2(args: list[str], message: str) -> None:
    r = gpudash(*args)
    assert r.returncode == 2
    assert message in r.stderr
    assert "Traceback" not in r.stderr
