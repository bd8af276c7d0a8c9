"""Layout snapshots of the main screen, per theme and size (layout only; behaviour is
asserted in test_ui.py). The demo is seeded and the app's clock frozen so that the
screen is the same on every run."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import until

from gpudash.demo.host import MINIMAX, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.engine import ExecOptions
from gpudash.ui.app import GpudashApp
from gpudash.ui.screens import ConfirmModal
from gpudash.ui.widgets.holders import HoldersTable

THEMES_DIR = Path(__file__).resolve().parents[1] / "themes"
FROZEN = 1_800_000_000.0


def frozen_app(
    theme: str, *, read_only: bool = False, demo: DemoHost | None = None,
    exec_options: ExecOptions | None = None,
) -> GpudashApp:
    # One sample only (a long interval): the demo's random utilisation/power are drawn per
    # sample from its seeded generator, so the first sample is always the same.
    return GpudashApp(
        [demo or DemoHost(seed=7, clock=SteppedClock())], interval=3600.0, read_only=read_only,
        theme=theme, exec_options=exec_options, clock=lambda: FROZEN, theme_dirs=[THEMES_DIR],
    )


async def _first_sample(pilot) -> None:  # type: ignore[no-untyped-def]
    app = pilot.app
    for _ in range(200):
        if app.view.snapshot is not None:
            break
        await pilot.pause(0.02)
    await pilot.pause(0.1)


@pytest.mark.parametrize("theme", ["gpudash-night", "gpudash-day", "textual-dark"])
def test_main_screen(snap_compare, theme: str) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(frozen_app(theme), terminal_size=(160, 50), run_before=_first_sample)


def test_main_screen_small_read_only(snap_compare) -> None:  # type: ignore[no-untyped-def]
    app = frozen_app("gpudash-night", read_only=True)
    assert snap_compare(app, terminal_size=(100, 30), run_before=_first_sample)


async def _open_reclaim_plan(pilot) -> None:  # type: ignore[no-untyped-def]
    await _first_sample(pilot)
    pilot.app.query_one(HoldersTable).select_key(f"u:{MINIMAX}")
    await pilot.pause(0.1)
    await pilot.press("r")
    for _ in range(100):
        if isinstance(pilot.app.screen, ConfirmModal) and pilot.app.screen.armed:
            break
        await pilot.pause(0.02)
    await pilot.pause(0.1)


async def _reclaim_waiting_for_term(pilot) -> None:  # type: ignore[no-untyped-def]
    await _open_reclaim_plan(pilot)
    await pilot.press("y")
    app = pilot.app

    def waiting() -> bool:
        state = app.controller.shown
        return (state is not None and state.progress is not None
                and state.progress.phase == "waiting")

    # the host's time moves until the reclaim waits (TERM sent, TP5 ignoring it), then
    # stands still for as long as the snapshot takes
    await until(pilot, waiting, what="the reclaim waiting for TERM")
    await pilot.pause(0.2)


def test_confirm_reclaim_plan(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(frozen_app("gpudash-night"), terminal_size=(160, 50),
                        run_before=_open_reclaim_plan)


# The sizes on-call engineers use: a laptop split and a tmux pane (issue 10).
SMALL = [(80, 24), (120, 35)]


@pytest.mark.parametrize("size", SMALL, ids=lambda s: f"{s[0]}x{s[1]}")
def test_main_screen_small(snap_compare, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    async def unit_selected(pilot) -> None:  # type: ignore[no-untyped-def]
        await _first_sample(pilot)
        pilot.app.query_one(HoldersTable).select_key(f"u:{MINIMAX}")
        await pilot.pause(0.2)

    assert snap_compare(frozen_app("gpudash-night"), terminal_size=size,
                        run_before=unit_selected)


@pytest.mark.parametrize("size", SMALL, ids=lambda s: f"{s[0]}x{s[1]}")
def test_confirm_reclaim_plan_small(snap_compare, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(frozen_app("gpudash-night"), terminal_size=size,
                        run_before=_open_reclaim_plan)


@pytest.mark.parametrize("size", SMALL, ids=lambda s: f"{s[0]}x{s[1]}")
def test_running_reclaim_small(snap_compare, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    app = frozen_app("gpudash-night", demo=DemoHost(seed=7, clock=SteppedClock(),
                                                    release_delay=0.0),
                     exec_options=ExecOptions(term_timeout=10.0, poll=0.5))
    assert snap_compare(app, terminal_size=size, run_before=_reclaim_waiting_for_term)


# --- the fleet table -----------------------------------------------------------------------


class KeyChangedHost:
    """A host whose key changed: refused once, never retried, so its row is the same on
    every run."""

    def __init__(self, name: str) -> None:
        self.name = name

    round_trip_s = None  # (HostSource) nothing measured

    @property
    def route(self) -> str:
        return f"the source {self.name}"

    @property
    def control(self):  # type: ignore[no-untyped-def]
        return self

    async def stream(self, interval: float):  # type: ignore[no-untyped-def]
        from gpudash.protocol.source import HostKeyError

        raise HostKeyError(f"{self.name}: host key changed; ssh-keygen -R {self.name}")
        yield  # pragma: no cover

    async def close(self) -> None:
        return None


def frozen_fleet() -> GpudashApp:
    from gpudash.demo.fleet import ScenarioHost

    scenarios = ("incident", "healthy", "stopped", "crash-loop", "healthy")
    hosts = [ScenarioHost(f"gpu0{i + 1}", scenario, seed=7 + i, clock=SteppedClock())
             for i, scenario in enumerate(scenarios)]
    return GpudashApp(
        [*hosts, KeyChangedHost("gpu06")], interval=3600.0, read_only=False,  # type: ignore[list-item]
        theme="gpudash-night", exec_options=None, clock=lambda: FROZEN,
        theme_dirs=[THEMES_DIR],
    )


async def _fleet_read(pilot) -> None:  # type: ignore[no-untyped-def]
    app = pilot.app
    for _ in range(200):
        if all(v.snapshot is not None or v.state == "error" for v in app.views):
            break
        await pilot.pause(0.02)
    app.log_action("gpu02", "Reclaim", "confirmed: 756.3 GiB back on 8 GPUs", True)
    await pilot.pause(0.2)
    app.fleet.refresh_all()
    await pilot.pause(0.1)


@pytest.mark.parametrize("size", [(120, 35), (80, 24)], ids=["120x35", "80x24"])
def test_fleet_screen(snap_compare, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(frozen_fleet(), terminal_size=size, run_before=_fleet_read)
