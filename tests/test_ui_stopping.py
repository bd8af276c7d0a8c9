"""The bound on ending when told from outside, and the terminal writer that never blocks
for good: the mechanisms under the dashboard's hang-up tests, with real signals in a real
child process and real threads."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
import threading
import time

from gpudash.ui.driver import STOP_WAIT_S, BoundedWriter

# A front end whose teardown never ends: the quit the stop asks for does nothing, and the
# main thread then sits in a blocking call, as Textual's did on a dead terminal.
STUCK = textwrap.dedent("""
    import asyncio, queue, sys, time
    from gpudash.ui.stopping import OutsideStop

    stop = OutsideStop(lambda: 6, deadline_s=float(sys.argv[1]))
    async def main():
        stop.install(asyncio.get_running_loop(), lambda why: print("asked:", why, flush=True))
        print("ready", flush=True)
        await asyncio.sleep(0.5)  # the loop hears the first signal here
        q = queue.Queue(1); q.put(0)
        q.put(1)  # stuck for ever, loop and all
    asyncio.run(main())
""")


def _stuck(deadline: float) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", STUCK, str(deadline)], stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


def test_a_teardown_stuck_for_ever_is_ended_at_the_deadline() -> None:
    p = _stuck(1.5)
    sent = time.monotonic()
    p.terminate()
    assert p.wait(10) == 6
    took = time.monotonic() - sent
    assert 1.4 < took < 4, took
    assert p.stdout is not None and "asked: signal SIGTERM" in p.stdout.read()


def test_a_second_signal_ends_it_at_once_even_with_the_loop_stuck() -> None:
    p = _stuck(30)
    p.terminate()
    time.sleep(1.0)  # the loop has heard it and is stuck now
    sent = time.monotonic()
    p.terminate()
    assert p.wait(10) == 6
    assert time.monotonic() - sent < 1.0


class _DeadTerminal(io.StringIO):
    def __init__(self, after: int = 0) -> None:
        super().__init__()
        self.after = after

    def write(self, text: str) -> int:
        if self.after <= 0:
            raise OSError(5, "Input/output error")
        self.after -= 1
        return super().write(text)


class _StalledTerminal(io.StringIO):
    """A terminal that takes no more output (flow control, a stalled link)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def write(self, text: str) -> int:
        self.release.wait()
        return len(text)


def test_a_terminal_that_fails_is_reported_once_and_never_blocks_a_writer() -> None:
    lost: list[str] = []
    w = BoundedWriter(_DeadTerminal(after=3), on_lost=lost.append)  # type: ignore[arg-type]
    w.start()
    t0 = time.monotonic()
    for n in range(1000):  # far more than the queue holds
        w.write(f"frame {n}")
    w.stop()
    assert time.monotonic() - t0 < 2.0
    assert not w.is_alive()
    assert len(lost) == 1 and "Input/output error" in lost[0]


def test_a_stalled_terminal_is_abandoned_by_a_stop_and_given_up_writes_return() -> None:
    term = _StalledTerminal()
    w = BoundedWriter(term, on_lost=lambda why: None)  # type: ignore[arg-type]
    w.start()
    # Told to stop 0.5 s from now, from another thread (a signal handler, in the app).
    threading.Timer(0.5, w.given_up.set).start()
    t0 = time.monotonic()
    for n in range(40):  # one in the stuck write, 30 queued, then a write that waits
        w.write(f"frame {n}")
    assert 0.4 < time.monotonic() - t0 < 1.5  # it waited for room until told to stop
    t0 = time.monotonic()
    w.stop()
    assert time.monotonic() - t0 < 2 * STOP_WAIT_S + 0.5
    assert w.is_alive()  # abandoned: a daemon thread, it does not keep the process
    term.release.set()
