"""The holders table gives the command line its room (issue 33, item 1).

Seen at 160x50 after `k` on the demo: Command showed 4 characters (`orph`, `pyth`) while
Flags took ~20 (`8×ORPHAN RESPAWNED` on the owner row, repeating its processes' flags as
a count); an orphan's reason was readable only at 200 columns; the three models not
started took a row each. Now: the command line keeps ``COMMAND_SOFT`` cells while a
column less needed than Flags can go for it, an orphan's reason is said briefly beside
its owner's row, the owner row carries its own flags (a count only when folded), and the
idle units are one line that opens.
"""

from __future__ import annotations

from dataclasses import replace

from test_ui_holder_reasons import PAL, cells

from gpudash.demo.fleet import ScenarioHost
from gpudash.demo.host import DEEPSEEK, KIMI, MINIMAX, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.domain.triage import HostTriage, triage
from gpudash.ui.widgets.holder_columns import COMMAND_SOFT, fit_columns
from gpudash.ui.widgets.holder_view import HolderView
from gpudash.ui.widgets.holders import IDLE_KEY, cell_widths, holder_rows

ROOM_160 = 114  # the holders table's cells at 160 columns, beside the unit panel


async def respawned_incident() -> HostTriage:
    """The demo host after its vLLM server was SIGKILLed and systemd started a new one:
    the old workers are orphans of an earlier run."""
    clock = SteppedClock()
    host = ScenarioHost("demo-gpu01", "incident", clock=clock)
    first = host.units[MINIMAX].main_pid
    await host._arrange()
    for _ in range(240):
        host.snapshot()  # the world moves as it is sampled
        main = host.units[MINIMAX].main_pid
        if main not in (None, first) and main in host.processes:
            break
        await clock.advance(0.5)
    else:
        raise AssertionError("systemd never respawned the server")
    t = triage(host.snapshot())
    assert len(t.orphans()) == 8
    return t


def shown(room: int, rows: list) -> dict[str, int]:  # type: ignore[type-arg]
    fit = fit_columns(room, *cell_widths(rows))
    return {k: w for k, _l, w in fit.columns}


async def test_an_orphans_reason_is_read_at_160_columns() -> None:
    t = await respawned_incident()
    main = t.snapshot.unit(MINIMAX).main_pid  # type: ignore[union-attr]
    rows = holder_rows(t, PAL)
    orphan = t.orphans()[0]
    cmd = cells(rows, f"p:{orphan.pid}")["cmd"]
    said = f"orphan: earlier run, main now {main}"
    assert cmd.startswith(said + " · VLLM::Worker_TP"), cmd
    assert len(said) <= COMMAND_SOFT
    # at 160 columns what is left to the command line shows all of it, and Flags, CPU,
    # RSS and Age stay (User and SM% went for it; Flags is short)
    widths = shown(ROOM_160, rows)
    left = ROOM_160 - sum(w + 2 for k, w in widths.items() if k != "cmd") - 2
    assert left >= len(said), (left, widths)
    assert {"who", "mem", "flags", "cpu", "rss", "age"} <= set(widths), widths
    # the full cause stays where there is room for it (the unit panel, the plan)
    assert t.orphan_cause(orphan.pid) == (
        f"is left from an earlier run of {MINIMAX} (main pid now {main}, NRestarts=1)")


async def test_the_owner_row_says_its_own_flags_and_counts_only_when_folded() -> None:
    t = await respawned_incident()
    owner = cells(holder_rows(t, PAL), f"u:{MINIMAX}")
    assert owner["flags"] == "RESPAWNED", owner  # the 8 ORPHANs are on their own rows
    folded = holder_rows(t, PAL, HolderView(collapsed=frozenset({f"u:{MINIMAX}"})))
    assert cells(folded, f"u:{MINIMAX}")["flags"] == "8×ORPHAN RESPAWNED"


def test_flags_never_give_way_to_the_command_line() -> None:
    widest = {"who": 26, "flags": 9}
    at_80 = [k for k, _l, _w in fit_columns(76, widest, 4).columns]
    assert at_80[:3] == ["who", "mem", "flags"] and at_80[-1] == "cmd", at_80
    # wide enough for everything and the command's room: nothing goes
    everything = [k for k, _l, _w in fit_columns(10**6, widest, 4).columns]
    assert [k for k, _l, _w in fit_columns(140, widest, 4).columns] == everything


def test_idle_units_are_one_line_that_opens() -> None:
    t = triage(DemoHost().snapshot())  # the first sample: deepseek and kimi not started
    rows = holder_rows(t, PAL)
    keys = [r.key for r in rows]
    assert IDLE_KEY in keys and f"u:{MINIMAX}" in keys
    assert f"u:{DEEPSEEK}" not in keys and f"u:{KIMI}" not in keys
    line = cells(rows, IDLE_KEY)
    assert (line["who"], line["mem"], line["flags"]) == ("▸ 2 idle units", "none", "")
    assert line["cmd"] == "vllm-deepseek-v3, vllm-kimi-k25"
    opened = holder_rows(t, PAL, HolderView(opened=frozenset({IDLE_KEY})))
    assert cells(opened, IDLE_KEY)["who"].startswith("▾ ")
    at = [r.key for r in opened].index(IDLE_KEY)
    assert [r.key for r in opened][at + 1:] == [f"u:{DEEPSEEK}", f"u:{KIMI}"]
    assert len(opened) == len(rows) + 2


def test_one_idle_unit_keeps_its_own_row() -> None:
    snapshot = DemoHost().snapshot()  # the first sample: deepseek and kimi idle
    assert IDLE_KEY in [r.key for r in holder_rows(triage(snapshot), PAL)]
    one = replace(snapshot, units=tuple(u for u in snapshot.units if u.name != KIMI))
    keys = [r.key for r in holder_rows(triage(one), PAL)]
    assert IDLE_KEY not in keys and f"u:{DEEPSEEK}" in keys


async def test_right_opens_the_idle_units_and_left_folds_them() -> None:
    from test_ui import make_app, select, wait_for

    from gpudash.ui.widgets.holders import HoldersTable

    def keys_of(app) -> list[str]:  # type: ignore[no-untyped-def]
        return [str(k.value) for k in app.query_one(HoldersTable).rows]

    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=(160, 50)) as pilot:
        await select(pilot, app, f"u:{KIMI}", opened=True)  # Right on "▸ 2 idle units"
        assert f"u:{DEEPSEEK}" in keys_of(app)
        await select(pilot, app, IDLE_KEY)
        await pilot.press("left")
        await wait_for(pilot, lambda: f"u:{KIMI}" not in keys_of(app))
        assert app.selected_key == IDLE_KEY
        await pilot.press("space")
        await wait_for(pilot, lambda: f"u:{KIMI}" in keys_of(app))
