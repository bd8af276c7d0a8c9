"""The holders' filter by flag (issue 33, item 10: "filtering holders by flag, as the fleet
filter allows"). Seen: typing ``orphan`` matched the owner row's ``8×ORPHAN`` and kept every
process of that owner, orphan or not."""

from __future__ import annotations

from support import run_until
from test_ui_holder_reasons import PAL

from gpudash.demo.host import MINIMAX, NOTEBOOK_MIB, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.domain.triage import Flag, triage
from gpudash.ui.widgets.holder_filter import filter_rows
from gpudash.ui.widgets.holders import holder_rows


async def respawned_demo() -> DemoHost:
    """The incident after `kill -9` of the server: systemd respawned it, the old workers
    are ORPHAN, the new ones and alice's kernel are not."""
    clock = SteppedClock()
    demo = DemoHost(clock=clock)
    main = demo.units[MINIMAX].main_pid
    assert main is not None
    await demo.signal(main, demo.processes[main].start_ticks, 9)

    def respawned() -> bool:
        snap = demo.snapshot()  # the simulation moves on when it is looked at
        unit = snap.unit(MINIMAX)
        return unit is not None and unit.main_pid not in (None, main) and len(
            [p for p in snap.processes if p.unit == MINIMAX and p.gpu_memory_mib]) > 9

    await run_until(clock, respawned, what="the respawned server and its workers")
    return demo


async def test_a_flags_name_keeps_the_rows_that_carry_it_under_their_owner() -> None:
    demo = await respawned_demo()
    result = triage(demo.snapshot())
    rows = holder_rows(result, PAL)
    orphans = {f"p:{p.pid}" for p in result.orphans()}
    assert orphans
    for word in ("orphan", "ORPH", " Orphan "):
        kept = filter_rows(rows, word)
        procs = {r.key for r in kept if r.key.startswith("p:")}
        assert procs == orphans, word  # every orphan, nothing else
        assert [r.key for r in kept if r.key.startswith("u:")] == [f"u:{MINIMAX}"]
    assert len({r.key for r in rows if r.key.startswith("p:")} - orphans) > 2  # the others
    # a group flag: the respawned unit with what it has
    respawned = filter_rows(rows, "respawned")
    assert f"u:{MINIMAX}" in [r.key for r in respawned]
    assert all(Flag.RESPAWNED in r.flags for r in respawned if r.key.startswith("u:"))
    # a plain word is still a text filter: alice's kernel by its user
    alice = filter_rows(rows, "alice")
    assert any(NOTEBOOK_MIB and r.key.startswith("p:") for r in alice)
    assert not any(r.key in orphans for r in alice)
