"""The dashboard's Action log starts with what was done before it started (issue 21,
item 4): the audit's last day of the hosts on screen.

Seen before: the Action log started empty each run; only `gpudash history` told the story.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_ui import log_text, make_app

from gpudash.demo.host import DemoHost
from gpudash.session.audit import audit_path
from gpudash.session.history import read_records


@pytest.fixture
def reclaimed_before() -> None:
    """A reclaim done from the command line (the demo's audit), and one on another host."""
    cp = subprocess.run([sys.executable, "-m", "gpudash", "reclaim", "--demo", "--unit",
                         "vllm-minimax-m25", "--yes", "--term-timeout", "3"],
                        capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert cp.returncode == 0, cp.stderr[-2000:]
    path = audit_path(simulated=True)
    other = json.loads(path.read_text().splitlines()[0])  # the same action, another host
    with path.open("a") as f:
        f.write(json.dumps({**other, "id": "x" * 32, "host": "gpu99"}) + "\n")


@pytest.mark.usefixtures("reclaimed_before")
async def test_the_demo_starts_without_earlier_runs_entries() -> None:
    # issue 33, item 3: a fresh --demo started with earlier runs' entries ("swap ...
    # confirmed (earlier, by root)") that contradicted its fresh simulated host
    app = make_app(DemoHost(seed=7))
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause(0.5)
        text = log_text(app)
    assert "earlier" not in text, text


def test_the_action_log_starts_with_todays_audit_of_these_hosts() -> None:
    # a real host's audit (not the demo's): today's actions on the hosts on screen, marked
    # as earlier, each naming its target
    import time

    from gpudash.state.files import append_line
    from gpudash.ui.widgets.action_log import recent_entries, start_of_today

    now = time.time()
    today = start_of_today(now)
    path = audit_path()
    path.parent.mkdir(parents=True, exist_ok=True)

    def record(host: str, at: float, subject: str, verdict: str) -> None:
        rid = f"{host}{at}".encode().hex()[:32].ljust(32, "0")
        append_line(path, json.dumps({"id": rid, "record": "intent", "time": at, "host": host,
                                      "operator": "root", "action": "fix",
                                      "subject": subject}).encode() + b"\n")
        append_line(path, json.dumps({"id": rid, "record": "outcome", "time": at + 1,
                                      "host": host, "verdict": verdict,
                                      "summary": "done"}).encode() + b"\n")

    record("gpu01", today - 3600, "vllm-a.service", "confirmed")  # yesterday
    record("gpu01", max(today, now - 60), "vllm-kimi-k25.service", "confirmed")
    record("gpu99", max(today, now - 50), "vllm-b.service", "confirmed")  # not on screen
    [entry] = recent_entries(["gpu01"], now)
    assert entry.action == "Fix config vllm-kimi-k25.service", entry
    assert entry.outcome == "confirmed (earlier, by root)"


def test_only_the_end_of_a_long_audit_is_read_and_a_cut_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    rec = {"id": "a" * 32, "record": "intent", "host": "h", "action": "reclaim"}
    path.write_text((json.dumps(rec) + "\n") * 1000)
    whole, _ = read_records(path)
    tail, skipped = read_records(path, tail_bytes=500)
    assert len(whole) == 1000 and 0 < len(tail) < 10 and skipped == 0
    assert read_records(path, tail_bytes=1 << 20) == (whole, 0)  # shorter than the tail


async def test_the_action_column_takes_the_width_its_targets_need() -> None:
    # issue 33, item 3: Action sat at ~40 columns at every width, 120 empty ones beside it
    # at 200x50, and two Fix entries on two units read the same
    from textual.app import App, ComposeResult

    from gpudash.ui.widgets.action_log import ActionLog, LogEntry, entry_title

    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield ActionLog()

    app = One()
    async with app.run_test(size=(200, 10)) as pilot:
        log = app.query_one(ActionLog)
        log.fit(hosts=False, narrow=False, width=200)
        swap = entry_title("swap", "vllm-minimax-m25.service -> vllm-deepseek-v3-long.service")
        log.add(LogEntry(0.0, "h", swap, "confirmed: ...", True), "green", "red")
        log.add(LogEntry(0.0, "h", entry_title("fix", "vllm-kimi-k25.service"),
                         "cancelled: nothing was done", None), "green", "red")
        await pilot.pause()
        action = next(c for c in log.columns.values() if str(c.key.value) == "action")
        assert action.width >= len(swap) + 1, (action.width, swap)
        assert swap.startswith("Swap vllm-minimax-m25.service -> ")
        outcome = next(c for c in log.columns.values() if str(c.key.value) == "outcome")
        assert action.width + outcome.width <= 200
