"""End to end: the real dashboard, over real SSH, against real systemd hosts (tests/lab).

Each test boots a fresh container host (~1 s), opens it with the real SSH transport and
drives ``GpudashApp`` with Textual's Pilot: the incident of shared/PRODUCT.md played
through the keyboard, with every claim checked on the host itself (systemctl, /proc and
the stand-in driver), not only on screen.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from lab.probes import alice_pid, wait_host, workers

from gpudash.domain.triage import Flag
from gpudash.domain.units import gib
from gpudash.engine import ActionKind, ExecOptions
from gpudash.transport import open_source
from gpudash.ui.app import GpudashApp
from gpudash.ui.screens import ConfirmModal
from gpudash.ui.widgets.action_log import ActionLog
from gpudash.ui.widgets.holders import HoldersTable
from gpudash.ui.widgets.unit_panel import UnitPanel

pytestmark = pytest.mark.lab

VLLM = "vllm-minimax-m25.service"
WORKER_MIB = 96801
# What the GPUs hold with vLLM gone: alice's kernel on GPU0, embed-server on GPU5,
# the two SGLang schedulers on GPUs 6 and 7.
BASELINE_WITHOUT_VLLM = [1024, 0, 0, 0, 0, 512, 512, 512]
SIZE = (160, 50)
MEM, FLAGS = 1, 2  # holders table columns
INTERVAL = 0.3
OPTIONS = ExecOptions(term_timeout=2.0, verify_timeout=30.0, poll=0.25)


# --- helpers (small copies of tests/test_ui.py's, with longer waits for real hosts) ---


async def wait_for(pilot, predicate: Callable[[], object], within: float = 15.0,
                   what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await pilot.pause(0.05)


async def select(pilot, app: GpudashApp, key: str) -> None:  # type: ignore[no-untyped-def]
    await wait_for(
        pilot, lambda: key in [str(k.value) for k in app.query_one(HoldersTable).rows],
        what=f"row {key}",
    )
    app.query_one(HoldersTable).select_key(key)
    await wait_for(pilot, lambda: app.selected_key == key, what=f"selection {key}")


async def run_confirmed(pilot, app: GpudashApp, key: str,  # type: ignore[no-untyped-def]
                        within: float = 45.0) -> None:
    before = len(app.reports)
    await pilot.press(key)
    await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed,
                   what="confirm dialog")
    await pilot.press("y")
    try:
        await wait_for(pilot, lambda: len(app.reports) > before, within=within,
                       what=f"report of action {key!r}")
    except AssertionError as exc:  # where the action stood: its progress panel, the log
        from gpudash.ui.widgets.progress import ActionProgressPanel

        panels = [w for s in app.screen_stack for w in s.query(ActionProgressPanel)]
        panel = str(panels[0].render()) if panels else "(none)"
        screen = app.screen  # a dialog asking again (the plan changed meanwhile) says why
        asking = ("\n".join(screen.lines) if isinstance(screen, ConfirmModal)
                  else type(screen).__name__)
        raise AssertionError(f"{exc}\nprogress: {panel}\nlog: {log_text(app)}\n"
                             f"screen: {asking}") from None


def log_text(app: GpudashApp) -> str:
    return "\n".join(f"{e.action} | {e.outcome}" for e in app.query_one(ActionLog).entries)


def unit_of(app: GpudashApp, name: str = VLLM):  # type: ignore[no-untyped-def]
    snap = app.view.snapshot
    return None if snap is None else snap.unit(name)


def group_flags(app: GpudashApp, name: str = VLLM) -> frozenset[Flag]:
    group = app.view.triage.group(name) if app.view.triage else None
    return frozenset() if group is None else group.flags


def header_text(app: GpudashApp) -> str:
    return str(app.query_one("#header").render())


def open_lab(host, **kw):  # type: ignore[no-untyped-def]
    return open_source(
        host.alias, interval=INTERVAL, ssh_config=host.ssh_config_path,
        known_hosts=host.known_hosts_path, **kw,
    )


def make_app(sources, **kw) -> GpudashApp:  # type: ignore[no-untyped-def]
    return GpudashApp(sources, interval=INTERVAL, read_only=False, theme=None,
                      exec_options=OPTIONS, **kw)


# --- (a) kill -9 of the main PID respawns: the app shows it ---------------------------


async def test_kill_main_pid_shows_respawn(lab_host) -> None:
    h = lab_host
    alice = alice_pid(h)
    main0 = int(h.unit_show(VLLM, ["MainPID"])["MainPID"])
    old_workers = wait_host(lambda: len(w := workers(h)) == 8 and w, what="8 workers")
    source = open_lab(h)
    app = make_app([source])
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: unit_of(app) is not None, what="first snapshot")
            assert unit_of(app).main_pid == main0
            # the header is redrawn at its own tick, not with the first snapshot
            await wait_for(pilot, lambda: "connected" in header_text(app), what="header")
            await select(pilot, app, f"p:{main0}")
            await run_confirmed(pilot, app, "k")
            report = app.last_report
            assert report is not None and report.plan.kind is ActionKind.KILL
            assert [t.pid for t in report.plan.targets] == [main0]
            # systemd respawned it: a new MainPID, and the holders view says RESPAWNED
            await wait_for(pilot, lambda: (u := unit_of(app)) is not None
                           and u.main_pid not in (None, main0), what="new MainPID")
            await wait_for(pilot, lambda: Flag.RESPAWNED in group_flags(app),
                           what="RESPAWNED flag")
            # the row shows it at the next redraw (at most 5 a second)
            def flags_cell() -> str:
                return str(app.query_one(HoldersTable).get_row(f"u:{VLLM}")[FLAGS])

            # (short, RESP, where the command line takes the room)
            await wait_for(pilot, lambda: "RESP" in flags_cell(), what="RESPAWNED row")
            await select(pilot, app, f"u:{VLLM}")
            panel = str(app.query_one(UnitPanel).render())
            assert "Restart=always: killing the main PID respawns it" in panel, panel
            assert "RESPAWNED" in panel
            # the 8 old workers are now orphans in the app too (PPID 1, still holding)
            await wait_for(pilot, lambda: {p.pid for p in app.view.triage.orphans()}
                           >= set(old_workers), what="old workers flagged ORPHAN")
    finally:
        await source.close()
    # the host agrees: NRestarts grew, a new main, the old workers live on with PPID 1
    s = h.unit_show(VLLM, ["NRestarts", "MainPID", "ActiveState"])
    assert int(s["NRestarts"]) >= 1 and s["ActiveState"] == "active"
    assert int(s["MainPID"]) != main0 and not h.alive(main0)
    for p in old_workers:
        assert h.proc(p)["ppid"] == "1"
    assert all(u >= WORKER_MIB for u in h.gpu_used_mib())
    assert h.alive(alice)


# --- (b)+(c) stop+disable leaves ORPHANs; reap brings every GPU back -------------------


async def test_stop_disable_shows_orphans_then_reap_frees(lab_host) -> None:
    h = lab_host
    alice = alice_pid(h)
    old_workers = wait_host(lambda: len(w := workers(h)) == 8 and w, what="8 workers")
    source = open_lab(h)
    app = make_app([source])
    try:
        async with app.run_test(size=SIZE) as pilot:
            await select(pilot, app, f"u:{VLLM}")
            # (b) stop + disable: the unit goes down, its 8 workers are ORPHANs
            await run_confirmed(pilot, app, "D")
            report = app.last_report
            assert report is not None and report.plan.kind is ActionKind.STOP_DISABLE
            await wait_for(pilot, lambda: unit_of(app).active_state == "inactive",
                           what="inactive")
            await wait_for(pilot, lambda: unit_of(app).unit_file_state == "disabled",
                           what="disabled")
            await wait_for(
                pilot,
                lambda: {p.pid for p in app.view.triage.orphans()} == set(old_workers),
                what="the 8 workers flagged ORPHAN",
            )
            await pilot.pause(0.2)
            table = app.query_one(HoldersTable)
            seen_gpus = set()
            for orphan in app.view.triage.orphans():
                row = [str(c) for c in table.get_row(f"p:{orphan.pid}")]
                assert "ORPH" in row[FLAGS], row  # ORPH where the command takes the room
                [(gpu, mib)] = orphan.gpu_memory_mib.items()
                assert mib == WORKER_MIB
                assert row[MEM] == f"GPU{gpu} {gib(WORKER_MIB)}" == f"GPU{gpu} 94.5 GiB"
                seen_gpus.add(gpu)
            assert seen_gpus == set(range(8))
            # the host agrees
            s = h.unit_show(VLLM, ["ActiveState", "UnitFileState"])
            assert s == {"ActiveState": "inactive", "UnitFileState": "disabled"}
            for p in old_workers:
                info = h.proc(p)
                assert info is not None and info["ppid"] == "1", info
            assert all(u >= WORKER_MIB for u in h.gpu_used_mib())

            # (c) reap the orphans: every GPU back to baseline, confirmed on screen
            await select(pilot, app, f"u:{VLLM}")
            await run_confirmed(pilot, app, "o")
            report = app.last_report
            assert report is not None and report.plan.kind is ActionKind.REAP
            assert report.confirmed, report.describe()
            assert sorted(g.index for g in report.gpus) == list(range(8))
            assert all(g.confirmed for g in report.gpus)
            progress = str(app.query_one("#progress").render())
            assert "✔ confirmed: " in progress and progress.count("confirmed") == 1, progress
            assert "Reap orphans" in log_text(app) and "confirmed" in log_text(app)
            await wait_for(pilot, lambda: app.view.snapshot.used_by_gpu()
                           == dict(enumerate(BASELINE_WITHOUT_VLLM)), what="baseline on screen")
            assert app.view.triage.orphans() == ()
    finally:
        await source.close()
    assert h.gpu_used_mib() == BASELINE_WITHOUT_VLLM
    assert not any(h.alive(p) for p in old_workers)
    assert workers(h) == []
    assert h.alive(alice)


# --- the fleet of lab hosts, named by a glob over their ssh config -----------------------


async def test_fleet_by_glob_shows_the_orphans_and_the_reap_that_frees_them(
    lab_hosts,
) -> None:
    from gpudash.transport.selection import select_hosts
    from gpudash.ui.fleet_screen import FleetScreen

    hosts = lab_hosts(2)
    names = select_hosts(["labhost*"], ssh_config=hosts[0].ssh_config_path)
    assert all(h.alias in names for h in hosts), names
    sick, well = hosts
    old_workers = wait_host(lambda: len(w := workers(sick)) == 8 and w, what="8 workers")
    # the incident's step 2, by hand on the host: the unit down, its TP workers left
    sick.ssh("systemctl", "stop", VLLM, check=True)
    sick.ssh("systemctl", "disable", VLLM, check=True)
    sources = [open_lab(h) for h in hosts]
    app = make_app(sources)

    def row(i: int) -> dict[str, str]:
        table = app.fleet.table
        keys = [str(c.value) for c in table.columns]
        return dict(zip(keys, (c.plain for c in table.get_row(str(i))), strict=True))

    try:
        async with app.run_test(size=SIZE) as pilot:
            assert isinstance(app.screen, FleetScreen)
            await wait_for(pilot, lambda: row(0)["orphans"] == "8", within=30,
                           what="the old workers counted as orphans in the fleet")
            assert float(row(0)["reclaim"]) >= 8 * WORKER_MIB / 1024
            assert row(1)["orphans"] == "0" and row(1)["reclaim"] == "0.0"
            assert "connected" in row(0)["link"] and "connected" in row(1)["link"]
            assert app.fleet._shown[0] == 0  # most reclaimable first
            await pilot.press("enter")
            assert app.current_host == 0 and not app.fleet_shown
            await select(pilot, app, f"u:{VLLM}")
            await run_confirmed(pilot, app, "o", within=60)
            assert app.last_report is not None and app.last_report.confirmed, (
                "\n".join(app.last_report.describe()) if app.last_report else None)
            await pilot.press("F")
            assert app.fleet_shown
            await wait_for(pilot, lambda: row(0)["reclaim"] == "0.0", within=20,
                           what="nothing left to reclaim")
            assert row(0)["orphans"] == "0"
            assert row(0)["action"].startswith("✔ Reap orphans"), row(0)
            assert row(1)["action"] == "—"
    finally:
        for s in sources:
            await s.close()
    assert sick.gpu_used_mib() == BASELINE_WITHOUT_VLLM
    assert not any(sick.alive(p) for p in old_workers)
    assert all(u >= WORKER_MIB for u in well.gpu_used_mib())


# --- (g) non-root without sudo: actions disabled with the reason ------------------------


async def test_non_root_without_sudo_cannot_act(lab_host) -> None:
    h = lab_host
    alice = alice_pid(h)
    main0 = int(h.unit_show(VLLM, ["MainPID"])["MainPID"])
    source = open_source(
        f"operator@{h.alias}", interval=INTERVAL, ssh_config=h.ssh_config_path,
        known_hosts=h.known_hosts_path,
    )
    app = make_app([source])
    notes: list[str] = []
    try:
        async with app.run_test(size=SIZE) as pilot:
            original = app.notify

            def spy(message: str, **kwargs: object) -> None:
                notes.append(message)
                original(message, **kwargs)  # type: ignore[arg-type]

            app.notify = spy  # type: ignore[method-assign]
            await wait_for(pilot, lambda: app.view.snapshot is not None, what="snapshot")
            snap = app.view.snapshot
            assert snap.can_act is False
            assert "not root" in (snap.cannot_act_reason or ""), snap.cannot_act_reason
            assert "--sudo" in snap.cannot_act_reason
            # the operator still sees everything: the unit and its workers
            assert snap.unit(VLLM) is not None and snap.unit(VLLM).main_pid == main0
            await select(pilot, app, f"p:{main0}")
            assert app.main.check_action("kill", ()) is None  # greyed, with the reason
            for key in ("k", "t"):
                await pilot.press(key)
            await select(pilot, app, f"u:{VLLM}")
            for key in ("s", "D", "r"):
                await pilot.press(key)
            await pilot.pause(0.3)
            assert not isinstance(app.screen, ConfirmModal)
            assert app.reports == []
            assert len(notes) == 5, notes
            assert all("not root" in n for n in notes), notes
    finally:
        await source.close()
    s = h.unit_show(VLLM, ["ActiveState", "UnitFileState", "NRestarts", "MainPID"])
    assert s == {"ActiveState": "active", "UnitFileState": "enabled", "NRestarts": "0",
                 "MainPID": str(main0)}
    assert h.alive(alice)


# --- (h) three hosts, one powered off and booted again ---------------------------------


def host_row(app: GpudashApp, index: int) -> list[str]:
    return [str(c) for c in app.query_one("#hosts").get_row_at(index)]


async def test_three_hosts_one_powered_off_and_back(lab_hosts) -> None:
    hosts = lab_hosts(3)
    sources = [open_lab(h) for h in hosts]
    app = make_app(sources)
    down = 1
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: all(v.state == "connected" and v.snapshot is not None
                                              for v in app.views), what="3 hosts connected")
            assert [v.snapshot.host for v in app.views] == [h.alias for h in hosts]
            assert app.fleet_shown  # several hosts open on the fleet table
            app.open_host(0)
            await pilot.pause()
            await pilot.press("2")
            assert app.current_host == down
            first = app.views[down].snapshot.taken_at
            await asyncio.to_thread(hosts[down].power_off)
            # the powered-off host turns error (or stale), the others keep updating
            await wait_for(
                pilot,
                lambda: app.views[down].status(app.clock(), app.stale_after)[1] != "ok",
                within=30, what="host 2 not ok",
            )
            down_words = ("error", "stale", "reconnecting")
            await wait_for(pilot, lambda: any(w in header_text(app) for w in down_words),
                           what="header says host 2 is down")
            assert hosts[down].alias in header_text(app)
            await wait_for(
                pilot, lambda: any(w in host_row(app, down)[2] for w in down_words),
                what="host list says host 2 is down")
            for i in (0, 2):
                before = app.views[i].received_at
                await wait_for(pilot, lambda i=i, b=before: app.views[i].received_at > b,
                               within=5, what=f"host {i + 1} still updating")
                assert app.views[i].age(app.clock()) < 2.0
                assert app.views[i].state == "connected"
                assert "connected" in host_row(app, i)[2]
            # boot it again: the app reconnects by itself and fresh samples arrive
            await asyncio.to_thread(hosts[down].boot)
            booted = time.time()
            await wait_for(
                pilot,
                lambda: app.views[down].state == "connected"
                and app.views[down].snapshot.taken_at > booted - 1,
                within=45, what="host 2 reconnected",
            )
            assert app.views[down].snapshot.taken_at > first
            assert app.views[down].age(app.clock()) < 2.0
            await wait_for(pilot, lambda: "connected" in header_text(app), what="header")
            await wait_for(pilot, lambda: "connected" in host_row(app, down)[2], what="host row")
            assert app.views[down].snapshot.unit(VLLM).n_restarts == 0
    finally:
        for s in sources:
            await s.close()
    for h in hosts:
        assert h.alive(alice_pid(h))


async def test_non_root_with_sudo_can_act(lab_host) -> None:
    h = lab_host
    alice = alice_pid(h)
    old_workers = wait_host(lambda: len(w := workers(h)) == 8 and w, what="8 workers")
    h.grant_sudo()
    source = open_source(
        f"operator@{h.alias}", interval=INTERVAL, sudo=True, ssh_config=h.ssh_config_path,
        known_hosts=h.known_hosts_path,
    )
    app = make_app([source])
    try:
        async with app.run_test(size=SIZE) as pilot:
            await select(pilot, app, f"u:{VLLM}")
            assert app.view.snapshot.can_act is True
            assert app.main.check_action("stop_disable", ()) is True
            await run_confirmed(pilot, app, "D")
            await wait_for(pilot, lambda: unit_of(app).active_state == "inactive",
                           what="inactive")
            await wait_for(pilot, lambda: {p.pid for p in app.view.triage.orphans()}
                           == set(old_workers), what="orphans")
            await select(pilot, app, f"u:{VLLM}")
            await run_confirmed(pilot, app, "o")  # signals root's processes through sudo
            assert app.last_report.confirmed, app.last_report.describe()
    finally:
        await source.close()
    s = h.unit_show(VLLM, ["ActiveState", "UnitFileState"])
    assert s == {"ActiveState": "inactive", "UnitFileState": "disabled"}
    assert not any(h.alive(p) for p in old_workers)
    assert h.gpu_used_mib() == BASELINE_WITHOUT_VLLM
    assert h.alive(alice)
