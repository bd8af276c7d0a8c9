"""The fleet view: one row per host, sorted and filtered; Enter opens a host, F comes back;
a failing host (or a row that cannot be drawn) stays in its row."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support import app_clock, until
from test_ui import wait_for

from gpudash.demo.fleet import ScenarioHost, UnreachableHost, demo_fleet
from gpudash.demo.host import MINIMAX, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.domain.fleet import summarize
from gpudash.domain.model import HostSnapshot
from gpudash.domain.units import MIB_PER_GIB
from gpudash.engine import ExecOptions
from gpudash.protocol.source import HostControl, HostKeyError
from gpudash.ui import fleet_rows, fleet_screen
from gpudash.ui.app import GpudashApp
from gpudash.ui.fleet_screen import FleetScreen
from gpudash.ui.main_screen import MainScreen
from gpudash.ui.screens import ConfirmModal

SIZE = (160, 50)


def fleet_app(sources: list, **kw: object) -> GpudashApp:  # type: ignore[type-arg]
    return GpudashApp(sources, interval=0.25, read_only=False, theme=None,
                      exec_options=ExecOptions(term_timeout=2.0, poll=0.2),
                      clock=app_clock(sources), **kw)  # type: ignore[arg-type]


def fleet(count: int) -> list:  # type: ignore[type-arg]
    """``demo_fleet(count)``, every host on one clock the test steps."""
    return demo_fleet(count, clock=SteppedClock())


def cells(app: GpudashApp, index: int) -> dict[str, str]:
    table = app.fleet.table
    keys = [str(c.value) for c in table.columns]
    return dict(zip(keys, (c.plain for c in table.get_row(str(index))), strict=True))


def shown_names(app: GpudashApp) -> list[str]:
    return [app.views[i].name for i in app.fleet._shown]


async def all_read(pilot, app: GpudashApp) -> None:  # type: ignore[no-untyped-def]
    await until(pilot, lambda: all(v.snapshot is not None or v.state == "error"
                                   for v in app.views) and app.fleet.ready,
                what="every host read or failing")
    await pilot.pause(0.3)


async def test_several_hosts_open_the_fleet_and_rows_say_what_the_triage_says() -> None:
    app = fleet_app(fleet(6))
    async with app.run_test(size=SIZE) as pilot:
        await all_read(pilot, app)
        assert isinstance(app.screen, FleetScreen)
        keys = [str(c.value) for c in app.fleet.table.columns]
        assert keys == ["host", "link", "gpus", "mem", "reclaim", "orphans", "stray", "crash",
                        "action"]
        app.fleet.refresh_all()  # the triage and the table from the same instant
        for i, view in enumerate(app.views):
            row = cells(app, i)
            assert row["host"] == view.name
            if view.triage is None:
                continue
            s = summarize(view.triage)
            assert row["gpus"] == f"{s.gpus_in_use}/{s.gpus_total}"
            assert row["reclaim"] == f"{s.reclaimable_mib / MIB_PER_GIB:.1f}"
            assert row["orphans"] == str(s.orphans)
            assert row["crash"] == (f"{len(s.crash_looping)} "
                                    f"{s.crash_looping[0].removesuffix('.service')}"
                                    if s.crash_looping else "0")
            assert "connected" in row["link"]
        stopped = cells(app, 3)  # workers under PID 1: everything but alice's notebook
        assert stopped["orphans"] == "8" and stopped["reclaim"] == "754.3"
        assert cells(app, 1)["reclaim"] == "0.0"  # the healthy one


async def test_one_host_shows_the_host_screen_and_no_fleet() -> None:
    app = fleet_app([DemoHost()])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.view.snapshot is not None)
        assert isinstance(app.screen, MainScreen)
        await pilot.press("F")
        assert isinstance(app.screen, MainScreen)
        assert app.main.check_action("fleet", ()) is False


async def test_sort_by_column_and_reverse() -> None:
    app = fleet_app(fleet(6))
    async with app.run_test(size=SIZE) as pilot:
        await all_read(pilot, app)
        # default: most reclaimable first, hosts that could not be read last
        assert app.fleet.sort_key == "reclaim" and app.fleet.descending
        reclaim = [app.fleet.row(i).sort["reclaim"] for i in app.fleet._shown]
        assert reclaim == sorted(reclaim, reverse=True)
        assert shown_names(app)[-1] == "demo-gpu03"  # unreachable: nothing known
        await pilot.press("less_than_sign")  # reverse
        assert not app.fleet.descending
        assert shown_names(app)[0] == "demo-gpu03"
        app.fleet.sort_by("host")
        await pilot.pause()
        assert shown_names(app) == sorted(v.name for v in app.views)
        await pilot.press("greater_than_sign")  # the next column: link, errors first
        assert app.fleet.sort_key == "link"
        assert shown_names(app)[0] == "demo-gpu03"
        assert "Link▲" in [str(c.label) for c in app.fleet.table.columns.values()]


async def test_typing_filters_and_backspace_and_escape_undo_it() -> None:
    app = fleet_app(fleet(12))
    async with app.run_test(size=SIZE) as pilot:
        await all_read(pilot, app)
        await pilot.press("g", "p", "u", "1")
        assert app.fleet.filter_text == "gpu1"
        assert sorted(shown_names(app)) == ["demo-gpu10", "demo-gpu11", "demo-gpu12"]
        assert app.fleet.table.row_count == 3
        assert isinstance(app.screen, FleetScreen)  # letters never reached host actions
        await pilot.press("backspace")
        assert app.fleet.filter_text == "gpu" and len(shown_names(app)) == 12
        await pilot.press("escape")
        assert app.fleet.filter_text == "" and len(shown_names(app)) == 12
        await pilot.press("asterisk", "0", "3")
        assert shown_names(app) == ["demo-gpu03"]  # a glob matches whole names
        await pilot.press("escape", "e", "r", "r")  # the link state: hosts failing now
        # an unreachable host fails its connect after 0.3 s of its clock, and retries after
        # the app's backoff (real seconds): between the two it is "reconnecting"
        await until(pilot, lambda: bool(shown_names(app)), what="a host in error")
        assert set(shown_names(app)) <= {"demo-gpu03", "demo-gpu10"}  # the unreachable


async def test_enter_opens_the_host_and_f_comes_back() -> None:
    app = fleet_app(fleet(6))
    async with app.run_test(size=SIZE) as pilot:
        await all_read(pilot, app)
        app.fleet.sort_by("host")
        await pilot.pause()
        app.fleet.table.move_cursor(row=3)  # demo-gpu04
        await pilot.press("enter")
        assert isinstance(app.screen, MainScreen)
        assert app.current_host == 3 and "demo-gpu04" in str(app.query_one("#header").render())
        history = len(app.view.history)
        await until(pilot, lambda: len(app.view.history) > history,
                    what="a sample")  # live, not frozen
        await pilot.press("F")
        assert isinstance(app.screen, FleetScreen)
        assert app.fleet._cursor_index() == 3  # the cursor is where it was
        await pilot.press("down", "enter")
        assert app.current_host == 4 and isinstance(app.screen, MainScreen)


async def test_last_action_and_its_outcome_show_in_the_hosts_row() -> None:
    clock = SteppedClock()
    app = fleet_app([ScenarioHost("gpu-a", "healthy", clock=clock),
                     ScenarioHost("gpu-b", "stopped", clock=clock, seed=3)])
    async with app.run_test(size=SIZE) as pilot:
        await all_read(pilot, app)
        app.fleet.sort_by("host")
        app.fleet.table.move_cursor(row=1)
        await pilot.press("enter")
        assert app.current_host == 1
        await wait_for(pilot, lambda: app.main.availability("reap")[0] is True)
        await pilot.press("o")  # reap the orphans of the stopped unit
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await pilot.press("y")
        await until(pilot, lambda: len(app.reports) == 1, what="the reap's report")
        await pilot.press("F")
        await wait_for(pilot, lambda: "Reap" in cells(app, 1)["action"])
        row = cells(app, 1)
        verdict = app.reports[0].verdict
        assert row["action"].startswith("✔ " if verdict == "confirmed" else "✘ ")
        assert cells(app, 0)["action"] == "—"
        await until(pilot, lambda: cells(app, 1)["reclaim"] == "0.0", what="nothing to reclaim")
        assert cells(app, 1)["orphans"] == "0"


class RefusedKey(HostControl):
    """A host whose key changed: never retried, the error stays."""

    def __init__(self, name: str) -> None:
        self.name = name

    round_trip_s = None  # (HostSource) nothing measured

    @property
    def route(self) -> str:
        return f"the source {self.name}"

    @property
    def control(self) -> HostControl:
        return self

    async def stream(self, interval: float) -> AsyncIterator[HostSnapshot]:
        raise HostKeyError(f"{self.name}: host key changed (in /root/.ssh/known_hosts:3)")
        yield  # pragma: no cover

    async def close(self) -> None:
        return None

    async def sample(self) -> HostSnapshot:
        raise HostKeyError("changed")

    async def systemctl(self, verb: str, unit: str):  # type: ignore[no-untyped-def]
        raise HostKeyError("changed")

    async def signal(self, *a: object, **kw: object):  # type: ignore[no-untyped-def]
        raise HostKeyError("changed")

    async def sleep(self, seconds: float) -> None:
        return None


async def test_a_failing_host_shows_its_error_in_its_row_and_the_rest_go_on() -> None:
    clock = SteppedClock()
    app = fleet_app([ScenarioHost("gpu-a", "healthy", clock=clock),
                     UnreachableHost("gpu-b", clock=clock), RefusedKey("gpu-c\x1b[31m")])
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.views[2].state == "error"
                    and app.views[1].error is not None, what="both errors")
        await wait_for(pilot, lambda: "host key changed" in cells(app, 2)["link"])
        assert "\x1b" not in cells(app, 2)["host"] and "\\x1b" in cells(app, 2)["host"]
        await wait_for(pilot, lambda: "no answer within 10 s" in cells(app, 1)["link"]
                       or "reconnecting" in cells(app, 1)["link"])
        assert cells(app, 1)["reclaim"] == "N/A"
        history = len(app.views[0].history)
        await until(pilot, lambda: len(app.views[0].history) > history + 2, what="3 samples")
        assert cells(app, 0)["gpus"] == "8/8"
        assert "failing" in str(app.fleet.header.render())  # gpu-c, and gpu-b at times


async def test_a_row_that_cannot_be_drawn_says_so_and_the_others_stay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = fleet_screen.summarize

    def broken(result):  # type: ignore[no-untyped-def]
        if result.snapshot.host == "gpu-b":
            raise KeyError("gpu 9")
        return real(result)

    monkeypatch.setattr(fleet_screen, "summarize", broken)
    clock = SteppedClock()
    app = fleet_app([ScenarioHost("gpu-a", "stopped", clock=clock),
                     ScenarioHost("gpu-b", "healthy", clock=clock, seed=3)])
    async with app.run_test(size=SIZE) as pilot:
        await all_read(pilot, app)
        await wait_for(pilot, lambda: "display error" in cells(app, 1)["link"])
        assert "KeyError" in cells(app, 1)["link"]
        assert cells(app, 0)["orphans"] == "8"
        history = len(app.views[0].history)
        await until(pilot, lambda: len(app.views[0].history) > history + 2, what="3 samples")
        assert isinstance(app.screen, FleetScreen)


async def test_host_screen_is_not_drawn_while_the_fleet_is_on_screen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = fleet_app(fleet(3))
    async with app.run_test(size=SIZE) as pilot:
        await all_read(pilot, app)
        redraws: list[int] = []
        monkeypatch.setattr(app.main, "refresh_view", lambda: redraws.append(1))
        history = len(app.views[0].history)
        await until(pilot, lambda: len(app.views[0].history) > history + 3, what="4 samples")
        assert redraws == []
        await pilot.press("enter")
        assert redraws  # drawn afresh when it comes back on screen


async def test_fleet_key_is_rebindable() -> None:
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "gpudash"
    config.mkdir(parents=True)
    (config / "keymap.toml").write_text(
        '"gpudash.fleet" = "ctrl+f"\n"gpudash.fleet.sort" = "ctrl+s"\n')
    app = fleet_app(fleet(2))
    async with app.run_test(size=SIZE) as pilot:
        await all_read(pilot, app)
        await pilot.press("ctrl+s")
        assert app.fleet.sort_key != "reclaim"
        assert "ctrl+f comes back" in str(app.fleet.keys.render()).replace("^f", "ctrl+f")
        await pilot.press("enter")
        await pilot.press("ctrl+f")
        assert isinstance(app.screen, FleetScreen)
        assert MINIMAX  # the demo's unit, for readers of this test


async def test_the_fleet_offers_no_host_action_until_a_host_is_open() -> None:
    app = fleet_app(fleet(2))
    async with app.run_test(size=SIZE) as pilot:
        await all_read(pilot, app)
        offered = {action for _t, _h, action, _a in app.fleet.palette_commands()}
        assert "reclaim" not in offered and "host(1)" in offered
        assert app.main.check_action("reclaim", ()) is False
        await pilot.press("ctrl+p")  # the palette over the fleet: still the fleet
        await pilot.pause(0.2)
        assert app.fleet_shown
        await pilot.press("escape")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.view.triage is not None)
        assert "reclaim" in {action for _t, _h, action, _a in app.main.palette_commands()}


async def test_columns_follow_the_terminal_width_even_when_resized_elsewhere() -> None:
    app = fleet_app(fleet(3))
    async with app.run_test(size=SIZE) as pilot:
        await all_read(pilot, app)
        assert "mem" in [str(c.value) for c in app.fleet.table.columns]
        await pilot.resize_terminal(80, 24)
        await pilot.pause(0.2)
        labels = [str(c.label) for c in app.fleet.table.columns.values()]
        assert "mem" not in [str(c.value) for c in app.fleet.table.columns]
        assert "Orph" in labels and "Last action" in labels
        assert sum(c.get_render_width(app.fleet.table) for c in
                   app.fleet.table.columns.values()) <= 80 - 2
        await pilot.press("enter")
        await pilot.resize_terminal(160, 50)  # on the host screen
        await pilot.pause(0.2)
        await pilot.press("F")
        await pilot.pause(0.2)
        assert "mem" in [str(c.value) for c in app.fleet.table.columns]
        assert "comes back" in str(app.fleet.keys.render())  # the wide key line


# --- the first hour's rough edges (issue 20, "Fleet:") ----------------------------------


async def test_q_quits_the_fleet_and_never_types_into_its_filter() -> None:
    """q quits here as on the host screen (choice: the same key means the same thing on
    both screens); the filter matches anywhere in a name, so a name's q is never needed."""
    app = fleet_app(fleet(6))
    async with app.run_test(size=SIZE) as pilot:
        await all_read(pilot, app)
        await pilot.press("g", "p", "u")
        assert app.fleet.filter_text == "gpu"
        await pilot.press("q")
        assert app.fleet.filter_text == "gpu"
        await wait_for(pilot, lambda: not app.is_running)


