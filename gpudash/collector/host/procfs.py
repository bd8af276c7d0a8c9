"""Small readers of ``/proc`` the others share: one file's text, whether pids are hidden
or this is a child PID namespace, and how many ``stat`` fds may stay open."""

from __future__ import annotations

import os

FD_CACHE_MAX = 4096  # most /proc/PID/stat fds kept open (also <= half of RLIMIT_NOFILE)
STAT_BYTES = 4096  # /proc/PID/stat is one line of at most ~1 KB


def proc_hides_pids(proc: str = "/proc") -> bool:
    """Whether ``proc`` is mounted with hidepid (other users' processes are invisible)."""
    for line in (_read(proc + "/self/mountinfo") or "").splitlines():
        left, _, right = line.partition(" - ")
        fields, super_fields = left.split(), right.split()
        if len(fields) > 4 and fields[4] == "/proc" and super_fields[:1] == ["proc"]:
            options = super_fields[2].split(",") if len(super_fields) > 2 else []
            return any(o.startswith("hidepid=") and o not in ("hidepid=0", "hidepid=off")
                       for o in options)
    return False


def in_child_pid_namespace(proc: str = "/proc") -> bool:
    """Whether this process's PID namespace is not the host's (``NSpid`` lists more than
    one pid: the driver's pids are the outermost ones)."""
    for line in (_read(proc + "/self/status") or "").splitlines():
        if line.startswith("NSpid:"):
            return len(line.split()) > 2
    return False


def _read(path: str, size: int = 65536) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, size).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def read_whole(path: str, limit: int) -> str | None:
    """All of a ``/proc`` table (up to ``limit`` bytes): ``/proc/net/tcp`` gives about a
    page per read, so one read of a busy host's table misses most of its sockets."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    chunks, size = [], 0
    try:
        while size < limit:
            chunk = os.read(fd, min(65536, limit - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        if not chunks:
            return None
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace")


def fd_budget(limit: int = FD_CACHE_MAX) -> int:
    """How many ``stat`` fds to keep open: at most ``limit``, half of RLIMIT_NOFILE."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return 0
    if soft < 0 or soft == resource.RLIM_INFINITY:
        return limit
    # Many hosts start sessions with a soft limit of 1024: raise it (within the hard
    # limit, which needs no privilege) so every holder can be pinned, not just ~450.
    want = 4 * limit + 256  # stat fd + pidfd per process, parents, headroom
    if soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(hard, want)
        if new > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
                soft = new
            except (OSError, ValueError):
                pass  # keep the smaller budget: those beyond it are re-read every sample
    return max(0, min(limit, soft // 2 - 64))
