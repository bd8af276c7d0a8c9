"""Behaviour of the dashboard on the demo host: the incident, played through the keyboard."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from pathlib import Path

import pytest
from support import app_clock, until
from textual.widgets import Button

from gpudash.demo.host import MINIMAX, DemoHost
from gpudash.domain import units
from gpudash.domain.clock import SteppedClock
from gpudash.domain.triage import Flag
from gpudash.engine import ActionKind, ExecOptions
from gpudash.protocol.source import HostKeyError, LinkLost
from gpudash.ui.app import GpudashApp
from gpudash.ui.screens import ConfirmModal
from gpudash.ui.widgets.action_log import ActionLog
from gpudash.ui.widgets.gpus import GpuTable
from gpudash.ui.widgets.holders import HoldersTable
from gpudash.ui.widgets.unit_panel import UnitPanel

SIZE = (160, 50)
NOTEBOOK = 90211
MEM, FLAGS = 1, 2  # holders table columns


def make_app(demo: DemoHost, *, read_only: bool = False, theme: str | None = None) -> GpudashApp:
    return GpudashApp(
        [demo], interval=0.25, read_only=read_only, theme=theme,
        exec_options=ExecOptions(term_timeout=10.0, poll=0.5, verify_timeout=120.0),
        clock=app_clock([demo]),
    )


async def wait_for(pilot, predicate, within: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    """Wait in real time for what the screen does by itself (a dialog mounted and armed, a
    key handled, the app's own backoff). What the host simulates is support.until's."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await pilot.pause(0.05)


async def select(pilot, app: GpudashApp, key: str,  # type: ignore[no-untyped-def]
                 opened: bool = False) -> None:
    """Put the cursor on ``key``'s row; ``opened``: open the idle units' fold first (a
    model unit not started is in it)."""
    if opened:  # as an operator does: Right on the fold's row
        from gpudash.ui.widgets.holders import IDLE_KEY

        await select(pilot, app, IDLE_KEY)
        await pilot.press("right")
    await wait_for(pilot, lambda: key in [str(k.value) for k in app.query_one(HoldersTable).rows])
    app.query_one(HoldersTable).select_key(key)
    await wait_for(pilot, lambda: app.selected_key == key)


async def run_confirmed(pilot, app: GpudashApp, key: str) -> None:  # type: ignore[no-untyped-def]
    """Press ``key``, confirm its plan, wait for its report. A plan the host changed
    under is shown again before anything is sent (gpudash.ui.acting): confirmed again,
    as an operator would, at most twice."""
    before = len(app.reports)
    await pilot.press(key)
    await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
    for _ in range(3):
        shown = app.screen

        def answered(shown: object = shown) -> bool:  # its report, or its plan shown again
            return len(app.reports) > before or (isinstance(app.screen, ConfirmModal)
                                                 and app.screen is not shown)

        await pilot.press("y")
        try:  # the action runs on the host's clock: stepped
            await until(pilot, answered)
        except AssertionError:
            break
        if len(app.reports) > before:
            return
        # armed: a dialog's 0.3 s are real ones, the host's time stands still meanwhile
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
    lines = getattr(app.screen, "lines", None)
    raise AssertionError(f"no report after {key!r}: screen {type(app.screen).__name__}, "
                         f"running {app.running}, lines {lines}, notices "
                         f"{[n.message for n in app._notifications]}")


def main_pid(app: GpudashApp) -> int:
    snap = app.view.snapshot
    assert snap is not None
    unit = snap.unit(MINIMAX)
    assert unit is not None and unit.main_pid is not None
    return unit.main_pid


def log_text(app: GpudashApp) -> str:
    return "\n".join(f"{e.action} | {e.outcome}" for e in app.query_one(ActionLog).entries)


async def test_incident_kill_stop_disable_reap() -> None:
    demo = DemoHost(clock=SteppedClock(), release_delay=2)
    app = make_app(demo)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.view.snapshot is not None)
        first_main = main_pid(app)

        # 1. kill -9 of the main process: systemd respawns it, the old workers are orphaned.
        await select(pilot, app, f"p:{first_main}")
        await run_confirmed(pilot, app, "k")
        assert app.last_report is not None and app.last_report.plan.kind is ActionKind.KILL
        await until(pilot, lambda: app.view.snapshot is not None
                    and main_pid_or_none(app) not in (None, first_main), what="the respawn")
        await until(pilot, lambda: Flag.RESPAWNED in group_flags(app), what="RESPAWNED")
        await select(pilot, app, f"u:{MINIMAX}")
        panel = str(app.query_one(UnitPanel).render())
        assert "Restart=always: killing the main PID respawns it" in panel
        assert "RESPAWNED" in panel

        # 2. stop + disable: the unit is down and disabled; every worker is an ORPHAN.
        await run_confirmed(pilot, app, "D")
        await until(pilot, lambda: app.view.snapshot.unit(MINIMAX).active_state == "inactive",
                    what="the unit inactive")
        await until(pilot, lambda: len(app.view.triage.orphans()) == 16, what="16 orphans")
        assert app.view.snapshot.unit(MINIMAX).unit_file_state == "disabled"
        table = app.query_one(HoldersTable)
        orphan = app.view.triage.orphans()[0]
        row = [str(c) for c in table.get_row(f"p:{orphan.pid}")]
        assert row[FLAGS] in ("ORPHAN", "ORPH")  # short where the command takes the room
        gpu, mib = next(iter(orphan.gpu_memory_mib.items()))
        assert f"GPU{gpu} {units.gib(mib)}" == row[MEM]

        # 3. reap the unit's orphans: all eight GPUs back to baseline, confirmed.
        await select(pilot, app, f"u:{MINIMAX}")
        await run_confirmed(pilot, app, "o")
        report = app.last_report
        assert report is not None and report.plan.kind is ActionKind.REAP
        assert report.confirmed, report.describe()
        assert len(report.gpus) == 8 and all(g.confirmed for g in report.gpus)
        # TP5 ignores SIGTERM: the engine escalated, and the log says so.
        assert any(sig == "SIGKILL" for _pid, sig, _o in report.signals)
        assert "escalated to SIGKILL" in log_text(app)
        assert "confirmed" in app.query_one("#progress").render().plain
        assert "✔ confirmed: " in str(app.query_one("#progress").render())
        # The notebook kernel was never touched, and the GPU table shows baseline.
        assert NOTEBOOK in demo.processes
        await until(pilot, lambda: app.view.snapshot.used_by_gpu()
                    == {0: 2048, **{i: 0 for i in range(1, 8)}}, what="the GPUs at baseline")
        await pilot.pause(0.2)
        gpus = app.query_one(GpuTable)
        assert "0.0/95.6 GiB" in str(gpus.get_row("3")[2])
        assert "2.0/95.6 GiB" in str(gpus.get_row("0")[2])
        # Every action left an intent and an outcome record, in the demo's own audit file.
        state = Path(os.environ["XDG_STATE_HOME"]) / "gpudash"
        audit = (state / "audit-demo.jsonl").read_text().splitlines()
        assert [json.loads(line)["record"] for line in audit] == ["intent", "outcome"] * 3
        assert not (state / "audit.jsonl").exists()


