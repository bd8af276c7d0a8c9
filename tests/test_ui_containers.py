"""The dashboard on the demo host's container: its facts, its actions, its reclaim."""

from __future__ import annotations

import pytest
from support import until
from test_ui import SIZE, make_app, run_confirmed, select, wait_for

from gpudash.demo.host import EMBED_ID, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.engine import ActionKind
from gpudash.ui.widgets.unit_panel import UnitPanel

EMBED = "u:docker:vllm-embed"


async def test_a_container_row_offers_container_verbs_and_reclaims_with_proof() -> None:
    demo = DemoHost(clock=SteppedClock(), release_delay=2, containers=True)
    app = make_app(demo)
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, EMBED)
        panel = str(app.query_one(UnitPanel).render())
        assert "restart policy always: killing its main process makes docker restart it" in panel
        assert "vllm/vllm-openai:v0.11.0" in panel and "Restart     always" in panel
        assert app.main.check_action("reclaim", ()) is True
        assert app.main.check_action("stop_unit", ()) is True
        assert app.main.check_action("disable_unit", ()) is True
        assert app.main.check_action("start_unit", ()) is None  # greyed: it runs
        assert "already running: restart it instead" in app.main.availability("start_unit")[1]
        assert app.main.check_action("restart_unit", ()) is True
        assert app.main.check_action("enable_unit", ()) is None  # no boot setting
        assert "restart policy" in app.main.availability("enable_unit")[1]
        assert app.main.check_action("remove_container", ()) is False  # hidden while it runs
        # the palette says what each does to a container, not "Start unit" (issue 20)
        titles = {action: title for title, _help, action, _ok in app.main.palette_commands()}
        assert titles["restart_unit"] == "Restart container and prove it runs"
        assert titles["start_unit"] == "Start container and prove it runs"
        assert titles["stop_unit"] == "Stop container"
        assert titles["reclaim"].startswith("Reclaim container")
        await select(pilot, app, "u:vllm-minimax-m25.service")
        titles = {action: title for title, _help, action, _ok in app.main.palette_commands()}
        assert titles["stop_unit"] == "Stop unit"
        await select(pilot, app, EMBED)
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

    demo = DemoHost(clock=SteppedClock(), release_delay=1, containers=True)
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
        await until(pilot, lambda: app.last_report is not None, what="the report")
        report = app.last_report
        assert report is not None and report.plan.kind is ActionKind.SWAP
        assert report.confirmed, report.describe()
        assert demo.containers[EMBED_ID].state == "exited" and demo.units[RERANK].active


SIZES = [(80, 24), (120, 35)]


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "120x35"])
async def test_j_on_a_container_row_follows_its_docker_logs(size: tuple[int, int]) -> None:
    from gpudash.ui.models import JournalScreen

    demo = DemoHost(clock=SteppedClock(), release_delay=2, containers=True)
    app = make_app(demo)
    async with app.run_test(size=size) as pilot:
        await select(pilot, app, EMBED)
        await pilot.press("j")
        await wait_for(pilot, lambda: isinstance(app.screen, JournalScreen))
        pane = app.screen
        assert isinstance(pane, JournalScreen)
        assert pane._title().startswith("docker logs: vllm-embed (live")
        await wait_for(pilot, lambda: len(pane.lines) >= 200)
        assert all(ln.time is not None for ln in pane.lines)
        assert any("POST /v1/embeddings" in ln.message for ln in pane.lines)
        assert pane.lines[0].origin == f"docker:{EMBED_ID[:12]}"
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, JournalScreen))


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "120x35"])
async def test_R_restarts_a_container_and_u_starts_it_again_with_its_policy_back(
    size: tuple[int, int],
) -> None:
    demo = DemoHost(clock=SteppedClock(), release_delay=1, containers=True)
    app = make_app(demo)
    async with app.run_test(size=size) as pilot:
        await select(pilot, app, EMBED)
        old_pid = demo.containers[EMBED_ID].main_pid
        await run_confirmed(pilot, app, "R")
        report = app.last_report
        assert report is not None and report.plan.kind is ActionKind.RESTART
        assert report.confirmed, report.summary
        assert demo.containers[EMBED_ID].main_pid not in (None, old_pid)
        await select(pilot, app, EMBED)
        await run_confirmed(pilot, app, "r")  # reclaim: policy off, stopped, proven
        assert app.last_report is not None and app.last_report.confirmed
        assert demo.containers[EMBED_ID].restart_policy == "no"
        await select(pilot, app, EMBED)
        await wait_for(pilot, lambda: app.main.check_action("start_unit", ()) is True)
        await run_confirmed(pilot, app, "u")
        report = app.last_report
        assert report is not None and report.plan.kind is ActionKind.START
        assert report.confirmed, report.summary
        assert "$ docker update --restart=always vllm-embed" in "\n".join(
            report.plan.describe(10))
        c = demo.containers[EMBED_ID]
        assert c.state == "running" and c.restart_policy == "always"
        assert report.container_after is not None and report.container_after.state == "running"
        await wait_for(pilot, lambda: app.view.snapshot is not None and sum(
            p.total_gpu_memory_mib for p in app.view.snapshot.processes
            if p.unit == f"docker-{EMBED_ID}.scope") >= 1000)
