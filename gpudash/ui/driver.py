"""The terminal driver: Textual's Linux driver, made safe for a terminal that goes away.

When the pty is gone (the SSH session dropped, ``tmux kill-session``), writes fail with
EIO and reads return EOF. Textual's own writer thread dies on the first failed write and
leaves its bounded queue without a reader, so the next ``write`` (or the ``stop`` that
shutdown calls) blocks the event loop forever; its input thread spins on EOF. Here:

- the writer never blocks the loop for good: once the terminal failed it discards what is
  queued, and a stop waits a bounded time for it, then abandons it (a daemon thread);
- EOF or an error reading the terminal, and an error writing it, are reported once to
  ``on_lost`` (from the thread that saw it): the app quits as after SIGHUP.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import selectors
import threading
import weakref
from codecs import getincrementaldecoder
from collections.abc import Callable, Iterator
from functools import partial
from typing import IO, Any

from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.drivers import linux_driver
from textual.drivers.linux_driver import LinuxDriver

log = logging.getLogger("gpudash.ui.driver")

MAX_QUEUED_WRITES = 30  # as Textual's writer: a slow terminal slows the app, not its memory
PUT_POLL_S = 0.1  # a blocked write looks this often whether the terminal was given up
STOP_WAIT_S = 1.0  # what a stop waits for the writer to drain before abandoning it
POLL_S = 0.1  # the longest the input thread sleeps with an escape sequence half read


class BoundedWriter(threading.Thread):
    """A drop-in for Textual's ``WriterThread`` whose failure never blocks its callers."""

    def __init__(self, file: IO[str], *, on_lost: Callable[[str], None]) -> None:
        super().__init__(daemon=True, name="gpudash-output")
        self._queue: queue.Queue[str | None] = queue.Queue(MAX_QUEUED_WRITES)
        self._file = file
        self._on_lost = on_lost
        self.failed = threading.Event()  # the terminal refused a write: discard the rest
        self.given_up = threading.Event()  # a stop is under way: never wait for room

    def write(self, text: str) -> None:
        """Queue ``text``; drop it once the terminal failed or a stop gave up on it."""
        while not self.failed.is_set():
            try:
                self._queue.put(text, timeout=PUT_POLL_S)
                return
            except queue.Full:
                if self.given_up.is_set() or not self.is_alive():
                    return

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._file.fileno()

    def flush(self) -> None:
        return  # the thread flushes when the queue runs empty

    def run(self) -> None:
        while True:
            text = self._queue.get()
            if text is None:
                break
            if self.failed.is_set():
                continue  # keep draining, so that no writer ever waits for room
            try:
                self._file.write(text)
                if self._queue.qsize() == 0:
                    self._file.flush()
            except (OSError, ValueError) as exc:  # EIO: the terminal hung up
                self._fail(f"writing to the terminal failed: {exc}")
        if not self.failed.is_set():
            try:
                self._file.flush()
            except (OSError, ValueError) as exc:
                self._fail(f"writing to the terminal failed: {exc}")

    def _fail(self, why: str) -> None:
        self.failed.set()
        self._on_lost(why)

    def stop(self) -> None:
        """Finish writing what is queued, within ``STOP_WAIT_S``; else abandon the thread."""
        self.given_up.set()
        try:
            self._queue.put(None, timeout=STOP_WAIT_S)
        except queue.Full:
            pass
        self.join(STOP_WAIT_S)
        if self.is_alive():
            log.warning("terminal writer still blocked after %.1f s: abandoned", STOP_WAIT_S)


@contextlib.contextmanager
def _writer_class(factory: Callable[[IO[str]], Any]) -> Iterator[None]:
    """Textual's driver makes its writer from a module-level name: ours, while it starts."""
    original = linux_driver.WriterThread  # type: ignore[attr-defined]
    linux_driver.WriterThread = factory  # type: ignore[attr-defined,assignment]
    try:
        yield
    finally:
        linux_driver.WriterThread = original  # type: ignore[attr-defined]