def main_pid_or_none(app: GpudashApp) -> int | None:
    snap = app.view.snapshot
    unit = snap.unit(MINIMAX) if snap else None
    return None if unit is None else unit.main_pid


def group_flags(app: GpudashApp) -> frozenset[Flag]:
    group = app.view.triage.group(MINIMAX) if app.view.triage else None
    return frozenset() if group is None else group.flags


async def test_reclaim_in_one_action() -> None:
    demo = DemoHost(clock=SteppedClock(), release_delay=2)
    app = make_app(demo)
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await run_confirmed(pilot, app, "r")
        report = app.last_report
        assert report is not None and report.plan.kind is ActionKind.RECLAIM
        assert report.confirmed and len(report.gpus) == 8
        assert NOTEBOOK in demo.processes
        # the entry names its target (issue 33, item 3: a generic title, cut at 40 columns)
        assert f"Reclaim {MINIMAX} | confirmed" in log_text(app), log_text(app)


async def test_confirm_focuses_cancel_and_escape_cancels() -> None:
    demo = DemoHost(clock=SteppedClock(), release_delay=2)
    app = make_app(demo)
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        pids = set(demo.processes)
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        focused = app.screen.focused
        assert isinstance(focused, Button) and focused.id == "cancel"
        await pilot.press("enter")  # Enter on the focused button cancels too
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmModal))
        await pilot.press("s")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmModal))
        await pilot.pause(0.2)
        assert app.reports == []
        assert set(demo.processes) == pids
        assert demo.units[MINIMAX].active
        entries = app.query_one(ActionLog).entries
        assert [e.outcome for e in entries] == ["cancelled: nothing was done"] * 2


