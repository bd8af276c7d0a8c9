"""When the host gives nothing to show, the body says what failed, what was tried and what
to do; the demo's walkthrough covers nothing and follows the keymap."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from support import until
from test_ui import wait_for

from gpudash.demo.host import KIMI, MINIMAX, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.engine import ExecOptions
from gpudash.protocol.source import ConnectError
from gpudash.ui.app import GpudashApp
from gpudash.ui.screens import ConfirmModal
from gpudash.ui.widgets.holders import HoldersTable
from gpudash.ui.widgets.notice import advice, tried

LAPTOP = (80, 24)
DNS_ERROR = "cannot connect to gpu01.example: [Errno -2] Name or service not known"


class UnknownHost:
    """A host whose name does not resolve: every attempt fails the same way."""

    name = "gpu01.example"

    async def stream(self, interval: float):  # type: ignore[no-untyped-def]
        raise ConnectError(DNS_ERROR)
        yield  # pragma: no cover - makes this an async generator

    round_trip_s = None  # (HostSource) nothing measured

    @property
    def route(self) -> str:
        return f"the source {self.name}"

    @property
    def control(self):  # type: ignore[no-untyped-def]
        raise AssertionError("nothing acts on a host that was never reached")

    async def close(self) -> None:
        return None


class NoDriverHost(DemoHost):
    """A host without the NVIDIA driver: processes and units, no GPU."""

    def wire(self) -> dict[str, Any]:
        return {
            **super().wire(), "gpus": {}, "degraded": True,
            "errors": ["no NVIDIA driver: libnvidia-ml not loadable and nvidia-smi not found"],
        }


async def test_unreachable_host_says_in_the_body_what_failed_was_tried_and_to_do() -> None:
    app = GpudashApp([UnknownHost()], interval=0.25, read_only=False, theme=None,
                     exec_options=None)
    async with app.run_test(size=LAPTOP) as pilot:
        notice = app.query_one("#notice")
        await wait_for(pilot, lambda: notice.display)
        text = notice.render().plain
        assert DNS_ERROR in text  # in full: the header cuts it at 80 columns
        assert "Tried: the source gpu01.example" in text
        assert "What to do: check the host name" in text
        assert notice.region.width == LAPTOP[0] and notice.region.bottom <= LAPTOP[1]


async def test_a_host_without_driver_says_so_instead_of_an_empty_table() -> None:
    app = GpudashApp([NoDriverHost(clock=SteppedClock())], interval=0.25, read_only=False,
                     theme=None, exec_options=None)
    async with app.run_test(size=LAPTOP) as pilot:
        notice = app.query_one("#notice")
        await wait_for(pilot, lambda: notice.display)
        text = notice.render().plain
        assert "No GPU data from demo-gpu01: no NVIDIA driver" in text
        assert "Tried: NVML (libnvidia-ml.so.1), then nvidia-smi" in text
        assert "install or load the NVIDIA driver" in text


def test_ssh_attempt_and_advice_are_worded_for_the_operator() -> None:
    from gpudash.transport.ssh import SshSource

    source = SshSource("ssh://root@gpu01.example:2222")
    assert tried(source) == (
        "SSH to root@gpu01.example port 2222 with your ~/.ssh/config and agent")
    assert "sshd running" in advice("gpu01: Connection refused", "gpu01")
    assert "did not answer" in advice("gpu01: no answer within 10 s", "gpu01")
    assert "ssh-add -l" in advice("gpu01: authentication refused (x)", "gpu01")


def write_keymap(text: str) -> None:
    path = Path(os.environ["XDG_CONFIG_HOME"]) / "gpudash" / "keymap.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


async def test_walkthrough_covers_nothing_follows_the_keymap_and_the_incident() -> None:
    write_keymap('"gpudash.kill" = "K"\n')
    demo = DemoHost(clock=SteppedClock(), release_delay=2)
    app = GpudashApp([demo], interval=0.25, read_only=False, theme=None,
                     exec_options=ExecOptions(term_timeout=10.0, poll=0.5), welcome=True)
    async with app.run_test(size=LAPTOP, notifications=True) as pilot:
        guide = app.query_one("#guide")
        await wait_for(pilot, lambda: "Demo 1/6" in guide.render().plain)
        assert "press K" in guide.render().plain and "press k" not in guide.render().plain
        assert not [n for n in app._notifications if n.title == "Welcome"]
        # In the layout, between the log and the footer: over nothing.
        log = app.query_one("#log")
        assert guide.region.y >= log.region.bottom and guide.region.bottom < LAPTOP[1]
        main = demo.units[MINIMAX].main_pid
        table = app.query_one(HoldersTable)
        await wait_for(pilot, lambda: f"p:{main}" in [str(k.value) for k in table.rows])
        table.select_key(f"p:{main}")
        await wait_for(pilot, lambda: app.selected_key == f"p:{main}")
        await pilot.press("K")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
        await pilot.press("y")
        await until(pilot, lambda: "Demo 2/6" in guide.render().plain, what="Demo 2/6")
        assert "press D" in guide.render().plain


def test_walkthrough_steps_follow_the_demo_state() -> None:
    from gpudash.domain.triage import triage
    from gpudash.ui.walkthrough import demo_step, guide_text

    demo = DemoHost(seed=7)
    keys = {"kill": "K", "reclaim": "r", "stop_disable": "D", "reap": "o", "swap": "w",
            "start_unit": "u", "enable_unit": "e", "fix_unit": "c", "journal": "j",
            "help": "?", "quit": "q"}.get
    first = triage(demo.snapshot())
    assert demo_step(first) == 1 and "press K" in guide_text(first, keys).plain  # type: ignore[arg-type]
    assert "the action runs" in guide_text(first, keys, running=True).plain  # type: ignore[arg-type]
    demo.units[MINIMAX].kill_mode = "control-group"
    demo.units[MINIMAX].active = False
    for p in list(demo.processes.values()):
        if p.unit == MINIMAX:
            demo.processes.pop(p.pid)
    assert demo_step(triage(demo.snapshot())) == 4
    four = triage(demo.snapshot())
    assert "select vllm-kimi-k25 and press u" in guide_text(four, keys).plain  # type: ignore[arg-type]
    demo.units[KIMI].active = True  # the next model was started
    assert demo_step(triage(demo.snapshot())) == 5
    # issue 33, item 6: the demo said "done" with the new unit disabled, and never
    # suggested c (fix the cause): it goes on through both
    five = triage(demo.snapshot())
    assert "press e to start it at boot" in guide_text(five, keys).plain  # type: ignore[arg-type]
    demo.units[KIMI].unit_file_state = "enabled"
    six = triage(demo.snapshot())
    assert demo_step(six) == 6 and "press c to fix the cause" in guide_text(six, keys).plain  # type: ignore[arg-type]
    demo.units[KIMI].restart = "always"  # what the drop-in writes (vLLM exits 0: #48966)
    demo.units[KIMI].start_limit_interval_s, demo.units[KIMI].start_limit_burst = 600.0, 5
    done = triage(demo.snapshot())
    assert demo_step(done) == 7 and "Demo done" in guide_text(done, keys).plain  # type: ignore[arg-type]


async def test_ctrl_c_says_how_to_quit_in_plain_words() -> None:
    # issue 33, item 9: Ctrl+C showed raw markup, "Press [b]ctrl+q[/b] to quit"
    from test_ui import SIZE, make_app

    from gpudash.demo.host import DemoHost

    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+c")
        await pilot.pause(0.2)
        said = [n.message for n in app._notifications]
        assert any(m.startswith("Press ") and m.endswith(" to quit the app") for m in said), said
        assert not any("[b]" in m for m in said), said
        assert app.is_running
