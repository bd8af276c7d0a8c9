"""A Slurm node drained and resumed from the dashboard (issue 31): on a Slurm node ``N``
asks why, plans the drain (the node, the reason exactly as Slurm gets it, the jobs left to
finish), and, confirmed, proves it by the node's state; the drained node's jobs say so on
their panel with the key that resumes it, and ``ctrl+n`` does, proven the same way. The
reason is the operator's text: it reaches the plan and Slurm as typed, never as markup.
On a host that is no Slurm node neither key is offered."""

from __future__ import annotations

from support import until
from test_ui import make_app, run_confirmed, select, wait_for
from textual.widgets import Static

from gpudash.demo.fleet import SLURM_NODE, ScenarioHost
from gpudash.demo.host import DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.engine import ActionKind
from gpudash.ui.reason_prompt import ReasonPrompt
from gpudash.ui.screens import ConfirmModal
from gpudash.ui.widgets.unit_panel import UnitPanel

SIZE = (160, 50)
KIND = "slurm job"
TYPED = 'ECC on GPU 3 [bold]"x"[/bold] $(reboot); `id`'


def panel(app) -> str:  # type: ignore[no-untyped-def]
    return str(app.query_one(UnitPanel).render())


async def test_n_drains_the_node_with_the_typed_reason_and_ctrl_n_resumes_it() -> None:
    host = ScenarioHost(SLURM_NODE, "slurm", clock=SteppedClock())
    app = make_app(host)
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, "u:slurm:4118")  # a job's row: bob's, running
        labels = [b.binding.description for b in app.screen.active_bindings.values()
                  if b.enabled]
        assert "Drain node" in str(labels)
        await pilot.press("N")
        await wait_for(pilot, lambda: isinstance(app.screen, ReasonPrompt))
        await pilot.press(*TYPED)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        shown = "\n".join(app.screen.lines)
        assert f'drained: {TYPED}"' in shown  # literally, in the scontrol argument
        drawn = str(app.screen.query_one("#plan-text", Static).render())
        assert f'drained: {TYPED}"' in drawn  # drawn as typed: the markup not applied
        assert "job 4118 (bob's llama-ft, RUNNING, GPUs 0,1,2,3)" in shown
        await pilot.press("y")
        await until(pilot, lambda: app.last_report is not None, what="the drain's verdict")
        report = app.last_report
        assert report is not None and report.plan.kind is ActionKind.DRAIN
        assert report.confirmed, report.summary
        node = host.sim.owners[KIND][""]
        assert node["drain"] is True and node["reason"].endswith(f"drained: {TYPED}")
        assert host.sim.owners[KIND]["4118"]["state"] == "RUNNING"  # left to finish

        # the job's panel names the drained node, its reason, and the key that resumes it
        await until(pilot, lambda: "is drained" in panel(app), what="the drain on the panel")
        text = panel(app)
        assert TYPED in text and " ctrl+n  resume the node" in text.replace("^n", "ctrl+n")
        await run_confirmed(pilot, app, "ctrl+n")
        report = app.last_report
        assert report is not None and report.plan.kind is ActionKind.RESUME
        assert report.confirmed, report.summary
        assert host.sim.owners[KIND][""]["drain"] is False


async def test_esc_at_the_reason_plans_nothing() -> None:
    host = ScenarioHost(SLURM_NODE, "slurm", clock=SteppedClock())
    app = make_app(host)
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, "u:slurm:4116")
        await pilot.press("N")
        await wait_for(pilot, lambda: isinstance(app.screen, ReasonPrompt))
        await pilot.press("x", "escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, ReasonPrompt))
        await pilot.pause(0.2)
        assert not isinstance(app.screen, ConfirmModal)
        assert not host.sim.owners[KIND][""].get("drain")


async def test_a_host_that_is_no_slurm_node_offers_neither_key() -> None:
    host = DemoHost(clock=SteppedClock())
    app = make_app(host)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.view.snapshot is not None, what="a sample")
        screen = app.screen
        assert screen.availability("drain_node")[0] is False  # hidden, not greyed
        assert "is not a Slurm node" in screen.availability("drain_node")[1]
        titles = [t for t, *_ in screen.palette_commands()]
        assert not [t for t in titles if "Slurm node" in t]
        await pilot.press("N")
        await wait_for(pilot, lambda: any("is not a Slurm node" in str(n.message)
                                          for n in app._notifications))
        assert not isinstance(app.screen, ReasonPrompt)
