"""The process table as nvitop and htop users expect it (issue 20, "The process table"):
sorted by a column they choose, a user column where there is room, filters by text, user
and GPU that Esc clears, owners and process trees that fold, and columns that keep their
priority when space is short.

Seen before: no sort, Enter on a GPU did nothing, the ▾ glyphs did not fold, and at
120x35 after the incident Flags widened to ``16×ORPHAN RESPAWNED UNIT INACTIVE`` and
pushed CPU, RSS, St and Age off screen.
"""

from __future__ import annotations

import pytest
from support import settled, until
from test_ui import main_pid, main_pid_or_none, make_app, run_confirmed, select, wait_for
from textual.widgets.data_table import ColumnKey

from gpudash.demo.host import MINIMAX, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.domain.triage import Flag
from gpudash.ui.app import GpudashApp
from gpudash.ui.screens import FilterScreen
from gpudash.ui.widgets.gpus import GpuTable
from gpudash.ui.widgets.holders import HoldersTable

LAPTOP = (80, 24)
PANE = (120, 35)
NOTEBOOK_KERNEL = 90211
SESSION = "u:session-4.scope"


def keys(app: GpudashApp) -> list[str]:
    return [str(k.value) for k in app.query_one(HoldersTable).rows]


def header(app: GpudashApp, column: str) -> str:
    return str(app.query_one(HoldersTable).columns[ColumnKey(column)].label)


def cell(app: GpudashApp, key: str, column: str) -> str:
    return str(app.query_one(HoldersTable).get_cell(key, column))


def workers(app: GpudashApp) -> list[str]:
    """The row keys of the model server's workers, in table order."""
    main = main_pid(app)
    snap = app.view.snapshot
    assert snap is not None
    pids = {p.pid for p in snap.processes if p.ppid == main}
    return [k for k in keys(app) if k.startswith("p:") and int(k[2:]) in pids]


async def started(pilot, app: GpudashApp) -> None:  # type: ignore[no-untyped-def]
    await wait_for(pilot, lambda: app.view.triage is not None
                   and app.query_one(HoldersTable).row_count > 10)
    await settled(pilot)  # laid out: the columns fitted to the table's width


async def test_a_key_cycles_the_sort_column_and_another_reverses_it() -> None:
    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=PANE) as pilot:
        await started(pilot, app)
        assert header(app, "mem") == "GPU memory ▼"
        by_rank = workers(app)
        assert keys(app).index(f"u:{MINIMAX}") < keys(app).index(SESSION)

        await pilot.press("greater_than_sign")  # SM%, the busiest on the GPU first
        await wait_for(pilot, lambda: header(app, "sm") == "SM% ▼")
        await pilot.press("greater_than_sign")  # CPU, the busiest first
        await wait_for(pilot, lambda: header(app, "cpu") == "CPU ▼")
        assert header(app, "mem") == "GPU memory"
        assert keys(app).index(f"u:{MINIMAX}") < keys(app).index(SESSION)
        await pilot.press("less_than_sign")  # the idlest first: the notebook's owner
        await wait_for(pilot, lambda: header(app, "cpu") == "CPU ▲")
        assert keys(app).index(SESSION) < keys(app).index(f"u:{MINIMAX}")

        for _ in range(3):  # RSS, age, pid
            await pilot.press("greater_than_sign")
        await wait_for(pilot, lambda: header(app, "who") == "PID ▲")
        assert workers(app) == sorted(by_rank, key=lambda k: int(k[2:]))
        await pilot.press("less_than_sign")
        await wait_for(pilot, lambda: header(app, "who") == "PID ▼")
        assert workers(app) == sorted(by_rank, key=lambda k: -int(k[2:]))
        # each owner's rows stay together, under the owner row
        rows = keys(app)
        assert rows.index(f"u:{MINIMAX}") < min(rows.index(k) for k in by_rank)
        assert all(rows.index(k) < rows.index(SESSION) for k in by_rank) or \
            all(rows.index(k) > rows.index(SESSION) for k in by_rank)

        assert "user" not in app.query_one(HoldersTable).shown_columns  # no room for it
        await pilot.press("greater_than_sign")  # user: shown while it is sorted by
        await wait_for(pilot, lambda: "user" in app.query_one(HoldersTable).shown_columns
                       and header(app, "user") == "User ▲")
        await pilot.press("greater_than_sign")
        await wait_for(pilot, lambda: header(app, "mem") == "GPU memory ▼")
        assert workers(app) == by_rank