async def test_read_only_refuses_and_says_so() -> None:
    demo = DemoHost(clock=SteppedClock(), release_delay=2)
    app = make_app(demo, read_only=True)
    notes: list[str] = []
    async with app.run_test(size=SIZE) as pilot:
        original = app.notify

        def spy(message: str, **kwargs: object) -> None:
            notes.append(message)
            original(message, **kwargs)  # type: ignore[arg-type]

        app.notify = spy  # type: ignore[method-assign]
        await select(pilot, app, f"p:{main_pid(app)}")
        assert "READ-ONLY" in str(app.query_one("#header").render())
        assert app.main.check_action("kill", ()) is False
        for key in ("k", "r", "D", "o"):
            await pilot.press(key)
        await pilot.pause(0.2)
        assert not isinstance(app.screen, ConfirmModal)
        assert app.reports == []
        assert demo.units[MINIMAX].n_restarts == 0 and demo.units[MINIMAX].active
        assert len(notes) == 4 and all("read-only" in n for n in notes)
        assert app.main.palette_commands() and all(
            a not in {c[2] for c in app.main.palette_commands()} for a in ("kill", "reclaim")
        )


async def test_untrusted_process_name_is_shown_literally() -> None:
    demo = DemoHost(clock=SteppedClock(), release_delay=2)
    evil = "[red]x[/red]\x1b[2J"
    p = demo.spawn(ppid=1, user="mallory", name=evil, cmdline=evil + " --bold [b]y[/b]",
                   unit=None, gpu_memory_mib={3: 1024})
    app = make_app(demo)
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, f"p:{p.pid}")
        row = [str(c) for c in app.query_one(HoldersTable).get_row(f"p:{p.pid}")]
        assert "[red]x[/red]\\x1b[2" in row[0]  # comm is cut at 15 characters
        assert "[red]x[/red]\\x1b[2J --bold [b]y[/b]" in row[-1]
        assert all("\x1b" not in cell for cell in row)
        panel = str(app.query_one(UnitPanel).render())
        assert "[red]x[/red]\\x1b[2J --bold [b]y[/b]" in panel and "\x1b" not in panel
        # Planning a kill shows the command line literally in the confirm dialog.
        await pilot.press("k")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        plan_text = str(app.screen.query_one("#plan-text").render())
        assert "\x1b" not in plan_text
        await pilot.press("escape")
        svg = app.export_screenshot()
        assert "[red]x[/red]" in svg.replace("&#160;", " ")
        assert "\x1b" not in svg


async def test_unavailable_action_explains_itself() -> None:
    demo = DemoHost(clock=SteppedClock(), release_delay=2)
    app = make_app(demo)
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, "u:session-4.scope")
        assert app.main.check_action("stop_unit", ()) is None  # greyed: not a system service
        assert app.main.check_action("kill", ()) is None  # no process selected
        assert app.main.check_action("reap", ()) is None  # nothing is orphaned yet
        await pilot.press("s")
        await pilot.pause(0.1)
        assert not isinstance(app.screen, ConfirmModal)
        await select(pilot, app, f"p:{NOTEBOOK}")
        assert app.main.check_action("kill", ()) is True
        assert app.main.check_action("stop_unit", ()) is None


