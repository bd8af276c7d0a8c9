"""The holders table's SM% column on the demo, and SM% in ``snapshot --json``."""

from __future__ import annotations

import json
import subprocess
import sys

from support import next_sample, until
from test_ui import select, wait_for
from test_ui_sizes import PANE, make_app, screen_text

from gpudash.demo.host import MINIMAX
from gpudash.ui.screens import ConfirmModal
from gpudash.ui.widgets.holders import COLUMNS, HoldersTable


def _sm_cells(table: HoldersTable) -> dict[str, str]:
    at = [c.key for c in COLUMNS].index("sm")
    return {str(k.value): table.get_row(k)[at].plain for k in table.rows}


async def test_sm_column_shows_serving_workers_busy_and_orphans_idle() -> None:
    """At 200x50 an operator sees which workers compute (at 160 the command line's room
    comes first): MiniMax's serving workers have plausible SM%, the idle notebook kernel
    0, the unit rows none; after D its orphaned workers spin on the CPU with their SMs
    at 0."""
    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.pause(0.2)
        table = app.query_one(HoldersTable)
        assert "SM%" in screen_text(app)
        sm = _sm_cells(table)
        workers = {k: v for k, v in sm.items() if k.startswith("p:215")}
        busy = [int(v) for v in workers.values() if v.isdigit()]
        assert len(busy) == 8 and all(40 <= v <= 100 for v in busy), workers
        assert sm["p:90211"] == "0"  # the notebook kernel, idle
        assert sm[f"u:{MINIMAX}"] == ""
        await pilot.press("D")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await pilot.press("y")
        await until(pilot, lambda: app.last_report is not None, what="the report")
        await next_sample(pilot)  # the workers as the host has them now: orphans
        await pilot.pause(0.3)
        sm = _sm_cells(table)
        orphans = [v for k, v in sm.items() if k.startswith("p:") and k != "p:90211"
                   and k in workers]
        assert orphans and set(orphans) == {"0"}, sm


def test_snapshot_json_carries_sm_utilisation() -> None:
    r = subprocess.run([sys.executable, "-m", "gpudash", "snapshot", "--demo", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    (host,) = json.loads(r.stdout)["hosts"]
    by_pid = {p["pid"]: p for p in host["processes"]}
    assert by_pid[90211]["sm_util_pct"] == 0  # the notebook kernel
    assert by_pid[90100]["sm_util_pct"] is None  # jupyter-lab: no GPU memory, not listed
    workers = [p for p in host["processes"] if p["cmdline"].startswith("VLLM::Worker")]
    assert workers and all(0 <= p["sm_util_pct"] <= 100 for p in workers)


async def test_at_120x35_sm_shows_when_sorted_by_it() -> None:
    # At 120x35 CPU, RSS and Age keep their room (issue 20; St gives way to the command
    # line, issue 33): SM% is the first to give way after User and the long Flags, and is
    # back as soon as the table is sorted by it.
    app = make_app()
    app.views[0].source.leave_orphans()  # type: ignore[attr-defined]  # 16×ORPHAN ...
    async with app.run_test(size=PANE) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.pause(0.2)
        table = app.query_one(HoldersTable)
        await wait_for(pilot, lambda: "sm" not in table.shown_columns)
        assert "rss" in table.shown_columns and "age" in table.shown_columns
        await pilot.press("greater_than_sign")  # the sort: GPU memory -> SM%
        await wait_for(pilot, lambda: "sm" in table.shown_columns)
        assert "SM% ▼" in screen_text(app)
