"""The real dashboard as a child process on a real pseudo-terminal, as an operator runs it.

``ctty=True`` makes the pty the child's controlling terminal (as tmux, sshd and xterm do):
closing it then hangs the terminal up, and the kernel sends SIGHUP besides the EIO and EOF
the app sees on it. ``ctty=False`` leaves only the EIO and EOF.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

# what a terminal is sent besides text: CSI sequences (styles, cursor moves, modes), OSC
# strings, and the two-byte ones
ESCAPES = re.compile(rb"\x1b\[[0-9;?<>=!]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"
                     rb"|\x1b[()][A-Z0-9]|\x1b[=>78]")


def audit(name: str = "audit-demo.jsonl") -> list[dict]:
    """The audit records the dashboard wrote (this test's own XDG_STATE_HOME)."""
    path = Path(os.environ["XDG_STATE_HOME"]) / "gpudash" / name
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def local_env(build: dict[str, str]) -> dict[str, str]:
    """What a local dashboard needs of a stand-in driver's environment (its state, its
    libnvidia-ml and nvidia-smi), to run on it."""
    return {k: build[k] for k in ("FAKEGPU_STATE", "LD_LIBRARY_PATH", "PATH")}


def _take_terminal() -> None:  # in the child, after setsid: the pty becomes its terminal
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def collectors(state: str | None = None) -> list[psutil.Process]:
    """gpudash collectors running on this machine (local ones, and those sshd started);
    ``state``: only those reading that stand-in driver's state (``FAKEGPU_STATE``), this
    test's: the suite's other tests (a second worker, a lab host) run collectors too."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmdline = p.info["cmdline"] or []
        if any("gpudash_hostside" in part for part in cmdline):
            if state is not None:
                try:
                    if p.environ().get("FAKEGPU_STATE") != state:
                        continue
                except psutil.Error:  # gone, or not ours to read
                    continue
            out.append(p)
    return out


class Dashboard:
    def __init__(
        self, args: Sequence[str] = ("--demo",), *, size: tuple[int, int] = (160, 50),
        ctty: bool = False, env: dict[str, str] | None = None,
    ) -> None:
        self.master, slave = pty.openpty()
        cols, rows = size
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        # the pty's size is the terminal's: not COLUMNS/LINES, which Rich prefers and
        # pytest-xdist's workers export (80x24)
        inherited = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        full_env = inherited | {"TERM": "xterm-256color"} | (env or {})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpudash", *args], stdin=slave, stdout=slave,
            stderr=slave, env=full_env, start_new_session=True,
            preexec_fn=_take_terminal if ctty else None,
        )
        os.close(slave)
        self.screen = b""
        self.closed = False

    def read(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end and not self.closed:
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if ready:
                try:
                    self.screen += os.read(self.master, 65536)
                except OSError:
                    return

    def wait_for(self, text: bytes, within: float = 40.0) -> None:
        """Until ``text`` was drawn: in the bytes as sent, or with the escapes between
        them left out (a row is sent as segments, each with its style: where the styles
        of "GPU0" and "1.0 GiB" differ, an escape sits between them)."""
        end = time.monotonic() + within
        while text not in self.screen and text not in ESCAPES.sub(b"", self.screen):
            assert time.monotonic() < end and self.proc.poll() is None, self.screen[-2000:]
            self.read(0.2)

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def confirm(self) -> None:
        """Answer the confirm dialog with y once it has been on screen long enough to
        count (a key typed earlier is refused: ConfirmModal.ARM_S)."""
        self.wait_for(b"Confirm")
        self.read(0.8)
        self.type("y")
        end = time.monotonic() + 10
        while time.monotonic() < end:  # under load: drawn later than it seemed
            self.read(0.3)
            if b"Not yet" not in self.screen[-4000:]:
                return
            self.type("y")

    def hang_up(self) -> float:
        """Close the terminal, as a dropped SSH session or ``tmux kill-session`` does."""
        os.close(self.master)
        self.closed = True
        return time.monotonic()

    def gone_within(self, seconds: float, since: float | None = None) -> bool:
        """The process ended within ``seconds`` of ``since`` (default: now); else it is
        killed (so a failing test leaves nothing behind) and False."""
        end = (since or time.monotonic()) + seconds
        while self.proc.poll() is None and time.monotonic() < end:
            if self.closed:
                time.sleep(0.05)
            else:
                self.read(0.05)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
            return False
        return True

    def finish(self, within: float = 30.0) -> int:
        if not self.gone_within(within):
            raise AssertionError("the dashboard did not exit")
        self.read(0.3)
        if not self.closed:
            os.close(self.master)
            self.closed = True
        return self.proc.returncode
