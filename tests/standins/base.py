"""What every stand-in does as its server does: title itself, tie its life to its parent's,
log, hold GPU memory through the stand-in driver (tests/fakegpu), and be started as the
program the server's own launcher runs.

No GPU, no server installed: each stand-in (tests/standins/<server>.py) builds the
process tree its server builds, with the same titles, process groups and
``PR_SET_PDEATHSIG``; only the memory comes from ``fakegpu_hold``. Runs on the host's
python3 with nothing but the standard library.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36
_libc = ctypes.CDLL(None, use_errno=True)


def set_title(title: str) -> None:
    """``setproctitle.setproctitle(title)`` as the servers call it (setproctitle is not
    installed here): comm through ``prctl(PR_SET_NAME)`` (cut at 15 bytes by the kernel),
    and ``/proc/PID/cmdline`` by writing the title over this process's argv area, as
    setproctitle's ``spt_setup`` does. The area is as long as the argv the process was
    started with: ``spawn`` pads it."""
    raw = title.encode()
    _libc.prctl(PR_SET_NAME, ctypes.c_char_p(raw[:15]), 0, 0, 0)
    stat = Path("/proc/self/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end: fields 48, 49
    with open("/proc/self/mem", "r+b", buffering=0) as mem:
        mem.seek(start)
        mem.write(raw[: end - start - 1].ljust(end - start, b"\0"))


def die_with_parent() -> None:
    """SGLang's ``kill_itself_when_parent_died`` (python/sglang/srt/utils/common.py):
    ``prctl(PR_SET_PDEATHSIG, SIGKILL)``."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def become_subreaper() -> None:
    """``prctl(PR_SET_CHILD_SUBREAPER, 1)``: what ``systemd --user`` and tini do."""
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def hold(gpu: int, mib: int) -> None:
    """Take ``mib`` of GPU ``gpu`` through the stand-in driver until this process dies."""
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    lib.fakegpu_hold.argtypes = [ctypes.c_uint, ctypes.c_ulonglong]
    if lib.fakegpu_hold(gpu, mib) != 0:
        say(f"fakegpu_hold({gpu}, {mib}) failed: errno {ctypes.get_errno()}")
        os._exit(3)


def say(line: str) -> None:
    """One log line on stderr, as the server writes it."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


PAD = "x" * 120  # argv room for the titles set_title writes


def fork(target, *args: object) -> int:  # type: ignore[no-untyped-def]
    """``multiprocessing.Process(target=...).start()`` with the fork context: the child
    runs ``target(*args)`` and exits; the parent gets its pid."""
    pid = os.fork()
    if pid == 0:
        try:
            target(*args)
        finally:
            os._exit(0)
    return pid


def forever() -> None:
    """Serve until killed, reaping children (a parent of exited children keeps no zombies)."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            time.sleep(3600)


def main_of(roles: dict) -> None:  # type: ignore[type-arg]
    """Run the role named by argv[1] (the program's own words follow)."""
    role = sys.argv[1] if len(sys.argv) > 1 else ""
    if role not in roles:
        say(f"unknown role {role!r}; one of {sorted(roles)}")
        sys.exit(2)
    roles[role](sys.argv[2:])
