"""A GPU reset (issue 34): memory no process holds is given back by ``nvidia-smi
--gpu-reset -i N``, planned only where nothing holds the GPU, confirmed, audited and
proven by the GPU's memory back to its baseline; refused with the reason otherwise (a
process holds it: named). On the demo's "leak" host: its model gone, 6 GiB left on GPU 3
with nothing there and 4 GiB on GPU 0 beside alice's notebook kernel."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gpudash.demo.fleet import ScenarioHost
from gpudash.domain.clock import SteppedClock
from gpudash.domain.triage import triage
from gpudash.domain.unheld import reset_candidate, unheld_memory
from gpudash.engine import SPECS, ActionKind, ExecOptions, PlanError, Selection, execute
from gpudash.engine.actions import selection_for
from gpudash.transport.commands import gpu_reset_argv

FAST = ExecOptions(term_timeout=3.0, verify_timeout=30.0, poll=0.5, settle=3)
RESET = SPECS[ActionKind.GPU_RESET]


async def stepped(clock: SteppedClock, work: Any) -> Any:
    task = asyncio.ensure_future(work)
    for _ in range(4000):
        if task.done():
            break
        await clock.advance(0.25)
        await asyncio.sleep(0)
    return task.result()


async def leaky() -> tuple[ScenarioHost, SteppedClock]:
    """The leak host, once the model's memory came back at the driver's pace."""
    clock = SteppedClock()
    host = ScenarioHost("demo-gpu09", "leak", clock=clock)
    await host.sample()
    await clock.advance(host.release_delay + 1)
    return host, clock


async def test_a_leaked_gpu_is_reset_with_proof() -> None:
    host, clock = await leaky()
    before = await host.sample()
    assert reset_candidate(before) == 3  # the one nothing holds, before the bigger refusal
    sel = selection_for(triage(before), None, None, gpu=3)
    assert sel == Selection(gpu=3)
    assert RESET.precheck(triage(before), sel) is None
    plan = RESET.plan(before, sel)
    text = "\n".join(plan.describe())
    assert "nvidia-smi --gpu-reset -i 3" in text
    assert "nothing holds GPU 3" in text and "persistence mode is on" in text
    assert dict(plan.expected_free_mib) == {3: 6144 - 256}  # back to under 256 MiB
    report = await stepped(clock, execute(plan, host, FAST))
    assert report.confirmed, report.summary
    assert [c.argv for c in report.commands] == [("nvidia-smi", "--gpu-reset", "-i", "3")]
    (gpu,) = report.gpus
    assert (gpu.index, gpu.before_mib, gpu.after_mib) == (3, 6144, 0)
    after = await host.sample()
    assert after.gpu(3).memory_used_mib == 0 and after.gpu(0).memory_used_mib == 6144
    assert 3 not in unheld_memory(after)


async def test_a_reset_is_refused_while_a_process_holds_the_gpu_and_names_it() -> None:
    host, _clock = await leaky()
    before = await host.sample()
    sel = Selection(gpu=0)
    why = RESET.precheck(triage(before), sel)
    assert why == "GPU 0 not reset: pid 90211 (python, alice) holds 2.0 GiB on GPU 0"
    with pytest.raises(PlanError) as refused:
        RESET.plan(before, sel)
    assert "pid 90211 (python, alice)" in str(refused.value)
    # the driver refuses it too, in nvidia-smi's words: nothing is given back
    result = await host.gpu_reset(0)
    assert result.returncode == 255 and "in use by another process" in result.output
    assert (await host.sample()).gpu(0).memory_used_mib == 6144


@pytest.mark.parametrize(("mode", "reason"), [
    ("mig", "GPU 3 not reset: MIG is enabled: a reset ends every MIG instance's work"),
    ("display", "GPU 3 not reset: a display is active on it (the console's GPU)"),
])
async def test_a_mig_or_display_gpu_is_not_reset(mode: str, reason: str) -> None:
    host, _clock = await leaky()
    getattr(host.driver, mode).add(3)
    before = await host.sample()
    assert RESET.precheck(triage(before), Selection(gpu=3)) == reason


async def test_a_gpu_with_nothing_unexplained_has_nothing_to_reset() -> None:
    host, _clock = await leaky()
    why = RESET.precheck(triage(await host.sample()), Selection(gpu=5))
    assert why == "GPU 5 not reset: no memory that no process holds to give back"


async def test_nothing_selected_says_what_to_select() -> None:
    host, _clock = await leaky()
    assert RESET.precheck(triage(await host.sample()), Selection()) == \
        "select the unattributed row (memory no process holds)"


def test_only_a_gpu_index_is_ever_put_in_the_command() -> None:
    assert gpu_reset_argv(2, sudo=True) == ["sudo", "-n", "nvidia-smi", "--gpu-reset", "-i", "2"]
    for bad in (-1, 64, "0; reboot", True, 1.0):
        with pytest.raises(ValueError):
            gpu_reset_argv(bad, sudo=False)  # type: ignore[arg-type]
