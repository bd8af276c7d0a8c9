"""Regenerate screenshots/*.svg from the demo host: python screenshots/regenerate.py

Plays the incident on the demo (kill -9 of the vLLM main process, so systemd respawns it
and the old workers are orphaned), then saves: the main screen, the confirm dialog of a
reclaim plan, and the confirmed result; at 160x50 (main.svg, ...) and at a laptop's
80x24 (main-80x24.svg, ...). Then the fleet view of ``--demo-hosts 6`` (fleet.svg), after
a reclaim on the host whose unit was stopped with its workers left behind; and the fleet
from a Prometheus (prometheus-fleet.svg: recorded answers replayed on 127.0.0.1).

``python screenshots/regenerate.py [THEME] --swap`` saves the model swap instead: its plan
(swap-plan.svg), the next model loading (swap-loading.svg), serving (swap-serving.svg), and
and a swap into a model whose learned footprint fits but that cannot load, stopped and
explained (swap-failed.svg; with nothing learned its start is refused before anything is
sent).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from gpudash.demo.host import DEEPSEEK, KIMI, MINIMAX, DemoHost  # noqa: E402
from gpudash.engine import ExecOptions  # noqa: E402
from gpudash.ui.app import GpudashApp  # noqa: E402
from gpudash.ui.screens import ConfirmModal  # noqa: E402

SIZES = {"": (160, 50), "-80x24": (80, 24)}  # file name suffix -> terminal size


async def until(pilot, predicate, within: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit("the demo did not reach the expected state")
        await pilot.pause(0.05)


async def main(theme: str, suffix: str, size: tuple[int, int]) -> None:
    demo = DemoHost(speed=20, release_delay=3, containers=True)  # as gpudash --demo
    app = GpudashApp(
        [demo], interval=0.25, read_only=False, theme=theme,
        exec_options=ExecOptions(term_timeout=10.0, poll=0.5), welcome=True,
    )
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: len(app.view.history) >= 8)
        main_pid = app.view.snapshot.unit(MINIMAX).main_pid
        app.main.holders.select_key(f"p:{main_pid}")
        await pilot.pause(0.2)
        await pilot.press("k")
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await pilot.press("y")
        await until(pilot, lambda: len(app.reports) == 1)
        await until(pilot, lambda: app.view.triage is not None and app.view.triage.orphans())
        await pilot.pause(2.0)  # some history after the respawn
        app.main.action_hide_result()
        app.main.holders.select_key(f"u:{MINIMAX}")
        await pilot.pause(0.5)
        app.save_screenshot(f"main{suffix}.svg", str(HERE))
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await pilot.pause(0.3)
        app.save_screenshot(f"confirm-reclaim{suffix}.svg", str(HERE))
        await pilot.press("y")
        await until(pilot, lambda: len(app.reports) == 2)
        await pilot.pause(1.5)
        app.save_screenshot(f"reclaim-confirmed{suffix}.svg", str(HERE))


async def fleet(theme: str, suffix: str, size: tuple[int, int]) -> None:
    from gpudash.demo.fleet import demo_fleet
    from gpudash.domain.fleet import summarize

    app = GpudashApp(
        demo_fleet(6, speed=20), interval=0.25, read_only=False, theme=theme,
        exec_options=ExecOptions(term_timeout=10.0, poll=0.5),
    )
    async with app.run_test(size=size) as pilot:
        def looping() -> bool:
            t = app.views[4].triage
            return t is not None and bool(summarize(t).crash_looping)

        await until(pilot, looping)
        app.fleet.sort_by("host")
        await pilot.pause(0.2)
        app.fleet.table.move_cursor(row=3)  # demo-gpu04: stopped, its workers left behind
        await pilot.press("enter")
        await until(pilot, lambda: app.main.availability("reclaim")[0] is True)
        app.main.holders.select_key(f"u:{MINIMAX}")
        await pilot.pause(0.2)
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await pilot.press("y")
        await until(pilot, lambda: len(app.reports) == 1, within=60)
        await pilot.press("F")
        app.fleet.sort_key, app.fleet.descending = "reclaim", True
        app.fleet.rebuild(columns=True)
        app.fleet.table.move_cursor(row=app.fleet._shown.index(2))  # the unreachable one
        await pilot.pause(1.0)
        app.save_screenshot(f"fleet{suffix}.svg", str(HERE))


async def prometheus(theme: str, size: tuple[int, int]) -> None:
    """``gpudash --prometheus``: the fleet as a real Prometheus answered it (the answers
    tests/data/fleetprom recorded, replayed on 127.0.0.1): gpudash's exporters and
    dcgm-exporter hosts side by side."""
    import json

    sys.path.insert(0, str(HERE.parent / "tests"))
    from promfakes import Recorded, serving

    from gpudash.state.promconfig import PromSettings
    from gpudash.ui.prom_app import PromFleetApp

    answers = json.loads((HERE.parent / "tests" / "data" / "fleetprom" / "answers.json")
                         .read_text())
    at = answers["gpudash"]["data"]["result"][0]["value"][0]  # when it was recorded
    recorded = Recorded(answers)
    with serving(recorded.handler()) as url:
        app = PromFleetApp(PromSettings(url=url), interval=0.5, theme=theme,
                           clock=lambda: at + 2.0)
        async with app.run_test(size=size) as pilot:
            await until(pilot, lambda: len(app.fleet._shown) >= 8)
            await pilot.pause(0.5)
            app.save_screenshot("prometheus-fleet.svg", str(HERE))
        recorded.release.set()


def progress_text(app: GpudashApp) -> str:
    return str(app.query_one("#progress").render())


def learn_deepseek_smaller() -> None:
    """DeepSeek once served here in 90 GiB a GPU: the fit check lets its start through,
    and vLLM's own start-up check (0.99 of each GPU) fails beside alice's kernel."""
    import json

    from gpudash.state import footprints

    path = footprints.store_path(simulated=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"demo-gpu01": {DEEPSEEK: {
        "mib_per_gpu": {str(g): 92_160 for g in range(8)}, "ready_s": 60.0, "seen_at": 1.0}}}))


async def swap(theme: str, to: str, size: tuple[int, int]) -> None:
    demo = DemoHost(speed=8, release_delay=1, containers=True)  # as gpudash --demo
    app = GpudashApp(
        [demo], interval=0.25, read_only=False, theme=theme,
        exec_options=ExecOptions(term_timeout=10.0, poll=0.5, verify_timeout=120.0),
    )
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: len(app.view.history) >= 8)
        app.main.holders.select_key(f"u:{MINIMAX}")
        await pilot.pause(0.3)
        await pilot.press("w")
        await until(pilot, lambda: type(app.screen).__name__ == "ModelPicker")
        await pilot.press(*("kimi" if to == KIMI else "deepseek"))
        await pilot.pause(0.3)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await pilot.pause(0.3)
        if to == KIMI:
            app.save_screenshot("swap-plan.svg", str(HERE))
        await pilot.press("y")
        if to == KIMI:
            await until(pilot, lambda: "37% of checkpoint shards" in progress_text(app)
                        or "50% of checkpoint shards" in progress_text(app), within=90)
            app.save_screenshot("swap-loading.svg", str(HERE))
        await until(pilot, lambda: len(app.reports) == 1, within=120)
        await pilot.pause(1.0)
        app.save_screenshot("swap-serving.svg" if to == KIMI else "swap-failed.svg", str(HERE))


if __name__ == "__main__":
    # The demo's actions append to the audit file: keep these out of the real one.
    os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="gpudash-shots-")
    args = [a for a in sys.argv[1:] if a != "--swap"]
    chosen = args[0] if args else "gpudash-night"
    if "--swap" in sys.argv:
        learn_deepseek_smaller()  # for the swap that starts, then crash-loops
        for target in (KIMI, DEEPSEEK):
            asyncio.run(swap(chosen, target, SIZES[""]))
    else:
        for name_suffix, terminal in SIZES.items():
            asyncio.run(main(chosen, name_suffix, terminal))
            asyncio.run(fleet(chosen, name_suffix, terminal))
        asyncio.run(prometheus(chosen, (160, 30)))
    print("wrote", ", ".join(sorted(p.name for p in HERE.glob("*.svg"))))
