"""The unattributed row in the dashboard (issue 34): the unit panel says, per GPU, what
was checked of the memory no process holds and whether a reset may give it back; ``G``
opens the reset's plan for the GPU nothing holds and, confirmed, gives the memory back;
on a GPU a process holds it is refused, the process named, and nothing is planned."""

from __future__ import annotations

from support import until
from test_ui import make_app, run_confirmed, select, wait_for

from gpudash.demo.fleet import ScenarioHost
from gpudash.domain.clock import SteppedClock
from gpudash.engine import ActionKind
from gpudash.ui.screens import ConfirmModal
from gpudash.ui.widgets.holders import UNATTRIBUTED_KEY
from gpudash.ui.widgets.unit_panel import UnitPanel

SIZE = (160, 50)


def panel(app) -> str:  # type: ignore[no-untyped-def]
    return str(app.query_one(UnitPanel).render())


async def test_the_unattributed_row_explains_and_g_resets_the_gpu_nothing_holds() -> None:
    host = ScenarioHost("demo-gpu09", "leak", clock=SteppedClock())
    app = make_app(host)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.view.snapshot is not None and app.view.snapshot.gpu(
            3).memory_used_mib == 6144, what="the model's memory back, the leak left")
        await select(pilot, app, UNATTRIBUTED_KEY)
        text = panel(app)
        assert "GPU 3: 6.0 GiB" in text and "GPU 0: 4.0 GiB" in text
        assert "NVML's process list: read; it lists no process on it" in text
        assert "/dev/nvidia3: every process's open files and mappings read" in text
        assert "no reset: pid 90211 (python, alice) holds 2.0 GiB on GPU 0" in text
        assert " G  reset the GPU" in text  # offered for GPU 3, the one nothing holds
        await pilot.press("G")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        shown = "\n".join(app.screen.lines)
        assert "nvidia-smi --gpu-reset -i 3" in shown and "nothing holds GPU 3" in shown
        await pilot.press("n")  # declined: nothing sent
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmModal))
        assert host.driver.leaks.get(3) == 6144
        await run_confirmed(pilot, app, "G")
        report = app.last_report
        assert report is not None and report.plan.kind is ActionKind.GPU_RESET
        assert report.confirmed, report.summary
        await until(pilot, lambda: "GPU 3:" not in panel(app), what="GPU 3 explained no more")


async def test_g_on_a_gpu_a_process_holds_says_who_and_plans_nothing() -> None:
    host = ScenarioHost("demo-gpu09", "leak", clock=SteppedClock())
    app = make_app(host)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.view.snapshot is not None and app.view.snapshot.gpu(
            1).memory_used_mib == 0, what="the model's memory back")
        host.driver.leaks.pop(3)  # only GPU 0's is left, beside alice's kernel
        await until(pilot, lambda: app.view.snapshot.gpu(3).memory_used_mib == 0)
        await select(pilot, app, UNATTRIBUTED_KEY)
        assert " G  reset" not in panel(app)
        await pilot.press("G")
        await wait_for(pilot, lambda: any("pid 90211 (python, alice)" in str(n.message)
                                          for n in app._notifications))
        assert not isinstance(app.screen, ConfirmModal)
        assert host.driver.leaks == {0: 4096}