class SafeLinuxDriver(LinuxDriver):
    """Textual's Linux driver with a bounded writer and a terminal-loss report.

    ``on_lost`` is called at most once, from the thread that saw the loss; Textual makes
    the driver itself, so it is a class attribute (``safe_driver`` makes the class).
    """

    on_lost: Callable[[str], None] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The input thread's wake-up pipe: the driver's for its lifetime (one per app), so
        # a stop never writes to a descriptor a finished thread closed and the system gave
        # to someone else.
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)
        # closed with the driver (the input thread holds the driver while it runs)
        weakref.finalize(self, _close, self._wake_read, self._wake_write)
        self._input_done = False  # set before the wake-up: the thread's loop reads it
        self._lost_lock = threading.Lock()
        self.lost: str | None = None

    def _terminal_lost(self, why: str) -> None:
        with self._lost_lock:
            if self.lost is not None:
                return
            self.lost = why
        log.warning("terminal lost: %s", why)
        if self.on_lost is not None:
            self.on_lost(why)

    def give_up_writes(self) -> None:
        """A stop is under way: a terminal that takes no more output is not waited for."""
        writer = self._writer_thread
        if isinstance(writer, BoundedWriter):
            writer.given_up.set()

    def start_application_mode(self) -> None:
        self._input_done = False  # a new input thread (a resume after a suspend) runs
        with _writer_class(partial(BoundedWriter, on_lost=self._terminal_lost)):
            super().start_application_mode()  # type: ignore[no-untyped-call]

    def stop_application_mode(self) -> None:
        if self.lost is not None:
            # Nothing to restore on a terminal that is gone; only the input thread to end.
            self.disable_input()
            return
        super().stop_application_mode()

    def _run_input_thread(self) -> None:
        try:
            self.run_input_thread()
        except OSError as exc:  # EIO and friends: the terminal is gone
            self._terminal_lost(f"reading the terminal failed: {exc}")
        except BaseException:  # as Textual's: a bug in parsing input ends the app loudly
            import rich.traceback

            self._app.call_later(self._app.panic, rich.traceback.Traceback())

    def disable_input(self) -> None:
        """Wake the input thread (it sleeps until a key comes), then Textual's stop."""
        self._input_done = True
        with contextlib.suppress(OSError):  # a wake-up already waiting is enough
            os.write(self._wake_write, b"x")
        super().disable_input()

    def run_input_thread(self) -> None:
        """Textual's input loop, except that:

        - EOF on the terminal ends it as a loss (Textual would select the closed terminal
          in a busy loop for ever);
        - it sleeps until a key comes, a half-read escape sequence times out, or
          ``disable_input`` wakes it (Textual's wakes ten times a second, a tenth of the
          dashboard's CPU when nothing happens).
        """
        selector = selectors.SelectSelector()
        selector.register(self.fileno, selectors.EVENT_READ)
        selector.register(self._wake_read, selectors.EVENT_READ)
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode
        try:
            while not (self.exit_event.is_set() or self._input_done):
                for key, mask in selector.select(parser_wait(parser)):
                    if key.fd == self._wake_read:
                        os.read(self._wake_read, 64)  # the loop's test says what it was for
                        continue
                    if not mask & selectors.EVENT_READ:
                        continue
                    data = os.read(self.fileno, 1024 * 4)
                    if not data:
                        self._terminal_lost("the terminal closed (end of input)")
                        return
                    for event in parser.feed(decode(data)):
                        self.process_message(event)
                for event in parser.tick():
                    self.process_message(event)
        finally:
            selector.close()


def _close(*fds: int) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def parser_wait(parser: XTermParser) -> float | None:
    """How long the input thread may sleep: until the parser's pending escape sequence
    times out (a lone Esc becomes the Escape key), or for ever when nothing is pending.
    Where the parser is not as expected (another Textual), a tenth of a second, as Textual."""
    if not hasattr(parser, "_timeout_time"):
        return POLL_S
    due: float | None = parser._timeout_time
    if due is None:
        return None
    return min(POLL_S, max(0.0, due - get_time()))


def safe_driver(on_lost: Callable[[str], None]) -> type[SafeLinuxDriver]:
    """The driver class for one app: ``on_lost(why)`` when its terminal goes away."""
    return type("SafeLinuxDriver", (SafeLinuxDriver,), {"on_lost": staticmethod(on_lost)})
