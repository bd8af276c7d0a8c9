"""Acting from the fleet table: ctrl+o reaps the orphans of the hosts shown, each planned,
one dialog for all, each audited and proven; each verdict is its host's Last action
(issue 33, item 10: reached for in the operator's walk and not found)."""

from __future__ import annotations

from support import until
from test_ui import wait_for
from test_ui_fleet import SIZE, all_read, cells, fleet, fleet_app, shown_names

from gpudash.ui.fleet_acting import TITLE
from gpudash.ui.screens import ConfirmModal


async def test_ctrl_o_reaps_the_hosts_shown_each_planned_and_proven() -> None:
    app = fleet_app(fleet(6))
    async with app.run_test(size=SIZE) as pilot:
        await all_read(pilot, app)
        orphaned = {"demo-gpu01", "demo-gpu04"}  # the incident's, a stopped unit's workers

        def orphans(name: str) -> int:
            view = next(v for v in app.views if v.name == name)
            return 0 if view.triage is None else len(view.triage.orphans())

        await until(pilot, lambda: all(orphans(n) for n in orphaned), what="the orphans")
        await pilot.press(*"orphans")
        await wait_for(pilot, lambda: set(shown_names(app)) == orphaned)
        await pilot.press("ctrl+o")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal)
                       and app.screen.armed)
        lines = "\n".join(app.screen.lines)  # type: ignore[attr-defined]
        assert "== demo-gpu01" in lines and "== demo-gpu04" in lines, lines
        assert "demo-gpu02" not in lines  # not shown: not planned
        log_before = len(app.main.action_log.entries)
        await pilot.press("y")
        # while the first host is reaped, each row says where it stands (the clock is
        # stepped by nobody here: the first host waits on it, the second is queued)
        index = {v.name: i for i, v in enumerate(app.views)}
        await wait_for(pilot, lambda: "queued (2 of 2)" in cells(app, index["demo-gpu04"])[
            "action"] and "(1 of 2)" in cells(app, index["demo-gpu01"])["action"])
        assert len(app.main.action_log.entries) == log_before  # the log: verdicts only
        await until(pilot, lambda: {n for n, a in app.last_actions.items()
                                    if a.ok is not None} == orphaned,
                    within_s=120, what="both verdicts")
        # the stopped unit's workers gone, their memory back: proven
        assert app.last_actions["demo-gpu04"].ok is True, app.last_actions["demo-gpu04"]
        # the incident's unit respawned meanwhile: the orphans are gone, but its new
        # workers took the memory, and the verdict says so rather than "confirmed"
        incident = app.last_actions["demo-gpu01"]
        assert incident.ok is False and "new holder" in incident.outcome, incident
        assert all("Reap orphans" in app.last_actions[n].title for n in orphaned)
        assert len(app.main.action_log.entries) == log_before + 2
        await until(pilot, lambda: not any(orphans(n) for n in orphaned), what="reaped")
        assert not app.running


async def test_cancelled_it_sends_nothing_and_says_so_per_host() -> None:
    app = fleet_app(fleet(6))
    async with app.run_test(size=SIZE) as pilot:
        await all_read(pilot, app)
        await until(pilot, lambda: "orphans" in app.fleet.row(0).states, what="orphans")
        await pilot.press(*"gpu01")
        await wait_for(pilot, lambda: shown_names(app) == ["demo-gpu01"])
        before = len(app.views[0].triage.orphans())  # type: ignore[union-attr]
        await pilot.press("ctrl+o")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal)
                       and app.screen.armed)
        assert TITLE in str(app.screen.title_text)  # type: ignore[attr-defined]
        await pilot.press("n")
        await wait_for(pilot, lambda: "demo-gpu01" in app.last_actions)
        assert app.last_actions["demo-gpu01"].outcome == "cancelled: nothing was done"
        assert len(app.views[0].triage.orphans()) == before  # type: ignore[union-attr]


async def test_ctrl_r_reclaims_the_picked_unit_on_every_host_shown() -> None:
    # a model taken off a rack: one unit, stopped, disabled and reaped on every host shown
    from gpudash.demo.host import MINIMAX
    from gpudash.ui.fleet_pick import UnitPicker

    app = fleet_app(fleet(6))
    names = {"demo-gpu02", "demo-gpu06"}  # the healthy hosts: the model serves there
    async with app.run_test(size=SIZE) as pilot:
        await all_read(pilot, app)
        await pilot.press(*"*0[26]")
        await wait_for(pilot, lambda: set(shown_names(app)) == names)
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: isinstance(app.screen, UnitPicker))
        picker = app.screen
        assert isinstance(picker, UnitPicker)
        assert picker.units[0][:2] == (MINIMAX, 2)  # the most widespread first
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal)
                       and app.screen.armed)
        assert MINIMAX in str(app.screen.title_text)  # type: ignore[attr-defined]
        lines = "\n".join(app.screen.lines)  # type: ignore[attr-defined]
        assert "== demo-gpu02" in lines and "== demo-gpu06" in lines, lines
        assert "demo-gpu01" not in lines  # not shown: left alone
        await pilot.press("y")
        await until(pilot, lambda: {n for n, a in app.last_actions.items()
                                    if a.ok is not None} >= names,
                    within_s=180, what="both verdicts")
        for view in (v for v in app.views if v.name in names):
            verdict = app.last_actions[view.name]
            assert verdict.ok is True and "Reclaim" in verdict.title, verdict
            await until(pilot, lambda v=view: (u := v.snapshot.unit(MINIMAX)) is not None
                        and u.active_state == "inactive", what="the unit stopped")
            unit = view.snapshot.unit(MINIMAX)  # type: ignore[union-attr]
            assert unit is not None and unit.unit_file_state == "disabled"
            assert not any(p.unit == MINIMAX for p in view.snapshot.processes)  # type: ignore[union-attr]
        incident = next(v for v in app.views if v.name == "demo-gpu01")
        assert incident.snapshot.unit(MINIMAX).active_state == "active"  # type: ignore[union-attr]
        assert not app.running
