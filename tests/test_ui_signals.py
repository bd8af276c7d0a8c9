"""The dashboard told to stop from outside (SIGTERM: `kill`, systemd, a closing tmux; SIGHUP:
the terminal went away) quits as "Quit now" does: an action running is stopped where it is
and its outcome audited, and the terminal is given back. Real app, real pty, real signals."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def audit(name: str = "audit-demo.jsonl") -> list[dict]:
    path = Path(os.environ["XDG_STATE_HOME"]) / "gpudash" / name
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class Dashboard:
    def __init__(self) -> None:
        self.master, slave = pty.openpty()
        env = os.environ | {"TERM": "xterm-256color", "COLUMNS": "160", "LINES": "50"}
        self.proc = subprocess.Popen([sys.executable, "-m", "gpudash", "--demo"], stdin=slave,
                                     stdout=slave, stderr=slave, env=env, start_new_session=True)
        os.close(slave)
        self.screen = b""

    def read(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if ready:
                try:
                    self.screen += os.read(self.master, 65536)
                except OSError:
                    return

    def wait_for(self, text: bytes, within: float = 40.0) -> None:
        end = time.monotonic() + within
        while text not in self.screen:
            assert time.monotonic() < end and self.proc.poll() is None, self.screen[-2000:]
            self.read(0.2)

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def finish(self, within: float = 30.0) -> int:
        end = time.monotonic() + within
        while self.proc.poll() is None and time.monotonic() < end:
            self.read(0.2)
        if self.proc.poll() is None:
            self.proc.kill()
            raise AssertionError("the dashboard did not exit")
        self.read(0.3)
        os.close(self.master)
        return self.proc.returncode


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_acting_stops_the_action_audits_it_and_restores_the_terminal(
    sig: int,
) -> None:
    d = Dashboard()
    d.wait_for(b"Quit")
    d.read(1.0)
    d.type("r")  # the unit row is selected: reclaim it
    d.wait_for(b"Confirm")
    d.type("y")
    end = time.monotonic() + 30
    while not audit() and time.monotonic() < end:  # the intent record: it is acting
        d.read(0.2)
    assert audit(), d.screen[-2000:]
    d.read(1.0)
    d.proc.send_signal(sig)
    code = d.finish()
    assert code == 6, (code, d.screen[-3000:])  # as Quit now: something had been sent
    intent, outcome = audit()
    assert outcome["id"] == intent["id"] and outcome["interrupted"] is True
    assert b"\x1b[?1049l" in d.screen  # the alternate screen was left: the terminal is back


def test_a_signal_while_idle_just_quits() -> None:
    d = Dashboard()
    d.wait_for(b"Quit")
    d.read(1.0)
    d.proc.send_signal(signal.SIGTERM)
    assert d.finish() == 0
    assert b"\x1b[?1049l" in d.screen
    assert audit() == []
