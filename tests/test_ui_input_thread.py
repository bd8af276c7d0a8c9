"""The terminal's input thread sleeps until there is something to read (issue 30: CPU).

Textual's input loop wakes ten times a second to look for keys; with nothing typed that
was a tenth of the dashboard's CPU beside nvitop. Ours sleeps until a key comes, until a
half-read escape sequence is due (a lone Esc is the Escape key only once no more bytes
follow), or until the driver stops it. Here the real loop reads a real pseudo-terminal;
only where its events go is replaced (``process_message``: the app's queue).
"""

from __future__ import annotations

import asyncio
import os
import pty
import signal
import threading
import time
import tty
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from textual import events

from gpudash.ui.driver import SafeLinuxDriver


class _Driver(SafeLinuxDriver):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.events: list[events.Event] = []
        self.seen = threading.Condition()

    def process_message(self, message: Any) -> None:
        with self.seen:
            self.events.append(message)
            self.seen.notify_all()

    def keys(self) -> list[str]:
        with self.seen:
            return [e.key for e in self.events if isinstance(e, events.Key)]

    def wait_key(self, key: str, within: float) -> float | None:
        """Seconds until ``key`` was read, or None."""
        t0 = time.monotonic()
        with self.seen:
            while key not in [e.key for e in self.events if isinstance(e, events.Key)]:
                left = t0 + within - time.monotonic()
                if left <= 0:
                    return None
                self.seen.wait(left)
        return time.monotonic() - t0


def wakeups(native_id: int) -> int:
    """How many times the thread went to sleep and woke since it began (Linux)."""
    status = Path(f"/proc/self/task/{native_id}/status").read_text()
    return int(status.split("voluntary_ctxt_switches:")[1].split()[0])


@pytest.fixture
async def reading() -> AsyncIterator[tuple[_Driver, int, threading.Thread]]:
    """The driver's input loop in its own thread, reading a fresh pty; the master end."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTSTP, signal.SIGCONT)}
    master, slave = pty.openpty()
    tty.setraw(slave)  # as the app's terminal: each key as typed, no line editing
    driver = _Driver(object(), mouse=False)  # type: ignore[arg-type]
    driver.fileno = slave
    thread = threading.Thread(target=driver._run_input_thread, name="input under test")
    driver._key_thread = thread
    thread.start()
    await asyncio.sleep(0.2)  # begun, and asleep
    try:
        yield driver, master, thread
    finally:
        driver.disable_input()
        thread.join(2)
        for fd in (master, slave):
            os.close(fd)
        for s, handler in handlers.items():
            signal.signal(s, handler)


async def test_with_nothing_typed_the_input_thread_sleeps(
        reading: tuple[_Driver, int, threading.Thread]) -> None:
    driver, master, thread = reading
    assert thread.native_id is not None
    before = wakeups(thread.native_id)
    await asyncio.sleep(1.5)
    woke = wakeups(thread.native_id) - before
    assert woke <= 2, f"the input thread woke {woke} times in 1.5 s with nothing typed"
    assert thread.is_alive()


async def test_a_key_is_read_at_once_and_a_lone_escape_once_nothing_follows(
        reading: tuple[_Driver, int, threading.Thread]) -> None:
    driver, master, thread = reading
    os.write(master, b"q")
    took = driver.wait_key("q", within=2)
    assert took is not None and took < 0.5, driver.keys()
    os.write(master, b"\x1b")  # Esc alone: the parser waits for more, then gives up
    took = driver.wait_key("escape", within=2)
    assert took is not None and took < 1.0, driver.keys()
    os.write(master, b"\x1b[A")  # a whole sequence is one key, not an Escape and "[A"
    assert driver.wait_key("up", within=2) is not None, driver.keys()
    assert driver.keys().count("escape") == 1, driver.keys()


async def test_stopping_wakes_the_sleeping_thread_and_a_new_one_can_start(
        reading: tuple[_Driver, int, threading.Thread]) -> None:
    driver, master, thread = reading
    t0 = time.monotonic()
    driver.disable_input()  # as Textual's stop and suspend call it: joins the thread
    assert time.monotonic() - t0 < 1.0
    assert not thread.is_alive()
    again = threading.Thread(target=driver._run_input_thread, name="input again")
    driver._key_thread = again
    driver._input_done = False  # as start_application_mode does before it starts one
    again.start()  # as a resume after a suspend does
    os.write(master, b"r")
    assert driver.wait_key("r", within=2) is not None, driver.keys()
    driver.disable_input()
    assert not again.is_alive()


@pytest.mark.timeout(30)  # a thread that missed its stop hangs the join below
async def test_a_stop_as_the_thread_starts_still_ends_it() -> None:
    """disable_input called before the thread has reached its loop: the thread must see
    it (it reads the flag the stop set before its wake-up), not sleep for ever."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTSTP, signal.SIGCONT)}
    master, slave = pty.openpty()
    try:
        for _ in range(20):
            driver = _Driver(object(), mouse=False)  # type: ignore[arg-type]
            driver.fileno = slave
            thread = threading.Thread(target=driver._run_input_thread)
            driver._key_thread = thread
            thread.start()
            driver.disable_input()  # joins it: a thread asleep here would hang the test
            assert not thread.is_alive()
    finally:
        for fd in (master, slave):
            os.close(fd)
        for s, handler in handlers.items():
            signal.signal(s, handler)
