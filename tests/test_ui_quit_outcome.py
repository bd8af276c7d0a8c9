"""Quitting while an action runs tells its outcome (issue 19, item 8), on a real pty.

Seen before: "Quit now" printed `sent:` twice and not what still held memory; "Quit when
done" exited 0 printing no verdict.
"""

from __future__ import annotations

import pytest
from ptydash import ESCAPES, Dashboard, audit
from test_ui_hangup import at

pytestmark = pytest.mark.terminal  # a real pty, in real time: not the fast tier



def printed_after(d: Dashboard) -> str:
    """What the command line wrote once the dashboard had restored the terminal."""
    tail = d.screen.rsplit(b"\x1b[?1049l", 1)[-1]  # after leaving the alternate screen
    return ESCAPES.sub(b"", tail).decode("utf-8", "replace").replace("\r", "")


def test_quit_now_says_what_was_sent_once_and_what_still_holds_memory() -> None:
    d = Dashboard()
    at("quit dialog", d)
    d.type("y")  # Quit now
    code = d.finish()
    out = printed_after(d)
    assert code == 6, out
    assert "quit while an action was running: stopped where it was" in out, out
    assert out.count("sent:") == 1, out
    assert "still held: GPU" in out or "nothing of its plan held GPU memory" in out, out
    assert audit()[-1].get("interrupted"), audit()


def test_quit_when_done_waits_and_prints_the_verdict_as_its_exit_status() -> None:
    d = Dashboard()
    at("quit dialog", d)
    d.type("w")  # Quit when done
    code = d.finish(within=60)
    out = printed_after(d)
    assert "quit once the action had ended:" in out, out
    assert "Reclaim unit" in out and "confirmed" in out, out
    assert code == 0, out
