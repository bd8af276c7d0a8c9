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
async def test_the_action_log_starts_with_the_audits_recent_actions_of_these_hosts() -> None:
    app = make_app(DemoHost(seed=7))
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause(0.5)
        text = log_text(app)
    assert "Reclaim" in text or "reclaim" in text, text
    assert "earlier, by" in text, text
    assert "gpu99" not in text, text  # not a host on screen


def test_only_the_end_of_a_long_audit_is_read_and_a_cut_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    rec = {"id": "a" * 32, "record": "intent", "host": "h", "action": "reclaim"}
    path.write_text((json.dumps(rec) + "\n") * 1000)
    whole, _ = read_records(path)
    tail, skipped = read_records(path, tail_bytes=500)
    assert len(whole) == 1000 and 0 < len(tail) < 10 and skipped == 0
    assert read_records(path, tail_bytes=1 << 20) == (whole, 0)  # shorter than the tail
