"""A flat process list beside the tree (htop's F5) and copying what is selected (OSC 52):
reached for in the operator's walk and not found (issue 33, item 10)."""

from __future__ import annotations

from test_ui import make_app, select, wait_for
from test_ui_holder_reasons import PAL, cells

from gpudash.demo.host import MINIMAX, NOTEBOOK_MIB, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.domain.triage import triage
from gpudash.ui.widgets.holder_view import HolderView
from gpudash.ui.widgets.holders import HoldersTable, holder_rows


def test_the_flat_list_sorts_every_process_across_owners_and_names_each_owner() -> None:
    t = triage(DemoHost().snapshot())
    rows = holder_rows(t, PAL, HolderView(flat=True))
    keys = [r.key for r in rows]
    assert all(k.startswith("p:") for k in keys), keys  # no owner rows, no fold
    pids = [int(k[2:]) for k in keys]
    assert sorted(pids) == sorted(p.pid for g in t.groups for n in g.nodes()
                                  for p in [n.process])
    memory = [t.snapshot.process(pid).total_gpu_memory_mib for pid in pids]  # type: ignore[union-attr]
    assert memory == sorted(memory, reverse=True)  # GPU memory, largest first, across owners
    kernel = next(p for p in t.snapshot.processes if p.total_gpu_memory_mib == NOTEBOOK_MIB)
    # the notebook's kernel (2 GiB) comes after every MiniMax worker, before its own server
    assert keys.index(f"p:{kernel.pid}") == 8, keys
    row = cells(rows, f"p:{kernel.pid}")
    assert row["cmd"].startswith("session-4.scope │ "), row
    assert row["who"].startswith(f"{kernel.pid} "), row
    worker = cells(rows, keys[0])
    assert worker["cmd"].startswith(f"{MINIMAX} │ ") and "GPU" in worker["mem"], worker
    # sorted by PID instead: ascending, still across owners
    by_pid = holder_rows(t, PAL, HolderView(sort="pid", descending=False, flat=True))
    assert [int(r.key[2:]) for r in by_pid] == sorted(pids)


async def test_f5_toggles_the_flat_list_and_keeps_the_selected_process() -> None:
    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=(160, 50)) as pilot:
        table = app.query_one(HoldersTable)
        await select(pilot, app, f"u:{MINIMAX}")
        worker = next(str(k.value) for k in table.rows
                      if str(k.value).startswith("p:215") and str(k.value) != "p:215023")
        await select(pilot, app, worker)
        await pilot.press("f5")
        await wait_for(pilot, lambda: not any(str(k.value).startswith("u:")
                                              for k in table.rows))
        assert app.selected_key == worker
        assert "flat" in str(table.border_title)
        await pilot.press("left")  # nothing to fold in a flat list: nothing happens
        assert app.selected_key == worker
        await pilot.press("f5")
        await wait_for(pilot, lambda: f"u:{MINIMAX}" in [str(k.value) for k in table.rows])
        assert app.selected_key == worker and "by owner" in str(table.border_title)


async def test_y_copies_the_command_line_through_osc_52_and_an_owners_name() -> None:
    demo = DemoHost(clock=SteppedClock())
    app = make_app(demo)
    async with app.run_test(size=(160, 50)) as pilot:
        main = demo.units[MINIMAX].main_pid
        await select(pilot, app, f"p:{main}")
        await pilot.press("Y")
        await wait_for(pilot, lambda: app.clipboard != "")
        assert app.clipboard == demo.processes[main].cmdline  # type: ignore[index]
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("Y")
        await wait_for(pilot, lambda: app.clipboard == MINIMAX)


async def test_a_command_line_with_control_bytes_is_copied_without_them() -> None:
    demo = DemoHost(clock=SteppedClock())
    p = demo.spawn(ppid=1, user="mallory", name="x", cmdline="evil\x1b]0;pwned\x07 --x",
                   unit=None, gpu_memory_mib={0: 512})
    app = make_app(demo)
    async with app.run_test(size=(160, 50)) as pilot:
        await select(pilot, app, f"p:{p.pid}")
        await pilot.press("Y")
        await wait_for(pilot, lambda: app.clipboard != "")
        assert "\x1b" not in app.clipboard and "\x07" not in app.clipboard
        assert app.clipboard.startswith("evil") and app.clipboard.endswith("--x")


