"""``gpudash --prometheus``'s table, driven with Textual's pilot: the rows from a server on
127.0.0.1 that answers with what a real Prometheus answered (tests/data/fleetprom), the
filter words and the sort of the SSH fleet, the errors in the header with the last rows
kept stale, and Enter naming the host to open over SSH."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from promfakes import Recorded, serving

from gpudash.state.promconfig import PromSettings
from gpudash.ui.prom_app import PromFleetApp
from gpudash.ui.prom_screen import PromFleetScreen

ANSWERS = json.loads((Path(__file__).parent / "data" / "fleetprom" / "answers.json")
                     .read_text())
AT = ANSWERS["gpudash"]["data"]["result"][0]["value"][0]  # when it was recorded
SIZE = (160, 40)


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


@pytest.fixture
def server() -> Iterator[tuple[Recorded, str]]:
    recorded = Recorded(ANSWERS)
    with serving(recorded.handler()) as url:
        yield recorded, url
        recorded.release.set()


def app_for(url: str, **settings: object) -> PromFleetApp:
    clock = [AT + 2.0]  # the recorded answers are 2 s old
    app = PromFleetApp(PromSettings(url=url, **settings),  # type: ignore[arg-type]
                       interval=0.2, theme=None, clock=lambda: clock[0])
    app.clock_now = clock  # type: ignore[attr-defined]
    return app


async def wait_for(pilot, predicate, within: float = 10.0, what: str = "") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not met in {within} s: {what}")
        await pilot.pause(0.05)


def shown(screen: PromFleetScreen) -> list[str]:
    return [screen.hosts[i].name for i in screen._shown]


def cells(screen: PromFleetScreen, name: str) -> dict[str, str]:
    index = [h.name for h in screen.hosts].index(name)
    keys = [str(c.value) for c in screen.table.columns]
    return dict(zip(keys, (c.plain for c in screen.table.get_row(str(index))), strict=True))


def header(screen: PromFleetScreen) -> str:
    return str(screen.header.render())


async def test_the_table_shows_every_host_with_the_columns_of_its_source(server) -> None:  # type: ignore[no-untyped-def]
    _recorded, url = server
    app = app_for(url)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.fleet
        await wait_for(pilot, lambda: len(screen._shown) == 8, what="8 rows")
        assert [str(c.value) for c in screen.table.columns] == [
            "host", "link", "gpus", "mem", "reclaim", "orphans", "crash", "alerts",
            "unattr", "noowner"]
        one = cells(screen, "demo-gpu01")
        assert one["gpus"] == "8/8" and one["orphans"] == "8" and one["link"] == "● up 2s"
        assert float(one["reclaim"]) > 700
        old = cells(screen, "dgx-old")
        assert old["gpus"] == "2/4" and old["orphans"] == "N/A" and old["crash"] == "N/A"
        assert old["noowner"] == "19.5"  # 20000 MiB on a GPU no job has
        assert cells(screen, "dgx-plain")["noowner"] == "N/A"
        assert cells(screen, "demo-gpu03")["link"] == "● exporter cannot read it"
        assert cells(screen, "demo-gpu05")["crash"] == "1 vllm-deepseek-v3"
        # sorted as the SSH fleet: most reclaimable first, what is not known last
        assert shown(screen)[:2] == ["demo-gpu01", "demo-gpu04"]
        assert "8 hosts" in header(screen) and url in header(screen)


@pytest.mark.parametrize(("word", "hosts"), [
    ("orphans", {"demo-gpu01", "demo-gpu04"}),
    ("reclaim", {"demo-gpu01", "demo-gpu04"}),
    ("crashloop", {"demo-gpu05"}),
    ("alerting", {"demo-gpu04"}),
    ("down", {"demo-gpu03"}),
])
async def test_filter_words(server, word: str, hosts: set[str]) -> None:  # type: ignore[no-untyped-def]
    recorded, url = server
    recorded.extra["fleet"] = [{"metric": {"stat": "alert", "host": "demo-gpu04",
                                           "alertname": "GPUMemoryOrphaned"},
                                "value": [AT, "1"]}]
    app = app_for(url)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: len(app.fleet._shown) == 8)
        await pilot.press(*word)
        assert set(shown(app.fleet)) == hosts
        await pilot.press("escape")
        assert len(app.fleet._shown) == 8


async def test_sort_keys_as_the_ssh_fleet(server) -> None:  # type: ignore[no-untyped-def]
    _recorded, url = server
    app = app_for(url)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.fleet
        await wait_for(pilot, lambda: len(screen._shown) == 8)
        screen.sort_by("host")
        await pilot.pause()
        assert shown(screen) == sorted(shown(screen))
        await pilot.press("greater_than_sign")  # the next column: scrape state, worst first
        assert screen.sort_key == "link"
        assert shown(screen)[0] == "demo-gpu03"
        await pilot.press("less_than_sign")
        assert shown(screen)[-1] == "demo-gpu03"


async def test_label_text_is_shown_literally(server) -> None:  # type: ignore[no-untyped-def]
    recorded, url = server
    evil = "[bold red]gpu[/]\x1b[2J"
    recorded.extra["gpudash"] = [{"metric": {"stat": "gpus", "host": evil,
                                             "instance": "x:1", "job": "gpudash"},
                                  "value": [AT, "8"]}]
    app = app_for(url, ssh_name="{host}")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.fleet
        await wait_for(pilot, lambda: len(screen._shown) == 9)
        assert cells(screen, evil)["host"] == "[bold red]gpu[/]\\x1b[2J"
        # Enter on it: not a host name, said in a notice; nothing is opened
        screen.table.move_cursor(row=screen._shown.index(
            [h.name for h in screen.hosts].index(evil)))
        await pilot.press("enter")
        await pilot.pause()
        assert app.chosen is None and app.is_running
        assert any("not a host name" in n.message for n in app._notifications)


async def test_enter_names_the_host_to_open_over_ssh(server) -> None:  # type: ignore[no-untyped-def]
    _recorded, url = server
    app = app_for(url, ssh_name="root@{host}")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.fleet
        await wait_for(pilot, lambda: len(screen._shown) == 8)
        screen.sort_by("host")
        await pilot.pause()
        screen.table.move_cursor(row=0)  # demo-gpu01
        await pilot.press("enter")
        await pilot.pause()
    assert app.chosen == "root@demo-gpu01"
    memory = app.fleet.remember()
    assert memory.sort_key == "host" and memory.cursor == "demo-gpu01"
    assert memory.state is not None and memory.state.fleet is not None


@pytest.mark.parametrize(("mode", "said"), [("401", "prometheus refused: HTTP 401"),
                                            ("garbage", "prometheus bad answer"),
                                            ("hang", "prometheus slow")])
async def test_a_failing_prometheus_keeps_the_rows_stale_and_says_why(
        server, mode: str, said: str) -> None:  # type: ignore[no-untyped-def]
    recorded, url = server
    app = app_for(url, timeout=1.0)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.fleet
        await wait_for(pilot, lambda: len(screen._shown) == 8)
        recorded.mode = mode
        await wait_for(pilot, lambda: said in header(screen), within=15,
                       what=f"{said!r} in {header(screen)!r}")
        assert "stale" in header(screen) and "retry in" in header(screen)
        assert len(screen._shown) == 8  # the last good rows, kept
        await wait_for(pilot, lambda: cells(screen, "demo-gpu01")["link"].startswith(
            "● stale"), what="the row marked stale (rows redraw once a second)")
        await pilot.press(*"stale")  # the filter word, and keys still work
        assert len(screen._shown) == 8
        await pilot.press("escape")
        asked = recorded.asked
        recorded.mode = "ok"
        recorded.release.set()
        await wait_for(pilot, lambda: screen.state.error is None, within=15,
                       what="back after the backoff")
        assert recorded.asked - asked <= 6  # retried with backoff, not in a tight loop
        await wait_for(pilot, lambda: cells(screen, "demo-gpu01")["link"] == "● up 2s",
                       what="the row fresh again")
        # the header says no more error (a refresh on a loaded machine can miss the 1 s
        # timeout again, and says so until the next one answers: wait for an answer)
        await wait_for(pilot, lambda: "prometheus" not in header(screen).split(url)[-1],
                       within=15, what="the header without the error")


async def test_prometheus_down_from_the_start_says_so(tmp_path: Path) -> None:
    from promserver import free_port

    app = app_for(f"http://127.0.0.1:{free_port()}")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "prometheus down" in header(app.fleet))
        assert app.fleet.hosts == [] and app.is_running
        # the failure may come before the table is mounted: said in the header, no more
        # (it was drawn then too, and that failed: a "Display error" toast at start)
        said = [(n.title, n.message) for n in app._notifications]
        assert not [t for t, _m in said if t == "Display error"], said


async def test_back_from_a_host_while_prometheus_fails_says_so_in_the_header_only(
        tmp_path: Path) -> None:
    """Back from a host (``q``) while Prometheus was failing: the new table is given the
    failing state before it is mounted; drawing its header then raised and showed a
    "Display error" toast instead of the table's own words."""
    from promserver import free_port

    from gpudash.fleetprom.client import PromError
    from gpudash.fleetprom.fleet import FeedState
    from gpudash.ui.prom_screen import TableMemory

    failing = FeedState(None, PromError("down", "connection refused"), failures=1)
    app = PromFleetApp(PromSettings(url=f"http://127.0.0.1:{free_port()}"), interval=0.2,
                       theme=None, memory=TableMemory(state=failing))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "prometheus down" in header(app.fleet))
        said = [(n.title, n.message) for n in app._notifications]
        assert not [t for t, _m in said if t == "Display error"], said


