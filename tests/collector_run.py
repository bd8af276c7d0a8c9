"""Running the real collector as gpudash runs it: the bootstrap argv plus the payload."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from gpudash.protocol.payload import collector_argv, payload


def start(
    mode: str = "stream",
    *,
    interval: float | None = 0.1,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    python: str = sys.executable,
    prefix: Sequence[str] = (),
    with_pynvml: bool = False,
) -> subprocess.Popen[bytes]:
    """The collector in ``mode``, its payload written; stdin stays open for requests."""
    argv = [*prefix, *collector_argv(python, mode, interval=interval, sudo=False)]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=None if env is None else dict(env),
        cwd=cwd,
    )
    assert proc.stdin is not None
    proc.stdin.write(payload(with_pynvml=with_pynvml))
    proc.stdin.flush()
    return proc


def read_line(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> bytes:
    """The collector's next line (raw bytes), or AssertionError with its stderr.

    Read from the pipe itself, the rest kept for the next call: select() on a buffered
    reader says nothing of a second line already read into its buffer with the first (two
    probe replies written together were waited for 15 s, and the test failed)."""
    assert proc.stdout is not None
    pending: bytearray = proc.__dict__.setdefault("_unread", bytearray())
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout
    while b"\n" not in pending:
        left = deadline - time.monotonic()
        ready = select.select([fd], [], [], left)[0] if left > 0 else []
        chunk = os.read(fd, 1 << 20) if ready else b""
        if not chunk:
            break
        pending += chunk
    end = pending.find(b"\n")
    if end < 0:
        line = bytes(pending)
        proc.kill()
        err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
        raise AssertionError(f"collector sent no line: {line[:200]!r}; stderr: {err[-2000:]}")
    line = bytes(pending[:end + 1])
    del pending[:end + 1]
    return line


def request(proc: subprocess.Popen[bytes], op: str, **fields: Any) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps({"op": op, **fields}).encode() + b"\n")
    proc.stdin.flush()


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.stdin is not None and not proc.stdin.closed:
        try:
            proc.stdin.close()
        except BrokenPipeError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
