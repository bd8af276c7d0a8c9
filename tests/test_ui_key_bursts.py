"""Keys never overtake a mode switch (issue 29, item 5).

Seen: ``tmux send-keys '/k'`` (a fast typist, or a paste) opened the filter empty *and* the
"Kill process (KILL)" dialog; ``/mini`` typed fast left the filter empty, and a later ``c``
acted on the wrong unit's row. A burst here is what a terminal's one read gives Textual:
every key posted to the App before any is handled (``pilot.press`` waits between keys, so
it never showed this); the last test types into a real tmux pane as the report did.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_ui import SIZE, main_pid, make_app, select, wait_for
from textual import events
from textual.widgets import Input

from gpudash.demo.host import KIMI, MINIMAX, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.ui.app import GpudashApp
from gpudash.ui.models import JournalScreen, ModelPicker
from gpudash.ui.screens import ConfirmModal, FilterScreen

NAMES = {"/": "slash", "\r": "enter", "\x1b": "escape", " ": "space"}


def burst(app: GpudashApp, text: str) -> None:
    """``text`` as one read of the terminal: every key queued before the first is handled."""
    for char in text:
        app.post_message(events.Key(NAMES.get(char, char), None if char == "\x1b" else char))


def notices(app: GpudashApp) -> str:
    return "\n".join(f"{n.title}: {n.message}" for n in app._notifications)


async def test_slash_k_in_one_burst_filters_by_k_and_opens_no_kill_dialog() -> None:
    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, f"p:{main_pid(app)}")  # k (kill) is live on this row
        assert app.main.check_action("kill", ()) is True
        burst(app, "/k")
        await wait_for(pilot, lambda: isinstance(app.screen, FilterScreen))
        await wait_for(pilot, lambda: app.screen.query_one(Input).value == "k")
        await pilot.pause(0.3)
        assert not any(isinstance(s, ConfirmModal) for s in app.screen_stack)
        assert "Kill" not in notices(app), notices(app)
        assert app.holder_filter == "k"


async def test_slash_mini_enter_typed_fast_filters_by_mini() -> None:
    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        burst(app, "/mini\r")
        await wait_for(pilot, lambda: app.holder_filter == "mini"
                       and not isinstance(app.screen, FilterScreen))
        await pilot.pause(0.2)
        # every row left is MiniMax's: a later key acts on what the filter shows
        assert all("minimax" in str(k.value) or str(k.value).startswith("p:")
                   for k in app.main.query_one("HoldersTable").rows)  # type: ignore[attr-defined]


async def test_what_is_typed_while_the_picker_asks_the_host_goes_to_the_picker() -> None:
    # w asks the host for its model units before the picker opens: "kimi" and Enter typed
    # meanwhile pick Kimi (its k would have been the kill key)
    app = make_app(DemoHost(clock=SteppedClock(), release_delay=1))
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        burst(app, "wkimi\r")
        # mounted, not just pushed: an app that exits while the dialog mounts leaves it
        # without its buttons, and its on_mount fails
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal)
                       and app.screen.is_mounted, within=20)
        lines = "\n".join(app.screen.lines)
        assert f"$ systemctl start {KIMI}" in lines, lines
        assert not any(isinstance(s, ModelPicker) for s in app.screen_stack)
        assert "Kill" not in notices(app), notices(app)


async def test_slash_quit_in_the_journal_filters_and_never_closes_it() -> None:
    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("j")
        await wait_for(pilot, lambda: isinstance(app.screen, JournalScreen))
        burst(app, "/quit")
        await wait_for(pilot, lambda: app.screen.query_one("#needle", Input).value == "quit")
        assert isinstance(app.screen, JournalScreen)


async def test_keys_typed_after_a_refused_plan_are_dropped_and_said() -> None:
    # u on Kimi while the host stops answering: the plan ends, no dialog opens; the k
    # typed after it must not kill the selected process
    from gpudash.protocol.source import LinkLost

    demo = DemoHost(clock=SteppedClock())
    app = make_app(demo)
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, f"u:{KIMI}", opened=True)

        async def gone() -> None:
            raise LinkLost("demo-gpu01: the link dropped")

        demo.sample = gone  # type: ignore[method-assign]
        burst(app, "uk")
        await wait_for(pilot, lambda: "dropped" in notices(app), within=15)
        assert "1 key(s) typed meanwhile were dropped" in notices(app)
        await pilot.pause(0.3)
        assert not any(isinstance(s, ConfirmModal) for s in app.screen_stack)


async def test_keys_typed_after_a_start_that_does_not_fit_go_to_its_force_question() -> None:
    # u on Kimi beside a loaded MiniMax: refused, and asked whether to force it; the k typed
    # after u reaches that question (too early to count), never the holders' kill
    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, f"u:{KIMI}", opened=True)
        burst(app, "uk")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal), within=15)
        assert any("force it?" in line for line in app.screen.lines)
        assert "Kill" not in notices(app)


async def test_quitting_is_never_held() -> None:
    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=SIZE) as pilot:
        app.hold_keys()  # an input opening that never does
        burst(app, "x")
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: app.return_code is not None or not app.is_running)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux (tests/run.sh installs it)")
def test_slash_k_sent_by_tmux_in_one_send_keys(tmp_path: Path) -> None:
    session = f"gpudash-burst-{os.getpid()}"
    env = {**os.environ, "TERM": "xterm-256color"}
    run = [sys.executable, "-m", "gpudash", "--demo"]
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "50",
                    *run], check=True, env=env, timeout=30)
    try:
        def screen() -> str:
            return subprocess.run(["tmux", "capture-pane", "-p", "-t", session],
                                  capture_output=True, text=True, timeout=10).stdout

        deadline = time.monotonic() + 60
        while "Holders" not in screen() or "vLLM server" not in screen():
            assert time.monotonic() < deadline, screen()
            time.sleep(0.3)
        subprocess.run(["tmux", "send-keys", "-t", session, "/k"], check=True, timeout=10)
        deadline = time.monotonic() + 20
        while "▊  k " not in screen():  # the filter box, with k in it
            assert time.monotonic() < deadline, screen()
            time.sleep(0.2)
        time.sleep(0.5)
        shown = screen()
        assert "Kill" not in shown.replace("KillMode", ""), shown
        assert "Confirm" not in shown, shown
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], timeout=10)