async def test_p_pauses_the_drawing_and_again_draws_the_newest() -> None:
    """A process that appears while paused is recorded, not drawn; p again draws it."""
    from support import next_sample

    demo = DemoHost(clock=SteppedClock())
    app = make_app(demo)
    async with app.run_test(size=(160, 50)) as pilot:
        table = app.query_one(HoldersTable)
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("p")
        await wait_for(pilot, lambda: "PAUSED" in str(app.screen.query_one("#header").render()))
        new = demo.spawn(ppid=1, user="bob", name="python", cmdline="python late.py",
                         unit=None, gpu_memory_mib={3: 1024})
        await next_sample(pilot)
        await next_sample(pilot)
        assert app.view.snapshot is not None and app.view.snapshot.process(new.pid)
        assert f"p:{new.pid}" not in [str(k.value) for k in table.rows]  # not drawn
        await pilot.press("p")
        await wait_for(pilot, lambda: f"p:{new.pid}" in [str(k.value) for k in table.rows])
        assert "PAUSED" not in str(app.screen.query_one("#header").render())


async def test_m_tags_processes_and_k_kills_them_all_in_one_pinned_plan() -> None:
    """htop's Space: tag several processes, one action for them all (issue 33, item 10).
    Here: two workers a stopped unit left, one plan with a pinned step each."""
    from test_ui import run_confirmed

    from gpudash.demo.fleet import ScenarioHost
    from gpudash.ui.widgets.holders import TAG

    clock = SteppedClock()
    demo = ScenarioHost("demo-gpu04", "stopped", clock=clock)  # workers left, unit down
    app = make_app(demo)
    async with app.run_test(size=(160, 50)) as pilot:
        from support import until

        await until(pilot, lambda: app.view.triage is not None
                    and len(app.view.triage.orphans()) == 8, what="the orphans")
        first, second = (p.pid for p in app.view.triage.orphans()[:2])  # type: ignore[union-attr]
        await select(pilot, app, f"p:{first}")
        await pilot.press("m")
        await select(pilot, app, f"p:{second}")
        await pilot.press("m")
        table = app.query_one(HoldersTable)
        await wait_for(pilot, lambda: "2 tagged" in str(table.border_title))
        row = table.get_row(f"p:{first}")
        assert row[0].plain.split(TAG)[-1].startswith(str(first))
        await select(pilot, app, f"u:{MINIMAX}")  # the cursor elsewhere: the tags act
        assert app.main.selection().pids == tuple(sorted((first, second)))
        await run_confirmed(pilot, app, "k")
        report = app.reports[-1]
        assert report.plan.subject.startswith("2 tagged processes")
        assert sorted(s.target.pid for s in report.plan.steps) == sorted((first, second))
        assert report.verdict == "confirmed", report.describe()
        await until(pilot, lambda: app.view.snapshot is not None
                    and app.view.snapshot.process(first) is None
                    and app.view.snapshot.process(second) is None, what="both gone")
        others = [p.pid for p in app.view.triage.orphans()]  # type: ignore[union-attr]
        assert len(others) == 6  # the untagged orphans were left alone
        await pilot.press("M")
        await wait_for(pilot, lambda: "tagged" not in str(table.border_title))


async def test_help_has_a_legend_of_every_flag_short_and_long() -> None:
    """Flags are short where the table is narrow (ORPH+1): help says what each is."""
    from gpudash.domain.triage import Flag
    from gpudash.ui.screens import HelpScreen
    from gpudash.ui.widgets.holder_flags import SHORT_FLAG

    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=(120, 50)) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        shown = "\n".join(str(w.render()) for w in app.screen.query("Static"))
        for flag in Flag:
            assert f"{SHORT_FLAG[flag]:<5} {flag.value}" in shown, flag
        assert "holds GPU memory and its owner is gone" in shown


async def test_plus_and_minus_change_every_hosts_sample_interval_live() -> None:
    """Changing the interval without restarting was reached for and not found (issue
    33, item 10): + samples less often, - more often; the follower (its last sample, its
    crash-loop watch) is kept, only the stream is started again at the new pace."""
    from support import stepped_clock_of

    demo = DemoHost(clock=SteppedClock())
    app = make_app(demo)  # every 0.25 s
    async with app.run_test(size=(160, 50)) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        clock = stepped_clock_of(app)

        async def samples_in(seconds: float) -> int:
            before = len(app.view.history)
            for _ in range(int(seconds / 0.25)):
                await clock.advance(0.25)
                await pilot.pause(0.01)
            return len(app.view.history) - before

        fast = await samples_in(5.0)
        follower = app.feeds._followers[0]
        await pilot.press("plus", "plus")  # 0.25 -> 0.5 -> 1 s
        await wait_for(pilot, lambda: app.sample_interval == 1.0)
        assert app.stale_after == 5.0 and app.feeds._followers[0] is follower
        await samples_in(1.0)  # the new stream's first sample
        slow = await samples_in(5.0)
        assert 15 <= fast <= 21 and 3 <= slow <= 7, (fast, slow)
        await pilot.press("minus")
        await wait_for(pilot, lambda: app.sample_interval == 0.5)
