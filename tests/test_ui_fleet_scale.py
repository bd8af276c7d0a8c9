"""The fleet table at 5,000 hosts (issue 32, "Scale"): it draws only the rows on screen.
A sort reorders without making or drawing every row again, and a second's ageing ("up 3 s"
-> "up 4 s", every host) makes again only the rows on screen; the rest are made when they
are scrolled to, with their own age."""

from __future__ import annotations

from pathlib import Path

import pytest
from promserver import free_port
from test_ui_prom_fleet import wait_for

from gpudash.fleetprom.fleet import FeedState
from gpudash.fleetprom.rows import PromFleet, PromHost
from gpudash.state.promconfig import PromSettings
from gpudash.ui.prom_app import PromFleetApp
from gpudash.ui.text import duration

HOSTS = 5000
SIZE = (200, 50)
GIB = 2.0**30
NOW = 1_800_000_000.0


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def host(i: int) -> PromHost:
    name = f"gpu{i:05d}"
    orphaned = 90 * GIB if i % 20 == 7 else 0.0
    return PromHost(name, (("instance", f"{name}:9835"), ("job", "gpudash"), ("host", name)),
                    ("gpudash",), gpus=8, gpus_held=6, used_bytes=540 * GIB,
                    total_bytes=768 * GIB, orphaned_bytes=orphaned, orphans=8 if orphaned else 0,
                    reclaimable_bytes=orphaned, unattributed_bytes=0.0, stray_bytes=0.0,
                    crash_looping=(), link_up=True, sampled_at=NOW - i % 15,
                    scraped_at=NOW - i % 15)


def big_app(clock: list[float]) -> tuple[PromFleetApp, list[int]]:
    """The table over HOSTS hosts (no Prometheus: the feed fails once and waits an hour);
    and a count of the rows it makes."""
    app = PromFleetApp(PromSettings(url=f"http://127.0.0.1:{free_port()}"), interval=3600,
                       theme=None, clock=lambda: clock[0])
    made: list[int] = []
    make = app.fleet._make_row

    def counted(index: int):  # type: ignore[no-untyped-def]
        made.append(index)
        return make(index)

    app.fleet._make_row = counted  # type: ignore[method-assign]
    return app, made


async def filled(pilot, app: PromFleetApp) -> None:  # type: ignore[no-untyped-def]
    await wait_for(pilot, lambda: app.fleet.ready and app.feed.state.error is not None,
                   what="the table up, the feed failed once")
    app.fleet.update(FeedState(PromFleet(NOW, tuple(host(i) for i in range(HOSTS)))))
    await wait_for(pilot, lambda: app.fleet.table.row_count == HOSTS, what="every host")
    await pilot.pause(0.2)


async def test_a_sort_over_5000_hosts_draws_only_the_rows_on_screen() -> None:
    clock = [NOW + 1.0]
    app, made = big_app(clock)
    async with app.run_test(size=SIZE) as pilot:
        await filled(pilot, app)
        table = app.fleet.table
        on_screen = table.size.height - 1  # less the header line
        assert 0 < on_screen < 60
        drawn: list[int] = []
        cells_of = table.cells_of
        table.cells_of = lambda i: (drawn.append(i), cells_of(i))[1]  # type: ignore[method-assign]
        made.clear()
        await pilot.press("greater_than_sign")  # reclaim -> orphans
        await pilot.pause(0.2)
        assert app.fleet.sort_key == "orphans"
        assert made == []  # every row was made already: a sort makes none again
        assert 0 < len(set(drawn)) <= on_screen  # and draws only those it shows
        first = [app.fleet.hosts[i].name for i in app.fleet._shown[:3]]
        assert first == ["gpu00007", "gpu00027", "gpu00047"]  # 8 orphans, ties by name
        assert table.get_row(str(app.fleet._shown[0]))[0].plain == "gpu00007"
        await pilot.press("end")
        assert table.cursor_row == HOSTS - 1
        assert table.cursor_id == app.fleet._shown[-1]


async def test_a_second_of_ageing_makes_again_only_the_rows_on_screen() -> None:
    clock = [NOW + 1.0]
    app, made = big_app(clock)
    async with app.run_test(size=SIZE) as pilot:
        await filled(pilot, app)
        screen, table = app.fleet, app.fleet.table
        top = screen._shown[0]
        age = NOW + 1.0 - screen.hosts[top].scraped_at  # type: ignore[operator]
        assert table.get_row(str(top))[1].plain == f"● up {duration(age)}"
        made.clear()
        clock[0] += 1.0  # every host's age moves
        screen.tick()
        await wait_for(pilot, lambda: table.get_row(str(top))[1].plain
                       == f"● up {duration(age + 1)}", what="the top row aged")
        assert 0 < len(set(made)) <= table.size.height  # not 5,000
        # a row scrolled to is made then, with its age now
        await pilot.press("end")
        last = screen._shown[-1]
        last_age = clock[0] - screen.hosts[last].scraped_at  # type: ignore[operator]
        assert table.get_row(str(last))[1].plain == f"● up {duration(last_age)}"


async def test_a_click_on_a_title_sorts_and_on_a_row_moves_the_cursor_then_opens() -> None:
    clock = [NOW + 1.0]
    app, _made = big_app(clock)
    async with app.run_test(size=SIZE) as pilot:
        await filled(pilot, app)
        screen, table = app.fleet, app.fleet.table
        # the table's border, then the title line; the Host column first
        await pilot.click("#fleet-table", offset=(3, 1))
        await pilot.pause(0.1)
        assert screen.sort_key == "host" and not screen.descending
        await pilot.click("#fleet-table", offset=(3, 1))  # the same title again: reversed
        await pilot.pause(0.1)
        assert screen.sort_key == "host" and screen.descending
        assert screen.hosts[screen._shown[0]].name == "gpu04999"
        await pilot.press("home")  # (the cursor stayed on its host, far down)
        await pilot.click("#fleet-table", offset=(3, 4))  # the third row
        await pilot.pause(0.1)
        assert table.cursor_row == 2 and screen.hosts[table.cursor_id].name == "gpu04997"
        await pilot.click("#fleet-table", offset=(3, 4))  # the cursor's row: opened
        await wait_for(pilot, lambda: not app.is_running, what="the app left for the host")
    assert app.chosen == "gpu04997"  # its SSH name: the instance without its port