class FlakySource:
    """A source whose stream fails twice before it works: the UI shows it and retries."""

    def __init__(self) -> None:
        self.name = "flaky"
        self.demo = DemoHost("flaky", clock=SteppedClock())
        self.attempts = 0

    async def stream(self, interval: float):  # type: ignore[no-untyped-def]
        self.attempts += 1
        if self.attempts <= 2:
            raise LinkLost(f"[b]link lost[/b] \x1b[31m attempt {self.attempts}")
        async for snap in self.demo.stream(interval):
            yield snap

    round_trip_s = None  # (HostSource) nothing measured

    @property
    def route(self) -> str:
        return f"the source {self.name}"

    @property
    def control(self):  # type: ignore[no-untyped-def]
        return self.demo

    async def close(self) -> None:
        return None


async def test_source_errors_show_and_retry() -> None:
    source = FlakySource()
    app = GpudashApp([source], interval=0.25, read_only=False, theme=None, exec_options=None)
    async with app.run_test(size=SIZE) as pilot:
        # Under load the retry may already have failed again when the header is read: wait
        # for the error text itself (attempt 1 or 2), shown literally, markup and escape too.
        shown = re.compile(r"error: \[b\]link lost\[/b\] \\x1b\[31m attempt [12]")
        await wait_for(pilot, lambda: app.view.state == "error" and shown.search(
            str(app.query_one("#header").render())) is not None)
        # the retries wait on the app's own backoff (real seconds: until's real pauses),
        # then the host's samples flow (its clock, stepped)
        await until(pilot, lambda: "connected" in str(app.query_one("#header").render()),
                    clock=source.demo, what="connected")
        assert source.attempts == 3


async def test_two_hosts_switch_with_number_keys() -> None:
    a = DemoHost("gpu-a", clock=SteppedClock())
    b = DemoHost("gpu-b", clock=SteppedClock(), seed=3)
    app = GpudashApp([a, b], interval=0.25, read_only=False, theme=None, exec_options=None)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: all(v.snapshot is not None for v in app.views))
        assert app.fleet_shown  # several hosts start on the fleet table; enter opens one
        await pilot.press("enter")
        assert app.query_one("#hosts").display
        await pilot.press("2")
        assert app.current_host == 1 and "gpu-b" in str(app.query_one("#header").render())
        await pilot.press("h")
        assert app.current_host == 0


async def test_audit_failure_refuses_the_action_and_is_no_crash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # audit or nothing (issue 19): an intent record that cannot be written sends nothing
    import gpudash.session.audit

    def broken(record: object, path: object = None) -> None:
        raise PermissionError("read-only file system")

    monkeypatch.setattr(gpudash.session.audit, "write", broken)
    demo = DemoHost(clock=SteppedClock(), release_delay=2)
    app = make_app(demo)
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, f"p:{NOTEBOOK + 0}")
        await pilot.press("t")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await pilot.press("y")
        await wait_for(pilot, lambda: "refused" in log_text(app), within=20)
        assert app.is_running and app.reports == []
        assert NOTEBOOK in demo.processes  # not signalled
        assert any("audit" in str(n.message).lower() for n in app._notifications)


async def test_small_terminal_degrades() -> None:
    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.view.snapshot is not None)
        await pilot.pause(0.1)
        assert not app.query_one("#plot").display or app.query_one("#plot").size.width == 0
        assert app.query_one(HoldersTable).size.height >= 5


def test_dashboard_entry_point_signature() -> None:
    import inspect

    from gpudash.ui.app import run_dashboard

    params = inspect.signature(run_dashboard).parameters
    assert list(params) == ["sources", "interval", "read_only", "theme", "exec_options", "demo"]
    assert asyncio.iscoroutinefunction(run_dashboard) is False