# at 160x50 the command line's room goes first (issue 33): User shows at 200
@pytest.mark.parametrize(("size", "shown"), [(LAPTOP, False), ((160, 50), False),
                                             ((200, 50), True)],
                         ids=["80x24", "160x50", "200x50"])
async def test_the_user_column_shows_where_there_is_room(size: tuple[int, int],
                                                         shown: bool) -> None:
    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=size) as pilot:
        await started(pilot, app)
        table = app.query_one(HoldersTable)
        assert ("user" in table.shown_columns) is shown
        assert "who" in table.shown_columns and "mem" in table.shown_columns
        if shown:
            assert cell(app, f"p:{NOTEBOOK_KERNEL}", "user") == "alice"


async def test_the_text_filter_applies_as_typed_and_esc_clears_it_before_closing() -> None:
    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=LAPTOP) as pilot:
        await started(pilot, app)
        full = len(keys(app))
        await pilot.press("slash")
        await wait_for(pilot, lambda: isinstance(app.screen, FilterScreen))
        await pilot.press(*"alice")
        await wait_for(pilot, lambda: keys(app) == [SESSION, "p:90100", f"p:{NOTEBOOK_KERNEL}"])
        title = str(app.query_one(HoldersTable).border_title)
        assert "“alice”" in title and f"{full - 3} hidden" in title, title
        await pilot.press("escape")  # first: the filter goes, the input stays
        await wait_for(pilot, lambda: len(keys(app)) == full)
        assert isinstance(app.screen, FilterScreen)
        assert "hidden" not in str(app.query_one(HoldersTable).border_title)
        await pilot.press("escape")  # second: it closes
        await wait_for(pilot, lambda: not isinstance(app.screen, FilterScreen))
        assert len(keys(app)) == full


async def test_only_the_selected_users_processes_and_esc_shows_everyone() -> None:
    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=LAPTOP) as pilot:
        await started(pilot, app)
        full = len(keys(app))
        await select(pilot, app, f"p:{NOTEBOOK_KERNEL}")
        await pilot.press("U")
        await wait_for(pilot, lambda: keys(app) == [SESSION, "p:90100", f"p:{NOTEBOOK_KERNEL}"])
        assert "user alice" in str(app.query_one(HoldersTable).border_title)
        await pilot.press("escape")
        await wait_for(pilot, lambda: len(keys(app)) == full)
        assert "only" not in str(app.query_one(HoldersTable).border_title)


async def test_enter_on_a_gpu_shows_only_its_holders_and_again_all() -> None:
    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=PANE) as pilot:
        await started(pilot, app)
        full = len(keys(app))
        gpus = app.query_one(GpuTable)
        gpus.focus()
        gpus.move_cursor(row=3)
        await pilot.pause(0.1)
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(keys(app)) < full)
        snap = app.view.snapshot
        assert snap is not None
        on3 = [k for k in keys(app) if k.startswith("p:")
               and (snap.process(int(k[2:])).gpu_memory_mib.get(3) or 0) > 0]  # type: ignore[union-attr]
        assert len(on3) == 1  # TP3, under its server (kept so that the tree reads as one)
        assert keys(app) == [f"u:{MINIMAX}", f"p:{main_pid(app)}", *on3]
        assert "GPU 3" in str(app.query_one(HoldersTable).border_title)
        await pilot.press("enter")  # the same GPU again: all of them
        await wait_for(pilot, lambda: len(keys(app)) == full)
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(keys(app)) < full)
        await pilot.press("escape")
        await wait_for(pilot, lambda: len(keys(app)) == full)


