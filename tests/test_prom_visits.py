"""A host opened from the Prometheus fleet, once the table is back (issue 32: "a host SSH
cannot reach says so in its row. After an action, the row shows the host's own fresh
figures until Prometheus has caught up"). Before, the table came back as Prometheus had
it: the orphans just reaped still counted for up to a scrape interval, and a host SSH
never reached looked like any other."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
from support import next_sample
from test_ui_prom_fleet import AT, SIZE, cells, server, shown, wait_for  # noqa: F401

from gpudash.demo.fleet import UnreachableHost
from gpudash.demo.host import DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.domain.fleet import HostSummary
from gpudash.fleetprom.rows import PromHost
from gpudash.fleetprom.visit import Visit
from gpudash.state.promconfig import PromSettings
from gpudash.ui.app import GpudashApp
from gpudash.ui.outcome import visit_of
from gpudash.ui.palette import Palette
from gpudash.ui.prom_app import PromFleetApp
from gpudash.ui.prom_rows import prom_row

PAL = Palette(*(["white"] * 10))
GIB = 2**30
AFTER_REAP = HostSummary(gpus_in_use=1, gpus_total=8, used_mib=2048, total_mib=8 * 97887,
                         reclaimable_mib=0, reclaimable_by_gpu={}, orphans=0,
                         crash_looping=(), unknown_holders=0, degraded=False, errors=())


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def test_the_hosts_own_figures_until_prometheus_has_a_newer_sample() -> None:
    host = PromHost("gpu01", (("instance", "gpu01:9835"),), ("gpudash",), gpus=8, gpus_held=8,
                    used_bytes=760 * GIB, total_bytes=765 * GIB, orphans=8,
                    orphaned_bytes=754 * GIB, reclaimable_bytes=754 * GIB,
                    crash_looping=(), sampled_at=1000.0, scraped_at=1001.0)
    visit = Visit(1062.0, taken_at=1060.0, summary=AFTER_REAP, action="✔ Reap: confirmed")
    row = prom_row(host, 1065.0, False, PAL, visit)
    plain = {k: c.plain for k, c in row.cells.items()}
    assert plain["orphans"] == "0" and plain["reclaim"] == "0.0" and plain["gpus"] == "1/8"
    assert row.link_text.endswith("figures as ssh saw them") and "orphans" not in row.states
    assert prom_row(host, 1065.0, False, PAL).cells["orphans"].plain == "8"  # no visit
    # Prometheus' next sample of it is newer than the visit's: its figures again
    caught_up = dataclasses.replace(host, orphans=0, orphaned_bytes=0.0,
                                    reclaimable_bytes=0.0, sampled_at=1061.0)
    row = prom_row(caught_up, 1075.0, False, PAL, visit)
    assert row.link_text == "up 1m" and row.cells["gpus"].plain == "8/8"
    # a host SSH did not reach: said in its row, and it answers to "down"
    failed = Visit(1062.0, error="gpu01: no answer within 10 s")
    row = prom_row(host, 1065.0, False, PAL, failed)
    assert row.link_text == "ssh failed 3s ago: gpu01: no answer within 10 s"
    assert "down" in row.states and row.cells["orphans"].plain == "8"  # Prometheus' figures


async def test_the_table_back_from_two_hosts_says_what_was_found_there(server) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    _recorded, url = server

    def app(memory=None) -> PromFleetApp:  # type: ignore[no-untyped-def]
        # the recorded exporters all ran on 127.0.0.1: their host label names them
        return PromFleetApp(PromSettings(url=url, ssh_name="{host}"), interval=0.2, theme=None,
                            clock=lambda: AT + 2.0, memory=memory)

    first = app()
    async with first.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: len(first.fleet._shown) == 8, what="8 rows")
        names = {h.name: first.fleet.ssh_name(i)[0] for i, h in enumerate(first.fleet.hosts)}
        memory = first.fleet.remember()
    reaped, unreachable = names["demo-gpu01"], names["demo-gpu02"]
    assert reaped and unreachable and reaped != unreachable
    # what gpudash.cli.main keeps of each host opened (ui.outcome.visit_of), newer than
    # the recorded answers
    memory.visits[reaped] = Visit(time.time(), taken_at=AT + 60, summary=AFTER_REAP,
                                  action="✔ Reap orphans: confirmed")
    memory.visits[unreachable] = Visit(time.time(), error="no answer within 10 s")
    back = app(memory)
    async with back.run_test(size=SIZE) as pilot:
        screen = back.fleet
        await wait_for(pilot, lambda: len(screen._shown) == 8, what="8 rows")
        one = cells(screen, "demo-gpu01")
        assert one["orphans"] == "0" and one["reclaim"] == "0.0", one
        assert "figures as ssh saw them" in one["link"]
        index = [h.name for h in screen.hosts].index("demo-gpu01")
        detail = screen.detail_text(index, screen.row(index)) or ""
        assert "last there: ✔ Reap orphans: confirmed" in detail
        assert cells(screen, "demo-gpu02")["link"].startswith("● ssh failed")
        assert "no answer within 10 s" in cells(screen, "demo-gpu02")["link"]
        await pilot.press(*"down")
        await wait_for(pilot, lambda: set(shown(screen)) == {"demo-gpu02", "demo-gpu03"},
                       what="down: the target the exporter cannot read, the host SSH missed")


async def test_the_dashboard_says_what_it_found_of_its_host() -> None:
    app = GpudashApp([DemoHost(clock=SteppedClock())], interval=0.25, read_only=False,
                     theme=None, exec_options=None)
    async with app.run_test(size=(160, 50)) as pilot:
        await next_sample(pilot)
        app.log_action(app.view.name, "Reap orphans", "confirmed", True)
        visit = visit_of(app.views, app.last_actions)
        assert visit is not None and visit.error is None and visit.summary is not None
        assert visit.taken_at == app.view.snapshot.taken_at  # type: ignore[union-attr]
        assert visit.summary.orphans == len(app.view.triage.orphans())  # type: ignore[union-attr]
        assert visit.action == "✔ Reap orphans: confirmed"
    gone = GpudashApp([UnreachableHost("gpu09")], interval=0.25, read_only=False,
                      theme=None, exec_options=None)
    async with gone.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: gone.view.error is not None, what="the error")
        visit = visit_of(gone.views, gone.last_actions)
        assert visit is not None and visit.summary is None
        assert visit.error is not None and "no answer within 10 s" in visit.error


def test_the_command_line_keeps_each_hosts_visit_for_the_table(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # gpudash.cli.main's loop: table -> host -> table; what the host's dashboard found is
    # in the memory the next table is made from (the table and the dashboard are below it)
    import importlib

    from gpudash.cli.args import parse
    from gpudash.ui import app as ui_app
    from gpudash.ui import prom_app
    from gpudash.ui.outcome import DashboardOutcome
    from gpudash.ui.prom_screen import TableMemory

    cli_main = importlib.import_module("gpudash.cli.main")
    seen: list[TableMemory | None] = []
    choices = iter(["gpu09", None])

    def table(settings, *, interval, theme, memory):  # type: ignore[no-untyped-def]
        seen.append(memory)
        return next(choices), memory or TableMemory()

    found = Visit(123.0, error="gpu09: no answer within 10 s")
    monkeypatch.setattr(prom_app, "run_prom_fleet", table)
    monkeypatch.setattr(ui_app, "run_dashboard",
                        lambda sources, **kw: DashboardOutcome(0, visit=found))
    _command, args = parse(["--prometheus", "http://127.0.0.1:9"])
    assert cli_main._prometheus_fleet(args, cli_main.Terminal(), None) == 0
    assert seen[0] is None and seen[1] is not None and seen[1].visits == {"gpu09": found}