async def test_help_on_the_fleet_is_the_fleets_with_its_columns() -> None:
    from textual.widgets import Static

    from gpudash.ui.screens import HelpScreen

    app = fleet_app(fleet(6))
    async with app.run_test(size=SIZE) as pilot:
        await all_read(pilot, app)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert app.fleet.filter_text == ""
        text = str(app.screen.query_one(Static).render())
        for words in ("Sort by the next column", "First / last row", "Columns",
                      "Reclaim GiB", "what reclaim would give back", "Crash loop",
                      "crashloop", "orphans", "down", "Quit"):
            assert words in text, words
        for host_key in ("Stop", "Reclaim:", "Journal", "Swap"):
            assert host_key not in text, host_key
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, FleetScreen))


async def test_end_goes_to_the_last_row_and_home_to_the_first() -> None:
    app = fleet_app(fleet(12))
    async with app.run_test(size=(120, 35)) as pilot:
        await all_read(pilot, app)
        await pilot.press("end")
        assert app.fleet.table.cursor_row == 11
        await pilot.press("home")
        assert app.fleet.table.cursor_row == 0


async def test_back_with_f_clears_the_filter_and_the_cursor_is_on_that_host() -> None:
    app = fleet_app(fleet(6))
    async with app.run_test(size=SIZE) as pilot:
        await all_read(pilot, app)
        await pilot.press("g", "p", "u", "0", "4")
        assert shown_names(app) == ["demo-gpu04"]
        await pilot.press("enter")
        assert isinstance(app.screen, MainScreen) and app.current_host == 3
        await pilot.press("h")  # on to the next host, then back to the fleet
        await wait_for(pilot, lambda: app.current_host == 4)
        await pilot.press("F")
        assert isinstance(app.screen, FleetScreen)
        assert app.fleet.filter_text == "" and len(shown_names(app)) == 6
        assert app.fleet._cursor_index() == 4  # demo-gpu05, the host just on screen
        # a modal over the fleet keeps the filter (only coming back from a host clears it)
        await pilot.press("g", "p", "u", "0")
        await pilot.press("question_mark")
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, FleetScreen))
        assert app.fleet.filter_text == "gpu0"