@pytest.mark.terminal  # the real program on a real pty
def test_enter_opens_the_host_as_gpudash_host_does_and_q_comes_back(
        server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """On a real pty: ``gpudash --prometheus URL``; Enter on the row whose SSH name is
    ``local`` opens this machine's host screen through ``gpudash HOST``'s own path; q
    there comes back to the table, q again quits (exit 0)."""
    import socket

    from ptydash import Dashboard

    recorded, url = server
    recorded.extra["gpudash"] = [{"metric": {"stat": "gpus", "host": "local",
                                             "instance": "x:1", "job": "gpudash"},
                                  "value": [AT, "1"]}]
    config = tmp_path / "config" / "gpudash"
    config.mkdir(parents=True)
    (config / "config.toml").write_text(f'[prometheus]\nurl = "{url}"\nssh_name = "{{host}}"\n')
    d = Dashboard(["--prometheus", "--interval", "0.5"], env={
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_STATE_HOME": str(tmp_path / "state")})
    try:
        d.wait_for(b"dgx-plain")
        d.type("local")
        d.read(1.0)
        d.type("\r")
        d.wait_for(socket.gethostname().encode())  # the host screen of this machine
        mark = len(d.screen)
        d.type("q")
        end = time.monotonic() + 30
        while b"dgx-plain" not in d.screen[mark:]:  # the table again (the filter kept)
            assert time.monotonic() < end, d.screen[-2000:]
            d.read(0.2)
            if b"dgx" not in d.screen[mark:] and b"local" in d.screen[mark:]:
                d.type("\x1b")  # escape: clear the filter that was kept
        d.type("q")
        assert d.finish() == 0
        # three apps ran one after the other: the table, the host, the table again
        assert d.screen.count(b"\x1b[?1049h") == 3, d.screen.count(b"\x1b[?1049h")
        assert b"Traceback" not in d.screen
    finally:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()
