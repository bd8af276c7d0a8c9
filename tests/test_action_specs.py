"""Every action is written once: its spec says when it fits, and then it plans."""

from __future__ import annotations

import signal
from dataclasses import replace

from support import clock_of

from gpudash.demo.host import MINIMAX, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.domain.model import HostSnapshot
from gpudash.domain.triage import triage
from gpudash.engine import SPECS, ActionKind, Needs, PlanError, Selection, unit_ref


def test_every_action_has_one_spec_with_its_own_key_and_binding() -> None:
    assert set(SPECS) == set(ActionKind)
    assert len({s.key for s in SPECS.values()}) == len(SPECS)
    assert len({s.binding_id for s in SPECS.values()}) == len(SPECS)
    # binding ids are what users' keymap files name: they must not change
    assert {s.binding_id for s in SPECS.values()} == {
        "gpudash.stop_unit", "gpudash.disable_unit", "gpudash.stop_disable",
        "gpudash.terminate", "gpudash.kill", "gpudash.reap", "gpudash.reclaim",
        "gpudash.start_unit", "gpudash.restart_unit", "gpudash.enable_unit", "gpudash.swap",
        "gpudash.remove_container", "gpudash.fix_unit", "gpudash.send_signal",
        "gpudash.gpu_reset", "gpudash.drain_node", "gpudash.resume_node"}


def selections(snap: HostSnapshot) -> list[Selection]:
    out = [Selection(), Selection(owner=unit_ref(MINIMAX)),
           Selection(owner=unit_ref("session-4.scope"))]
    out += [Selection(pid=p.pid) for p in snap.processes]
    out += [Selection(owner=unit_ref(MINIMAX), pid=p.pid) for p in snap.processes
            if p.unit == MINIMAX]
    return out


async def check_precheck_agrees_with_planning(snap: HostSnapshot) -> None:
    result = triage(snap)
    for spec in SPECS.values():
        for sel in selections(snap):
            if sel.owner == unit_ref("session-4.scope") and spec.needs is not Needs.PROCESS:
                continue  # the UI never offers a session as a unit (selection_of)
            if spec.needs is Needs.UNIT_AND_TARGET:
                continue  # the target is chosen after the precheck: tested with the swap
            if spec.kind is ActionKind.FIX:
                continue  # systemctl cat is read after the precheck: tests/test_cli_fix.py
            reason = spec.precheck(result, sel)
            if spec.kind is ActionKind.SIGNAL:
                sel = replace(sel, signal=signal.SIGHUP)  # picked after the precheck
            try:
                spec.plan(snap, sel)
            except PlanError as exc:
                if " does not fit" in str(exc):  # memory, not the selection: the plan says
                    continue  # it when asked (the key stays available, as for a swap)
                assert reason is not None, f"{spec.name} {sel}: precheck passed, plan: {exc}"
            else:
                assert reason is None, f"{spec.name} {sel}: plan works, precheck: {reason}"


async def test_precheck_says_yes_exactly_when_a_plan_can_be_made() -> None:
    demo = DemoHost(clock=SteppedClock())
    await check_precheck_agrees_with_planning(await demo.sample())  # the incident at start
    main = demo.units[MINIMAX].main_pid
    assert main is not None
    await demo.signal(main, demo.processes[main].start_ticks, signal.SIGKILL)
    await clock_of(demo).advance(3.0)
    await check_precheck_agrees_with_planning(await demo.sample())  # respawned, orphans
    await demo.systemctl("stop", MINIMAX)
    await check_precheck_agrees_with_planning(await demo.sample())  # stopped, 16 orphans


async def test_read_only_host_explains_itself_for_every_action() -> None:
    snap = await DemoHost(read_only=True).sample()
    result = triage(snap)
    for spec in SPECS.values():
        assert spec.precheck(result, Selection(owner=unit_ref(MINIMAX), pid=90211)) == (
            "read-only mode")


async def test_a_fix_is_offered_for_what_only_the_learned_stop_time_shows() -> None:
    # Seen: the dashboard's precheck linted the unit without what gpudash had learned of
    # its stops here, so a unit whose only trap was a TimeoutStopSec shorter than its last
    # stop took was greyed "nothing to fix" while `gpudash fix` fixed it.
    from gpudash.domain.lint import Learned

    snap = await DemoHost().sample()
    clean = replace(snap.unit(MINIMAX), kill_mode="control-group", restart="always",
                    timeout_stop_s=300.0, exec_start="/usr/bin/vllm serve",
                    start_limit_interval_s=600.0)
    snap = replace(snap, units=tuple(clean if u.name == MINIMAX else u for u in snap.units))
    fix = SPECS[ActionKind.FIX]
    assert fix.precheck(triage(snap), Selection(owner=unit_ref(MINIMAX))) is not None  # nothing yet
    learned = triage(snap, learned={MINIMAX: Learned(stop_s=400.0)})
    assert fix.precheck(learned, Selection(owner=unit_ref(MINIMAX))) is None