@pytest.mark.parametrize(("word", "expected"), [
    # the incident (01, 08), a stopped unit's leftovers (04, 11), an ended Slurm job's (07)
    ("orphans", {"demo-gpu01", "demo-gpu04", "demo-gpu07", "demo-gpu08", "demo-gpu11"}),
    ("crashloop", {"demo-gpu05", "demo-gpu12"}),
    ("down", {"demo-gpu03", "demo-gpu10"}),
    ("strays", {"demo-gpu07"}),  # the Slurm node: an ended job's schedulers on bob's GPUs
])
async def test_state_words_filter_the_hosts(word: str, expected: set[str]) -> None:
    app = fleet_app(fleet(12))
    async with app.run_test(size=SIZE) as pilot:
        await all_read(pilot, app)

        def summary_says(name: str) -> bool:
            index = [v.name for v in app.views].index(name)
            return word in app.fleet.row(index).states

        await until(pilot, lambda: all(summary_says(n) for n in expected), what=word)
        await pilot.press(*word)
        await wait_for(pilot, lambda: set(shown_names(app)) == expected, within=15)
        assert f"filter: {word}" in str(app.fleet.header.render())
        if word == "strays":  # and the wide table counts them (issue 31)
            assert int(cells(app, 6)["stray"]) == 4, cells(app, 6)
            others = [app.fleet.row(i).cells["stray"].plain for i in (0, 1, 3, 4, 5)]
            assert others == ["0"] * 5, others


