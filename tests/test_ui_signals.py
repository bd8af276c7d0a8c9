"""The dashboard told to stop from outside (SIGTERM: `kill`, systemd, a closing tmux; SIGHUP:
the terminal went away) quits as "Quit now" does: an action running is stopped where it is
and its outcome audited, and the terminal is given back. Real app, real pty, real signals."""

from __future__ import annotations

import signal
import time

import pytest
from ptydash import Dashboard, audit

pytestmark = pytest.mark.terminal  # a real pty, in real time: not the fast tier


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_acting_stops_the_action_audits_it_and_restores_the_terminal(
    sig: int,
) -> None:
    d = Dashboard()
    d.wait_for(b"Quit")
    d.read(1.0)
    d.type("r")  # the unit row is selected: reclaim it
    d.confirm()
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
