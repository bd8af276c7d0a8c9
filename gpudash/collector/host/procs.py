"""Processes from ``/proc``: GPU holders and their units' processes, read as little as
their identity allows (see ``ProcReader``)."""

from __future__ import annotations

import os
import pwd
import select
import time
from typing import TYPE_CHECKING, Any

from .claims import claim_of
from .parsing import cgroup_facts, cgroup_path, parse_stat, unit_of_cgroup
from .procfs import STAT_BYTES, _read, fd_budget, in_child_pid_namespace, proc_hides_pids
from .protocol import CGROUP_MAX, CMDLINE_BUDGET, CMDLINE_MAX, CMDLINE_SHORT, TEXT_MAX
from .text import cap_text, text_cost

if TYPE_CHECKING:
    from .protocol import Json


CMDLINE_TTL_S = 30.0  # a known process's cmdline and cgroup are at most this old (seconds)
STAT_EVERY = 4  # an unchanged, watched process's stat is re-read at least every N samples
SIGNAL_WATCH = 2 * STAT_EVERY  # samples a signalled process's stat is re-read every sample
HOT_STATES = (b"D", b"Z", b"T", b"t", b"X")  # states whose process is re-read every sample


class _Known:
    """A process seen before: one (pid, start_ticks), its pinned ``stat`` fd and pidfd if any."""

    __slots__ = (
        "pid", "start", "fd", "pidfd", "parent", "static", "sig", "out", "seen", "stale",
        "dirty", "hot", "quiet", "due", "ticks", "ticks_at", "cpu", "cost", "squeezed",
        "data",
    )

    def __init__(self, pid: int, start: int, fd: int | None) -> None:
        self.pid = pid
        self.start = start
        self.fd = fd
        self.pidfd: int | None = None  # readable once this process has exited
        self.parent: int | None = None  # the ppid whose pidfd is watched for it, if any
        self.static: Json = {}
        self.sig: tuple[bytes, bytes, bytes, int | None, int | None, bytes] | None = None
        self.out: Json = {}
        self.seen = True
        self.stale = True
        self.dirty = False  # its pidfd or its parent's fired: re-read this sample
        self.hot = False  # D, Z, T: re-read every sample
        self.quiet = False  # its stat may be skipped until its rotation turn (see ProcReader)
        self.due = 0.0  # monotonic time its cmdline and cgroup are next re-read
        self.ticks = -1  # utime + stime when last read (-1: never), and when that was
        self.ticks_at = 0.0
        self.cpu: int | None = None  # % of one CPU between the last two reads
        self.cost = 0  # JSON bytes of its cmdline if longer than CMDLINE_SHORT, else 0
        self.squeezed = False  # its cmdline was cut to CMDLINE_SHORT: the budget was spent
        self.data = b""  # its stat as last parsed


class _Parent:
    """A pidfd on the parent of known processes: readable once it exits (they are re-parented)."""

    __slots__ = ("pid", "fd", "children")

    def __init__(self, pid: int, fd: int) -> None:
        self.pid = pid
        self.fd = fd
        self.children: set[int] = set()