async def test_a_long_error_wraps_in_the_link_column_and_shows_in_full_under_it() -> None:
    """At 80 columns the Link column is 13 cells: the error wraps in its row (up to 3
    lines), and the cursor host's whole error is the line under the table."""
    clock = SteppedClock()
    app = fleet_app([ScenarioHost("gpu-a", "healthy", clock=clock),
                     UnreachableHost("gpu-b", clock=clock)])
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: "no answer within 10 s" in cells(app, 1)["link"],
                    what="gpu-b's error")
        app.fleet.rebuild()
        await pilot.pause(0.2)
        table = app.fleet.table
        error = cells(app, 1)["link"]
        assert app.fleet._link_width() < len(error)  # one line would cut it
        lines = ["".join(seg.text for seg in table.render_line(y)).strip() for y in range(6)]
        at = next(i for i, line in enumerate(lines) if "gpu-b" in line)
        assert "error: no" in lines[at] and lines[at + 1].startswith("answer within")
        table.move_cursor(row=list(app.fleet._shown).index(1))
        await pilot.pause(0.2)
        detail = app.fleet.detail
        assert detail.display and detail.region.height >= 2
        shown = " ".join(str(detail.render()).split())
        assert "gpu-b: error: no answer within 10 s (simulated: this demo host is unreachable)" \
            in shown
        table.move_cursor(row=list(app.fleet._shown).index(0))  # connected: no detail line
        await pilot.pause(0.2)
        assert not detail.display


