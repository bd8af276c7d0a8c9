"""``gpudash history``: what was done, read back from the audit file (issue 21 item 4)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from test_cli import gpudash, state


def test_a_reap_and_a_swap_on_the_demo_are_told_with_verdicts_gib_and_phases() -> None:
    assert gpudash("reap", "--demo", "--yes").returncode == 0
    assert gpudash("swap", "--demo", "--from", "vllm-minimax-m25", "--to", "vllm-kimi-k25",
                   "--yes").returncode == 0
    r = gpudash("history", "--demo", "--json")
    assert r.returncode == 0, r.stderr
    actions = json.loads(r.stdout)["actions"]
    assert [a["action"] for a in actions] == ["reap", "swap"]
    reap, swap = actions
    assert reap["verdict"] == swap["verdict"] == "confirmed"
    assert sum(reap["mib_back_by_gpu"].values()) > 700 * 1024  # 16 workers' memory
    assert [ph["name"] for ph in swap["phases"]] == ["reclaim", "start"]
    assert all(ph["seconds"] > 0 for ph in swap["phases"])
    assert reap["seconds"] is not None and reap["operator"]
    text = gpudash("history", "--demo")
    assert "✔ confirmed" in text.stdout and "GiB back" in text.stdout
    assert "phases" in text.stdout and "vllm-kimi-k25.service" in text.stdout


def write_audit(lines: list[str]) -> None:
    d = state()
    d.mkdir(parents=True, exist_ok=True)
    (d / "audit.jsonl").write_text("\n".join(lines) + "\n")


def rec(kind: str, aid: str, t: float, host: str = "gpu01", **kw: object) -> str:
    return json.dumps({"record": kind, "id": aid, "time": t, "host": host,
                       "operator": "alice", "action": "reclaim", "subject": "v.service",
                       **kw})


def test_re_verified_records_join_their_action_and_bad_lines_are_skipped() -> None:
    now = time.time()
    write_audit([
        rec("intent", "a1", now - 60),
        rec("outcome", "a1", now - 50, verdict="unknown", summary="link lost"),
        '{"record": "outcome", "id": "a1", "time": ',  # cut short by a crash
        rec("outcome", "a1", now - 40, verdict="confirmed",
            gpus=[{"index": 0, "before_mib": 9000, "after_mib": 1000}]),
        rec("intent", "b2", now - 30, host="gpu02"),  # gpudash died while acting
        "not json at all",
    ])
    r = gpudash("history", "--json")
    doc = json.loads(r.stdout)
    assert doc["skipped"] == 2 and "not records" in r.stderr
    a1, b2 = doc["actions"]
    assert a1["id"] == "a1" and a1["verdict"] == "confirmed" and a1["reverified"] == 1
    assert a1["mib_back_by_gpu"] == {"0": 8000} and round(a1["seconds"]) == 20
    assert b2["verdict"] is None
    assert "no outcome recorded" in gpudash("history", "gpu02").stdout
    only = json.loads(gpudash("history", "gpu0[2]", "--json").stdout)["actions"]
    assert [a["id"] for a in only] == ["b2"]
    recent = json.loads(gpudash("history", "--since", "45s", "--json").stdout)["actions"]
    assert [a["id"] for a in recent] == ["b2"]
    assert gpudash("history", "--since", "soon").returncode == 2



# Issue 29 item 11: one odd value in a record made history and report exit 70.
ODD = {
    "time 1e300": '{"record": "outcome", "id": "odd", "time": 1e300, "verdict": "confirmed"}',
    "time NaN": '{"record": "outcome", "id": "odd", "time": NaN, "verdict": "confirmed"}',
    "index x": json.dumps({"record": "outcome", "id": "odd", "time": 1.7e9, "verdict":
                           "confirmed", "gpus": [{"index": "x", "before_mib": 9000,
                                                  "after_mib": 1000}]}),
}


@pytest.mark.parametrize("odd", ODD.values(), ids=ODD.keys())
def test_a_record_with_an_odd_value_is_skipped_with_a_warning_naming_its_line(
        odd: str, tmp_path: Path) -> None:
    now = time.time()
    write_audit([
        rec("intent", "good1", now - 90),
        rec("outcome", "good1", now - 85, verdict="confirmed"),
        odd,  # line 3
        rec("intent", "good2", now - 60, host="gpu02"),
        rec("outcome", "good2", now - 55, host="gpu02", verdict="failed", summary="held"),
    ])
    where = f"{state() / 'audit.jsonl'} line 3: "
    for args in (("history",), ("report",), ("report", "--svg", str(tmp_path / "r.svg")),
                 ("history", "--json"), ("report", "--json")):
        r = gpudash(*args)
        assert r.returncode == 0, (args, r.returncode, r.stderr)
        assert where in r.stderr and "skipped" in r.stderr, (args, r.stderr)
        if "--json" in args:
            doc = json.loads(r.stdout)
            assert [a["id"] for a in doc["actions"]] == ["good1", "good2"]
            assert doc["skipped"] == 1
        elif "--svg" not in args:
            assert "✔ confirmed" in r.stdout and "✘ failed" in r.stdout, (args, r.stdout)


def test_history_and_report_give_one_duration_for_an_action() -> None:
    # issue 33, item 7: one demo reclaim was "0.7 s" in history (this machine's clock,
    # the demo at 20x) and "13.1 s" in report (the host's clock, as its chart)
    import re
    import subprocess
    import sys

    def run(*args: str) -> str:
        return subprocess.run([sys.executable, "-m", "gpudash", *args], capture_output=True,
                              text=True, timeout=120).stdout

    run("reclaim", "--demo", "--unit", "vllm-minimax-m25", "--yes")
    took = re.findall(r"confirmed in ([0-9.]+) s", run("history", "--demo"))
    shown = re.findall(r"confirmed in ([0-9.]+) s", run("report", "--demo"))
    assert took and took == shown, (took, shown)
    assert float(took[0]) > 5  # the demo's reclaim takes ~13 s on the host's clock
