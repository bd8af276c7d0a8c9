"""Signals that reach only the process gpudash means: checked by (pid, start ticks, boot)."""

from __future__ import annotations

import os
import signal

from .hoststats import read_boot_id
from .parsing import parse_stat
from .procfs import _read


def send_signal(
    pid: int, start_ticks: int | None, sig: int, proc: str = "/proc", boot_id: str | None = None
) -> str:
    """Signal ``pid`` only if it is still the process that started at ``start_ticks``
    (and, given ``boot_id``, in that boot: start ticks count from boot).

    The pidfd is opened *before* the start time is read: if the pid is recycled in
    between, the pidfd still names the old (dead) process and the signal goes nowhere.
    """
    if pid <= 0 or start_ticks is None:
        return "mismatch"
    if boot_id is not None and boot_id != read_boot_id(proc):
        return "mismatch"  # the host rebooted since the plan: the pid is somebody else
    pidfd = None
    opener = getattr(os, "pidfd_open", None)
    if opener is not None:
        try:
            pidfd = opener(pid)
        except ProcessLookupError:
            return "gone"
        except OSError:
            pidfd = None  # kernel without pidfd: check-then-kill, right here on the host
    try:
        parsed = parse_stat(_read(f"{proc}/{pid}/stat") or "")
        if parsed is None:
            return "gone"
        if parsed[3] != start_ticks:
            return "mismatch"
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, sig)  # novermin: pidfd only on 3.9+
        else:
            os.kill(pid, sig)
        return "sent"
    except ProcessLookupError:
        return "gone"
    except PermissionError:
        return "denied"
    except OSError as exc:
        return "denied" if exc.errno == 1 else "unknown"
    finally:
        if pidfd is not None:
            os.close(pidfd)