@pytest.mark.parametrize("size", [LAPTOP, PANE], ids=["80x24", "120x35"])
async def test_left_collapses_right_expands_space_toggles(size: tuple[int, int]) -> None:
    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=size) as pilot:
        await started(pilot, app)
        full = len(keys(app))
        owner = f"u:{MINIMAX}"
        server = f"p:{main_pid(app)}"
        await select(pilot, app, server)
        assert cell(app, server, "who").startswith("└─ ▾ ")
        await pilot.press("left")  # the server's workers fold under it
        await wait_for(pilot, lambda: workers(app) == [])
        assert cell(app, server, "who").startswith("└─ ▸ ")
        assert server in keys(app)
        await pilot.press("right")
        await wait_for(pilot, lambda: len(keys(app)) == full)
        await select(pilot, app, owner)
        await pilot.press("space")
        await wait_for(pilot, lambda: server not in keys(app))
        assert cell(app, owner, "who").startswith("▸ ")
        await pilot.press("space")
        await wait_for(pilot, lambda: len(keys(app)) == full)
        assert cell(app, owner, "who").startswith("▾ ")
        # Left on a worker (nothing under it) folds its owner and goes to the owner's row
        worker = workers(app)[0]
        await select(pilot, app, worker)
        await pilot.press("left")
        await wait_for(pilot, lambda: server not in keys(app))
        assert app.selected_key == owner


async def test_after_the_incident_flags_abbreviate_and_cpu_rss_age_stay() -> None:
    app = make_app(DemoHost(clock=SteppedClock(), release_delay=2))
    async with app.run_test(size=PANE) as pilot:
        await wait_for(pilot, lambda: app.view.snapshot is not None)
        first_main = main_pid(app)
        await select(pilot, app, f"p:{first_main}")
        await run_confirmed(pilot, app, "k")
        # systemd respawns it after RestartSec: until then a sample finds no main PID
        await until(pilot, lambda: main_pid_or_none(app) not in (None, first_main),
                    what="the respawn")
        await select(pilot, app, f"u:{MINIMAX}")
        await run_confirmed(pilot, app, "D")
        await until(pilot, lambda: len(app.view.triage.orphans()) == 16,  # type: ignore[union-attr]
                    what="16 orphans")
        group = app.view.triage.group(MINIMAX)  # type: ignore[union-attr]
        # stopped and disabled: orphaned workers, no longer respawning (issue 33, item 9)
        assert group is not None and {Flag.ORPHAN, Flag.UNIT_INACTIVE} <= group.flags
        assert Flag.RESPAWNED not in group.flags
        table = app.query_one(HoldersTable)
        # the owner's row: its own flag (its processes' are on their rows)
        await wait_for(pilot, lambda: cell(app, f"u:{MINIMAX}", "flags") == "INACT")
        for column in ("cpu", "rss", "age"):
            assert column in table.shown_columns, table.shown_columns
        orphan = app.view.triage.orphans()[0]  # type: ignore[union-attr]
        assert cell(app, f"p:{orphan.pid}", "flags") == "ORPH"
        assert table.fixed_columns == 1  # Right scrolls to the command, the PID stays


def test_columns_give_way_by_their_declared_priority() -> None:
    from gpudash.ui.widgets.holder_columns import fit_columns

    widest = {"who": 26, "flags": 33}  # "16×ORPHAN RESPAWNED UNIT INACTIVE"

    def shown(room: int, keep: str | None = None) -> tuple[list[str], bool]:
        fit = fit_columns(room, widest, 6, keep=keep)
        return [k for k, _l, _w in fit.columns], fit.short_flags

    everything = ["who", "mem", "flags", "cpu", "sm", "rss", "st", "age", "user", "cmd"]
    assert shown(10**6) == (everything, False)
    # the columns take 124 cells; the command keeps up to 36 more (what is past 78)
    assert shown(160) == (everything, False)
    assert shown(159) == ([k for k in everything if k != "user"], False)  # User first
    assert shown(149) == ([k for k in everything if k != "user"], True)  # then ORPH+2
    assert shown(122) == ([k for k in everything if k not in ("user", "sm")], True)  # SM%
    assert shown(116) == (["who", "mem", "flags", "cpu", "rss", "age", "cmd"], True)  # St
    assert shown(76) == (["who", "mem", "flags", "cpu", "rss", "cmd"], True)  # Age
    assert shown(70, keep="user")[0][-2:] == ["user", "cmd"]  # the sorted column stays
    # a wider table never shows fewer columns
    counts = [len(shown(room)[0]) for room in range(40, 200)]
    assert counts == sorted(counts)