async def test_a_host_never_read_shows_na_orphans_on_the_host_strip() -> None:
    from gpudash.ui.widgets.header import HostList

    clock = SteppedClock()
    app = fleet_app([ScenarioHost("gpu-a", "incident", clock=clock),
                     UnreachableHost("gpu-b", clock=clock)])
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.views[0].triage is not None
                    and app.views[1].error is not None, what="one read, one failing")
        await pilot.press("enter")  # a host screen: the strip lists both hosts
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen))
        strip = app.main.query_one(HostList)
        await wait_for(pilot, lambda: strip.row_count == 2)
        await pilot.pause(0.5)
        orphans = {str(k.value): strip.get_row(k)[4].plain for k in strip.rows}
        assert orphans["1"] == "N/A"
        assert orphans["0"] == str(app.views[0].orphan_count())


async def test_the_crash_loop_column_shows_the_whole_unit_name_where_there_is_room() -> None:
    # at 200 columns it read "1 vllm-deepseek…" while Last action had room to spare
    app = fleet_app(fleet(6))
    async with app.run_test(size=(200, 50)) as pilot:
        await all_read(pilot, app)
        table = app.fleet.table
        [crash] = [c for c in table.columns.values() if str(c.key.value) == "crash"]
        await until(pilot, lambda: cells(app, 4)["crash"].startswith("1 vllm-"),
                    what="demo-gpu05's crash loop")
        longest = cells(app, 4)["crash"]
        # the column follows its longest cell, once the crash loop shows (the next tick)
        await wait_for(pilot, lambda: next(c for c in table.columns.values()
                                           if str(c.key.value) == "crash").width
                       >= len(longest), within=5)
        assert sum(c.get_render_width(table) for c in table.columns.values()) <= 200 - 2
    assert [w for c, _t, w in fleet_rows.column_widths(160) if c.key == "crash"] == [16]
    # as wide as its longest cell where there is room, never wider (issue 33, item 9: at
    # 200 columns it cut the name beside 30 empty ones)
    name = "1 vllm-deepseek-v3-very-long-model-name.service"
    assert [w for c, _t, w in fleet_rows.column_widths(200, len(name))
            if c.key == "crash"] == [len(name) + 1]
    assert [w for c, _t, w in fleet_rows.column_widths(150, len(name))
            if c.key == "crash"] == [26]  # 16 + what 150 has over 140