class LinkDropsAfterSignal(DemoHost):
    """A host whose link drops right after the first signal reached it: the reply is lost."""

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.dropped = False
        self.received = 0

    async def signal(self, pid: int, start_ticks: int | None, sig: int, *,  # type: ignore[no-untyped-def]
                     boot_id: str | None = None):
        outcome = await super().signal(pid, start_ticks, sig, boot_id=boot_id)
        self.received += 1
        if not self.dropped:
            self.dropped = True
            raise LinkLost("connection reset by peer")
        return outcome


async def test_unknown_outcome_is_reverified_when_samples_flow_again() -> None:
    demo = LinkDropsAfterSignal(clock=SteppedClock(), release_delay=2)
    app = make_app(demo)
    async with app.run_test(size=SIZE) as pilot:
        worker = next(p.pid for p in demo.processes.values() if p.cmdline == "VLLM::Worker_TP3")
        await select(pilot, app, f"p:{worker}")
        await run_confirmed(pilot, app, "k")
        await until(pilot, lambda: len(app.reports) >= 2, what="the re-verification's report")
        first, second = app.reports[:2]
        assert first.unknown and not first.confirmed
        assert second.reverified and second.confirmed, second.describe()
        assert second.summary.startswith("re-verified after reconnecting: confirmed")
        assert worker not in demo.processes
        assert demo.received == 1  # nothing re-sent
        # the signal whose reply was lost may have gone out (it had): both reports say so
        assert first.sent_lines() == second.sent_lines() == [f"SIGKILL {worker}: unknown"]
        assert "re-verifying (nothing is re-sent)" in log_text(app)


class ChangedKeySource(FlakySource):
    """A host whose key changed: refused every time."""

    async def stream(self, interval: float):  # type: ignore[no-untyped-def]
        self.attempts += 1
        raise HostKeyError("host key for flaky CHANGED; run ssh-keygen -R flaky if expected")
        yield  # pragma: no cover - makes this an async generator


async def test_changed_host_key_is_shown_and_not_retried() -> None:
    source = ChangedKeySource()
    app = GpudashApp([source], interval=0.25, read_only=False, theme=None, exec_options=None)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.view.state == "error")
        await pilot.pause(1.5)  # longer than the first backoff: no second attempt
        assert source.attempts == 1
        header = str(app.query_one("#header").render())
        assert "host key for flaky CHANGED" in header and "retry in" not in header


async def test_filter_narrows_the_holders_and_clears() -> None:
    from gpudash.ui.screens import FilterScreen

    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(HoldersTable)
        await wait_for(pilot, lambda: table.row_count > 10)
        full = table.row_count
        await pilot.press("slash")
        await wait_for(pilot, lambda: isinstance(app.screen, FilterScreen))
        await pilot.press(*"alice", "enter")
        await wait_for(pilot, lambda: table.row_count < full)
        keys = [str(k.value) for k in table.rows]
        assert keys == ["u:session-4.scope", "p:90100", "p:90211"]
        assert "only “alice”" in str(app.query_one("#holders").border_title)
        await pilot.press("slash")
        await wait_for(pilot, lambda: isinstance(app.screen, FilterScreen))
        for _ in "alice":
            await pilot.press("backspace")
        await pilot.press("enter")
        await wait_for(pilot, lambda: table.row_count == full)


def test_filter_keeps_owner_rows_and_matching_members() -> None:
    from rich.text import Text

    from gpudash.ui.widgets.holder_filter import filter_rows
    from gpudash.ui.widgets.holders import HolderRow

    def row(key: str, *cells: str) -> HolderRow:
        return HolderRow(key, tuple(Text(c) for c in cells))

    rows = [row("u:a.service", "a.service"), row("p:1", "1 main", "python"),
            row("p:2", "2 worker", "TP0"), row("u:b.service", "b.service"),
            row("p:3", "3 other", "bash")]
    assert [r.key for r in filter_rows(rows, "tp0")] == ["u:a.service", "p:2"]
    assert [r.key for r in filter_rows(rows, "b.serv")] == ["u:b.service", "p:3"]
    assert filter_rows(rows, "  ") == rows
    assert filter_rows(rows, "nothing") == []
