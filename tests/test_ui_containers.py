"""The dashboard on the demo host's container: its facts, its actions, its reclaim."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_ui import SIZE, make_app, run_confirmed, select, wait_for

from gpudash.demo.host import EMBED_ID, DemoHost
from gpudash.engine import ActionKind
from gpudash.ui.widgets.unit_panel import UnitPanel

EMBED = "u:docker:vllm-embed"


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path


async def test_a_container_row_offers_container_verbs_and_reclaims_with_proof() -> None:
    demo = DemoHost(speed=50, release_delay=2, containers=True)
    app = make_app(demo)
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, EMBED)
        panel = str(app.query_one(UnitPanel).render())
        assert "restart policy always: killing its main process makes docker restart it" in panel
        assert "vllm/vllm-openai:v0.11.0" in panel and "Restart     always" in panel
        assert app.main.check_action("reclaim", ()) is True
        assert app.main.check_action("stop_unit", ()) is True
        assert app.main.check_action("disable_unit", ()) is True
        assert app.main.check_action("start_unit", ()) is None  # greyed: a container
        assert "docker start" in app.main.availability("start_unit")[1]
        assert app.main.check_action("remove_container", ()) is False  # hidden while it runs
        await run_confirmed(pilot, app, "r")
        report = app.last_report
        assert report is not None and report.plan.kind is ActionKind.RECLAIM
        assert report.confirmed, report.summary
        assert report.plan.container_before is not None
        assert report.plan.container_before.id == EMBED_ID
        await wait_for(pilot, lambda: app.view.snapshot is not None
                       and app.view.snapshot.container(EMBED_ID).state == "exited")
        await select(pilot, app, EMBED)
        await wait_for(pilot, lambda: app.main.check_action("remove_container", ()) is True)


async def test_w_on_a_container_row_swaps_it_for_a_model_unit_with_both_phases_proven() -> None:
    from gpudash.demo.host import RERANK
    from gpudash.ui.models import ModelPicker
    from gpudash.ui.screens import ConfirmModal

    demo = DemoHost(speed=50, release_delay=1, containers=True)
    app = make_app(demo)
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, EMBED)
        assert app.main.check_action("swap", ()) is True
        await pilot.press("w")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelPicker))
        picker = app.screen
        assert "Reclaim docker container vllm-embed, then start:" in picker.heading
        assert RERANK in [c.name for c in picker.choices]
        await pilot.press(*"rerank", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        lines = "\n".join(app.screen.lines)
        assert "1. reclaim" in lines and "$ docker stop -t 10 vllm-embed" in lines
        assert f"$ systemctl start {RERANK}" in lines
        assert "http://127.0.0.1:8003/health answers 200" in lines
        await pilot.press("y")
        await wait_for(pilot, lambda: app.last_report is not None, within=40)
        report = app.last_report
        assert report is not None and report.plan.kind is ActionKind.SWAP
        assert report.confirmed, report.describe()
        assert demo.containers[EMBED_ID].state == "exited" and demo.units[RERANK].active