class ProcReader:
    """Processes from ``/proc``; what cannot change for one (pid, start) is read once.

    On a real procfs each known process keeps its ``/proc/PID/stat`` open and it is
    re-read with ``pread`` at offset 0 (procfs regenerates it on every read). The fd names
    the process it was opened on, not the pid: once that process is gone the read fails
    (or is empty), even if the pid now belongs to another process, so a pinned fd also
    proves identity. Beyond ``fd_limit`` processes fall back to open/read/close plus a
    start-time check. cmdline and cgroup are re-read every 15-30 s (``CMDLINE_TTL_S``, a
    fixed fraction per pid so that processes started together spread out), when comm
    changes, and after ``stale_all``.

    Where the kernel has pidfds (``os.pidfd_open``: Python >= 3.9, Linux >= 5.3) a pinned
    process also keeps a pidfd, and so does each distinct parent of one; ``begin_sample``
    polls them all once (epoll, timeout 0). Between ``begin_sample`` and ``forget_unseen``
    (one sample) ``read`` re-reads a process's stat only if it is new, its pidfd fired
    (it exited: gone or a zombie), its parent's fired (it was re-parented), it showed D,
    Z, T, t or X, it was signalled (``watch``) in the last ``SIGNAL_WATCH`` samples, its
    cmdline is due, ``stale_all`` was called, its parent could not be watched, or its turn
    in the rotation came (every ``stat_every`` samples, phase spread by pid). Otherwise it
    returns the cached dict untouched: ``state`` and ``name`` of a running or sleeping
    process may be up to ``stat_every - 1`` samples old; exits and ``ppid`` never are.
    Without pidfds, beyond the fd budget, or outside a sample, every read re-reads.
    """

    def __init__(
        self,
        proc: str = "/proc",
        cgroup_root: str = "/sys/fs/cgroup",
        fd_limit: int | None = None,
        stat_every: int = STAT_EVERY,
    ) -> None:
        self.proc = proc
        self.cgroup_root = cgroup_root
        self.known: dict[int, _Known] = {}
        self.users: dict[int, str] = {}
        self.clk_tck = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.page_size = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self.long_cmdlines = 0  # JSON bytes of known cmdlines longer than CMDLINE_SHORT
        self.squeezed = 0  # known processes whose cmdline was cut to CMDLINE_SHORT
        self.boot_time = 0.0
        for line in (_read(proc + "/stat") or "").splitlines():
            if line.startswith("btime "):
                self.boot_time = float(line.split()[1])
        v1 = os.path.isdir(cgroup_root + "/systemd") and not os.path.exists(
            cgroup_root + "/cgroup.controllers"
        )
        self.cgroup_fs = cgroup_root + "/systemd" if v1 else cgroup_root
        # /proc mounted with hidepid hides other users' processes; in a child PID
        # namespace the driver's (host) pids are not ours (``unreadable``)
        self.hidepid = proc_hides_pids(proc)
        self.nested = in_child_pid_namespace(proc)
        if fd_limit is None:  # pinning relies on procfs semantics: not for a stand-in dir
            real = os.path.realpath(proc) == "/proc" and os.path.exists("/proc/self/stat")
            fd_limit = fd_budget() if real else 0
        self.fd_limit = fd_limit
        self.pinned = 0
        self.stat_every = max(1, stat_every)
        self.sample_no = 0
        self.now = 0.0  # monotonic time of the current sample
        self.polled = False  # inside a sample whose pidfds were polled: reads may skip
        self.pidfds = 0  # open pidfds (known processes and parents), at most fd_limit
        self.parents: dict[int, _Parent] = {}
        self.owners: dict[int, _Known | _Parent] = {}  # pidfd -> what it watches
        self.signalled: dict[int, int] = {}  # pid -> last sample it is re-read every sample
        self.poller: Any = None
        if fd_limit > 0 and hasattr(os, "pidfd_open") and hasattr(select, "epoll"):
            try:
                probe = os.pidfd_open(os.getpid())  # novermin: hasattr above
            except OSError:  # kernel < 5.3 (ENOSYS) or seccomp: re-read every sample
                pass
            else:
                os.close(probe)
                self.poller = select.epoll()

    def unreadable(self, pid: int) -> str:
        """Why ``pid`` (listed by the driver) cannot be read: one of UNREADABLE_REASONS."""
        if self.nested:
            return "namespace"
        if os.path.exists(f"{self.proc}/{pid}"):
            return "denied"
        return "hidden" if self.hidepid else "gone"

    def start_ticks(self, pid: int) -> int | None:
        parsed = parse_stat(_read(f"{self.proc}/{pid}/stat") or "")
        return None if parsed is None else parsed[3]

    def _user(self, pid: int) -> str | None:
        try:
            uid = os.stat(f"{self.proc}/{pid}").st_uid
        except OSError:
            return None
        if uid not in self.users:
            try:
                self.users[uid] = cap_text(pwd.getpwuid(uid).pw_name, TEXT_MAX)
            except KeyError:
                self.users[uid] = str(uid)
        return self.users[uid]

    def begin_sample(self) -> None:
        """Start a sample: poll every pidfd once and mark what must be re-read."""
        self.sample_no += 1
        self.now = time.monotonic()
        if self.signalled:
            for pid in [p for p, last in self.signalled.items() if last < self.sample_no]:
                del self.signalled[pid]
        if self.poller is None:
            return
        self.polled = True
        for fd, _events in self.poller.poll(0, len(self.owners) + 1):
            owner = self.owners.get(fd)
            if isinstance(owner, _Known):  # exited: gone, or a zombie
                owner.dirty, owner.quiet = True, False
            elif owner is not None:  # a parent exited: its children were re-parented
                for pid in owner.children:
                    child = self.known.get(pid)
                    if child is not None:
                        child.dirty, child.quiet, child.parent = True, False, None
                owner.children.clear()
                self._close_parent(owner)

    def watch(self, pid: int) -> None:
        """Re-read ``pid`` every sample for the next ``SIGNAL_WATCH`` samples (signalled)."""
        self.signalled[pid] = self.sample_no + SIGNAL_WATCH
        known = self.known.get(pid)
        if known is not None:
            known.quiet = False

    def read(self, pid: int) -> Json | None:
        """One process as a wire dict, or None if it is gone.

        The dict is shared with later calls while nothing in it changes: never mutate it.
        """
        known = self.known.get(pid)
        if known is not None and known.fd is not None:
            if (
                self.polled
                and known.quiet
                and (self.sample_no + pid) % self.stat_every
                and known.due > self.now
            ):
                known.seen = True  # its pidfd and its parent's are quiet: nothing to re-read
                return known.out
            try:
                data = os.pread(known.fd, STAT_BYTES, 0)
            except OSError:  # ESRCH: the process this fd was opened on is gone
                data = b""
            if data:
                return self._update(known, data)
            self._drop(known)  # the pid may already name another process: look afresh
            known = None
        keep = known is None and self.pinned < self.fd_limit
        pidfd = None
        if keep and self.poller is not None and self.pidfds < self.fd_limit:
            try:  # before the stat fd: if the pid is recycled in between, the pidfd fires
                pidfd = os.pidfd_open(pid)  # novermin: only with self.poller (3.9+)
            except OSError:
                pidfd = None
        try:
            fd = os.open(f"{self.proc}/{pid}/stat", os.O_RDONLY)
        except OSError:
            if known is not None:
                self._drop(known)
            if pidfd is not None:
                os.close(pidfd)
            return None
        try:
            data = os.read(fd, STAT_BYTES)
            parsed = parse_stat(data.decode("utf-8", "replace"))
            if parsed is None or (known is not None and known.start != parsed[3]):
                if known is not None:  # gone, or the pid was recycled
                    self._drop(known)
                if parsed is None:
                    return None
                known = None
            if known is None:
                known = _Known(pid, parsed[3], fd if keep else None)
                self.pinned += keep
                self.known[pid] = known
                known.static["user"] = self._user(pid)
                if keep and pidfd is not None:
                    known.pidfd, pidfd = pidfd, None
                    self.pidfds += 1
                    self.owners[known.pidfd] = known
                    self.poller.register(known.pidfd, select.EPOLLIN)
            return self._update(known, data)
        except OSError:
            return None
        finally:
            if not keep:
                os.close(fd)
            if pidfd is not None:
                os.close(pidfd)

    def _update(self, known: _Known, data: bytes) -> Json | None:
        """``known``'s wire dict after reading ``data`` from its stat (same dict if unchanged)."""
        if data == known.data and known.cpu == 0 and not known.stale and known.due > self.now:
            # an idle process's stat is the same bytes: no CPU spent, nothing to parse
            known.ticks_at = time.monotonic()
            known.seen = True
            known.dirty = False
        else:
            out = self._parse(known, data)
            if out is None:
                return None
        if known.pidfd is not None and known.parent != known.out["ppid"]:
            self._watch_parent(known)
        known.quiet = (
            known.parent is not None and not known.hot and known.pid not in self.signalled
        )
        return known.out

    def _parse(self, known: _Known, data: bytes) -> Json | None:
        open_at = data.find(b"(")
        close_at = data.rfind(b")")
        # fields after comm: state ppid ... utime stime (14, 15) ... rss (24): rest[0, 1,
        # 11, 12, 21]. The numbers shown are compared, not the ticks: an idle process's
        # dict stays the same object (nothing to send), a busy one's changes.
        rest = data[close_at + 2 :].split(b" ", 22)
        if open_at < 0 or close_at < open_at or len(rest) < 3:
            return None
        cpu = rss = None
        if len(rest) > 21:
            try:
                ticks = int(rest[11]) + int(rest[12])
                rss = int(rest[21]) * self.page_size >> 20
            except ValueError:
                ticks = -1
            if ticks >= 0:
                cpu = self._cpu(known, ticks)
        sig = (data[open_at + 1 : close_at], rest[0], rest[1], cpu, rss, rest[2])
        known.seen = True
        known.dirty = False
        if (
            known.stale
            or known.due <= self.now
            or (known.sig is not None and sig[0] != known.sig[0])
        ):
            self._refresh(known)
        if sig != known.sig:
            try:
                ppid = int(sig[2])
            except ValueError:
                return None
            out = dict(known.static)
            out["name"] = cap_text(sig[0].decode("utf-8", "replace"), TEXT_MAX)
            out["state"] = cap_text(sig[1].decode("ascii", "replace"), TEXT_MAX)
            out["ppid"] = ppid
            try:
                out["pgid"] = int(sig[5])
            except ValueError:
                pass
            if cpu is not None:
                out["cpu_pct"] = cpu
            if rss is not None:
                out["rss_mib"] = rss
            known.out, known.sig = out, sig
            known.hot = sig[1] in HOT_STATES
        known.data = data
        return known.out

    def _watch_parent(self, known: _Known) -> None:
        """Watch ``known``'s current parent's pidfd (re-parenting shows as its exit)."""
        self._unwatch_parent(known)
        ppid = known.out["ppid"]
        if ppid <= 0:  # the namespace's init (or the kernel): never re-parented
            known.parent = ppid
            return
        parent = self.parents.get(ppid)
        if parent is None:
            if self.pidfds >= self.fd_limit:
                return  # over budget: unwatched, so re-read every sample
            try:
                fd = os.pidfd_open(ppid)  # novermin: only with self.poller (3.9+)
            except OSError:  # gone already: re-parenting is under way, re-read next sample
                return
            assert known.fd is not None
            try:  # the parent may have died and its pid been reused before pidfd_open
                data = os.pread(known.fd, STAT_BYTES, 0)
            except OSError:
                data = b""
            if data[data.rfind(b")") + 2 :].split(b" ", 2)[1:2] != [b"%d" % ppid]:
                os.close(fd)
                return
            parent = self.parents[ppid] = _Parent(ppid, fd)
            self.pidfds += 1
            self.owners[fd] = parent
            self.poller.register(fd, select.EPOLLIN)
        parent.children.add(known.pid)
        known.parent = ppid

    def _unwatch_parent(self, known: _Known) -> None:
        parent = self.parents.get(known.parent) if known.parent is not None else None
        known.parent = None
        if parent is not None:
            parent.children.discard(known.pid)
            if not parent.children:
                self._close_parent(parent)

    def _close_parent(self, parent: _Parent) -> None:
        if self.parents.get(parent.pid) is parent:
            del self.parents[parent.pid]
        self._close_pidfd(parent.fd)

    def _close_pidfd(self, fd: int) -> None:
        del self.owners[fd]
        self.pidfds -= 1
        try:
            self.poller.unregister(fd)
        except OSError:
            pass
        os.close(fd)

    def _refresh(self, known: _Known) -> None:
        """Re-read what rarely changes for one process: cmdline (set-proctitle) and cgroup."""
        pid = known.pid
        raw = _read(f"{self.proc}/{pid}/cmdline") or ""
        text = _read(f"{self.proc}/{pid}/cgroup") or ""
        cgroup = cgroup_path(text)
        static: Json = {
            "pid": pid, "start_ticks": known.start,
            "started_at": round(self.boot_time + known.start / self.clk_tck, 2),
            "cmdline": self._cmdline(known, raw.replace("\0", " ").strip()),
            "user": known.static.get("user"),
            "cgroup": None if cgroup is None else cap_text(cgroup, CGROUP_MAX),
            "unit": unit_of_cgroup(cgroup),
        }
        static.update(cgroup_facts(cgroup))
        static["claim"] = claim_of(text) or static.get("claim")  # a Slurm job's first
        static = {k: v for k, v in static.items() if v is not None}
        if static != known.static:
            known.static, known.sig = static, None
        known.stale = False
        spread = ((pid * 2654435761) % 1024) / 2048.0  # fixed per pid, in [0, 0.5)
        known.due = self.now + CMDLINE_TTL_S * (1.0 - spread)

    def _cmdline(self, known: _Known, text: str) -> str:
        """``text`` within ``CMDLINE_MAX``, and within ``CMDLINE_SHORT`` once the cmdlines
        of the known processes spend ``CMDLINE_BUDGET``: one user's thousand processes
        with 4 KiB cmdlines cannot make a snapshot too large to travel."""
        self.long_cmdlines -= known.cost
        self.squeezed -= known.squeezed
        known.cost, known.squeezed = 0, False
        if len(text) * 6 <= CMDLINE_SHORT:
            return text
        text = cap_text(text, CMDLINE_MAX)
        cost = text_cost(text)
        if cost <= CMDLINE_SHORT:
            return text
        if self.long_cmdlines + cost > CMDLINE_BUDGET:
            known.squeezed = True
            self.squeezed += 1
            return cap_text(text, CMDLINE_SHORT)
        known.cost = cost
        self.long_cmdlines += cost
        return text

    def _uptime(self) -> float:
        """Seconds since boot, as start ticks count them (``btime`` is whole seconds)."""
        text = _read(self.proc + "/uptime", 64)
        try:
            return float((text or "").split()[0])
        except (IndexError, ValueError):
            return time.time() - self.boot_time

    def _cpu(self, known: _Known, ticks: int) -> int | None:
        """% of one CPU ``known`` used since it was last read (``ticks``: utime + stime);
        on first sight, its average over its life so far."""
        now = time.monotonic()
        if known.ticks < 0:
            alive = self._uptime() - known.start / self.clk_tck
            cpu = round(100.0 * ticks / self.clk_tck / alive) if alive >= 0.1 else None
        elif now - known.ticks_at < 0.05:  # read again within a sample: ticks are 10 ms
            return known.cpu
        else:
            spent = max(0, ticks - known.ticks) / self.clk_tck
            cpu = round(100.0 * spent / (now - known.ticks_at))
        known.ticks, known.ticks_at, known.cpu = ticks, now, cpu
        return cpu

    def _drop(self, known: _Known) -> None:
        if self.known.get(known.pid) is known:
            del self.known[known.pid]
        self.long_cmdlines -= known.cost
        self.squeezed -= known.squeezed
        known.cost, known.squeezed = 0, False
        self._unwatch_parent(known)
        if known.pidfd is not None:
            self._close_pidfd(known.pidfd)
            known.pidfd = None
        if known.fd is not None:
            os.close(known.fd)
            known.fd = None
            self.pinned -= 1

    def stale_all(self) -> None:
        """Re-read every known process's stat, cmdline and cgroup on its next read."""
        for known in self.known.values():
            known.stale, known.quiet = True, False

    def close(self) -> None:
        for known in list(self.known.values()):
            self._drop(known)
        if self.poller is not None:
            self.poller.close()
            self.poller = None
        self.polled = False

    def members(self, cgroup: str) -> set[int]:
        """Every pid in a cgroup and the cgroups below it."""
        pids: set[int] = set()
        top = self.cgroup_fs + cgroup
        for directory, _dirs, files in os.walk(top):
            if "cgroup.procs" in files:
                for line in (_read(directory + "/cgroup.procs") or "").split():
                    if line.isdigit():
                        pids.add(int(line))
        return pids

    def forget_unseen(self) -> None:
        """End a sample: forget (and unpin) every process not read since the last call."""
        self.polled = False
        gone = []
        for known in self.known.values():
            if known.seen:
                known.seen = False
            else:
                gone.append(known)
        for known in gone:
            self._drop(known)
