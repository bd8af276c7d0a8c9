"""gpudash against nvitop on the same stand-in host and screen, and gpudash with many hosts.

    python bench/peer_bench.py [--seconds 20] [--size 160x50]          # nvitop vs local
    python bench/peer_bench.py --hosts 16 --via ssh   [--seconds 20]   # real sshd, 16 hosts
    python bench/peer_bench.py --hosts 256 --via copies --keys 10       # 256 copies of one

Every program runs in its own pseudo-terminal of the same size at a 1 s interval on the
stand-in driver (tests/fakegpu: 8 GPUs, 8 holders), one after the other. After a warm-up
the CPU of the program (and, where said, its children) is measured over ``--seconds``,
with its resident memory at the end.

- default: nvitop (``nvitop -m full --interval 1``) and ``gpudash`` (local: its stream
  collector runs in a thread of its process; children still count, as its ``serve``
  collector would be one). Prints both and the ratio gpudash / nvitop.
- ``--via ssh``: ``gpudash h0 … hK-1`` against one real OpenSSH sshd on 127.0.0.1
  (tests/sshd); each alias is one SSH connection with its own collector. The dashboard's
  own CPU is what counts (sshd and the collectors are the hosts' side).
- ``--via copies``: one collector on this machine whose stream is fed, line by line, to K
  sources in the dashboard, each decoding, triaging and showing it as its own host (no
  SSH: the per-host cost of the dashboard without K collectors and sshds on this machine).
- ``--keys N``: after the measurement, N times: press ``?`` and time until the help screen
  is on the terminal, then Esc (the dashboard must answer a key in < 100 ms).

Not a test: these machines are noisy; compare figures from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import os
import pty
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

HELP_MARK = b"Command palette"  # a line only the help screen shows


class Terminal:
    """A program in a pseudo-terminal of a fixed size; its output is drained (and kept
    briefly) by a thread, as a terminal emulator would."""

    def __init__(self, argv: list[str], env: dict[str, str], cols: int, rows: int) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env,
                                     start_new_session=True, close_fds=True)
        os.close(slave)
        self.bytes = 0
        self._lock = threading.Lock()
        self._tail = bytearray()
        self._seen = threading.Condition(self._lock)
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            with self._lock:
                self.bytes += len(chunk)
                self._tail += chunk
                del self._tail[: -(1 << 20)]
                self._seen.notify_all()

    def clear(self) -> None:
        with self._lock:
            self._tail.clear()

    def wait_for(self, mark: bytes, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._lock:
            while mark not in self._tail:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._seen.wait(left)
            return True

    def key(self, data: bytes) -> None:
        os.write(self.master, data)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        os.close(self.master)


def _cpu(p: psutil.Process) -> tuple[float, float]:
    """(own CPU seconds, CPU of reaped children)."""
    t = p.cpu_times()
    return t.user + t.system, t.children_user + t.children_system


def cpu_snapshot(root: psutil.Process, children: bool) -> dict[int, tuple[float, float]]:
    procs = [root] + (root.children(recursive=True) if children else [])
    out = {}
    for p in procs:
        try:
            out[p.pid] = _cpu(p)
        except psutil.NoSuchProcess:
            pass
    return out


def cpu_between(before: dict[int, tuple[float, float]],
                after: dict[int, tuple[float, float]], children: bool) -> float:
    """CPU seconds the tree spent between two snapshots (a child that exited meanwhile
    is in its parent's reaped-children time, less what it had spent before)."""
    used = 0.0
    for pid, (own, reaped) in after.items():
        own0, reaped0 = before.get(pid, (0.0, reaped if not children else 0.0))
        used += own - own0 + ((reaped - reaped0) if children else 0.0)
    if children:
        used -= sum(own for pid, (own, _r) in before.items() if pid not in after)
    return used


def rss_mb(root: psutil.Process, children: bool) -> float:
    procs = [root] + (root.children(recursive=True) if children else [])
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / 1e6


def measure(term: Terminal, warmup: float, seconds: float, children: bool
            ) -> tuple[float, float, float, float]:
    """(CPU % of one core, of it the program's own, RSS MB of the program, RSS MB with
    its children)."""
    time.sleep(warmup)
    if term.proc.poll() is not None:
        raise RuntimeError(f"{term.proc.args[0]} exited with {term.proc.returncode}")
    root = psutil.Process(term.proc.pid)
    before, t0 = cpu_snapshot(root, children), time.monotonic()
    time.sleep(seconds)
    after, t1 = cpu_snapshot(root, children), time.monotonic()
    own = (after[root.pid][0] - before[root.pid][0]) / (t1 - t0)
    if term.proc.poll() is not None:
        raise RuntimeError(f"{term.proc.args[0]} exited with {term.proc.returncode}")
    share = cpu_between(before, after, children) / (t1 - t0)
    return 100 * share, 100 * own, rss_mb(root, False), rss_mb(root, True)


def key_latencies(term: Terminal, n: int, hosts: int) -> dict[str, list[float]]:
    """Seconds from a key to its effect on the terminal, n times each: ``?`` until the
    help screen shows (then Esc), and with several hosts (on host 1's screen, opened from
    the fleet table) ``2`` / ``1`` until the header names host 2 / host 1 (a switch
    redraws every panel)."""
    presses = [("help (?)", b"?", HELP_MARK, b"\x1b")]
    if hosts > 1:
        presses += [("switch host (2, 1)", b"2", f"[2/{hosts}]".encode(), b""),
                    ("switch host (2, 1)", b"1", f"[1/{hosts}]".encode(), b"")]
    out: dict[str, list[float]] = {}
    if hosts > 1:  # several hosts open on the fleet table: Enter opens the first host's screen
        term.clear()
        term.key(b"\r")
        if not term.wait_for(f"[1/{hosts}]".encode(), 10.0):
            raise RuntimeError("Enter on the fleet table did not open host 1")
        time.sleep(1.0)
    for _ in range(n):
        for what, key, mark, undo in presses:
            term.clear()
            t0 = time.monotonic()
            term.key(key)
            seen = term.wait_for(mark, 10.0)
            out.setdefault(what, []).append(time.monotonic() - t0 if seen else float("inf"))
            time.sleep(0.3)
            if undo:
                term.key(undo)
            time.sleep(0.9)
    return out


# --- the stand-in host --------------------------------------------------------------


class StandIn:
    """8 stand-in GPUs with 8 holders, as in issue 12's measurement."""

    def __init__(self, work: Path, holders: int) -> None:
        from fakegpu import harness

        self.harness = harness
        self.out = harness.build(os.environ.get("FAKEGPU_BUILD_DIR") or work / "build")
        self.state = work / "state"
        harness.init_state(self.state, gpus=8, out_dir=self.out)
        self.env = harness.env(self.out, self.state)
        home = work / "home"
        for sub in ("config", "state", "cache", "data"):
            (home / sub).mkdir(parents=True, exist_ok=True)
        self.env |= {"HOME": str(home), "XDG_CONFIG_HOME": str(home / "config"),
                     "XDG_STATE_HOME": str(home / "state"),
                     "XDG_CACHE_HOME": str(home / "cache"),
                     "XDG_DATA_HOME": str(home / "data"), "TERM": "xterm-256color",
                     "COLORTERM": "truecolor"}
        self.env.pop("TEXTUAL", None)
        self.holders = [harness.spawn_holder(i % 8, 4000 + 1000 * i, name=f"worker-{i}",
                                             env=self.env) for i in range(holders)]

    def close(self) -> None:
        for p in self.holders:
            self.harness.kill_holder(p)


def run_one(label: str, argv: list[str], env: dict[str, str], args: argparse.Namespace,
            children: bool, keys: int = 0, note: Callable[[], str] | None = None,
            hosts: int = 1) -> dict[str, Any]:
    term = Terminal(argv, env, args.cols, args.rows)
    try:
        cpu, own, rss, rss_tree = measure(term, args.warmup, args.seconds, children)
        lat = key_latencies(term, keys, hosts) if keys else {}
        if note is not None:
            print(f"  ({note()})")
    finally:
        term.stop()
    row = {"what": label, "cpu_pct": round(cpu, 2), "own_cpu_pct": round(own, 2),
           "rss_mb": round(rss, 1),
           "rss_tree_mb": round(rss_tree, 1), "out_kb_s": round(term.bytes / 1e3 / (
               args.warmup + args.seconds), 1)}
    print(f"{label:44} {cpu:6.2f} % {own:6.2f} % {rss:7.1f} MB {rss_tree:7.1f} MB",
          flush=True)
    for what, times in lat.items():
        median, worst = 1000 * statistics.median(times), 1000 * max(times)
        row[f"key {what}"] = {"median_ms": round(median, 1), "max_ms": round(worst, 1)}
        print(f"  key {what}: {median:.0f} ms median, {worst:.0f} ms max "
              f"({len(times)} presses; target < 100 ms)")
    return row


def gpudash_argv() -> list[str]:
    return [sys.executable, "-m", "gpudash"]


def nvitop_argv() -> list[str]:
    """nvitop as every bench runs it: the venv's, full mode, a 1 s interval."""
    nvitop = shutil.which("nvitop", path=str(Path(sys.executable).parent)) or "nvitop"
    return [nvitop, "-m", "full", "--interval", "1"]


def peer(args: argparse.Namespace, stand: StandIn) -> list[dict[str, Any]]:
    rows = []
    for _ in range(args.rounds):
        rows.append(run_one("nvitop -m full --interval 1", nvitop_argv(), stand.env, args,
                            True))
        rows.append(run_one("gpudash (local, collector included)",
                            [*gpudash_argv(), "--interval", "1"], stand.env, args, True,
                            args.keys))
    nv = statistics.mean(r["cpu_pct"] for r in rows[0::2])
    gd = statistics.mean(r["cpu_pct"] for r in rows[1::2])
    print(f"ratio gpudash / nvitop CPU: {gd / nv:.2f} (issue 30: <= 0.5)"
          if nv else "nvitop used no measurable CPU")
    return rows


def fleet_ssh(args: argparse.Namespace, stand: StandIn, work: Path) -> list[dict[str, Any]]:
    from sshd.fixture import start_sshd, stop_sshd

    server = start_sshd(work / "sshd", {k: stand.env[k] for k in
                                         ("FAKEGPU_STATE", "LD_LIBRARY_PATH", "PATH",
                                          "GPUDASH_NVIDIA_DEV_DIR")})
    try:
        names = [f"h{i:03d}" for i in range(args.hosts)]
        config = server.write_config(work / "ssh_config", dict.fromkeys(names, ""))
        argv = [*gpudash_argv(), *names, "--interval", "1", "--ssh-config", str(config),
                "--known-hosts", str(server.known_hosts)]
        def sessions() -> str:
            try:
                return f"{len(server.connection_processes())} sshd sessions open"
            except psutil.NoSuchProcess:
                return "sshd sessions changing"

        return [run_one(f"gpudash, {args.hosts} hosts over SSH (dashboard only)", argv,
                        stand.env, args, False, args.keys, sessions, args.hosts)]
    finally:
        try:
            stop_sshd(server)
        except psutil.NoSuchProcess:  # a session ended while it was being listed
            server.proc.kill()
            server.proc.wait()


def fleet_copies(args: argparse.Namespace, stand: StandIn) -> list[dict[str, Any]]:
    argv = [sys.executable, str(Path(__file__).resolve()), "--serve-copies", str(args.hosts),
            *(["--lockstep"] if args.lockstep else [])]
    return [run_one(f"gpudash, {args.hosts} copies of one host (dashboard only)", argv,
                    stand.env, args, False, args.keys, hosts=args.hosts)]


# --- the copies mode's dashboard (runs in the pseudo-terminal) -----------------------


class Feed:
    """One real collector on this machine; every line goes to every subscriber. A late
    subscriber starts from a full snapshot of the state so far."""

    def __init__(self) -> None:
        self.queues: list[asyncio.Queue[bytes]] = []
        self.state: dict[str, Any] | None = None
        self._task: asyncio.Task[None] | None = None

    def subscribe(self) -> asyncio.Queue[bytes]:
        q: asyncio.Queue[bytes] = asyncio.Queue()
        if self.state is not None:
            q.put_nowait(json.dumps({"k": "full", "s": self.state}).encode() + b"\n")
        self.queues.append(q)
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())
        return q

    async def _run(self) -> None:
        from gpudash.collector.host.protocol import K_FULL, K_PATCH
        from gpudash.protocol.payload import collector_argv, payload
        from gpudash.protocol.wire import apply_merge_patch

        argv = collector_argv(sys.executable, "stream", interval=1.0, sudo=False)
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            limit=1 << 24)
        assert proc.stdin and proc.stdout
        proc.stdin.write(payload(with_pynvml=False))
        while line := await proc.stdout.readline():
            message = json.loads(line)
            if message.get("k") == K_FULL:
                self.state = message["s"]
            elif message.get("k") == K_PATCH and self.state is not None:
                self.state = apply_merge_patch(self.state, message["s"])
            for q in self.queues:
                q.put_nowait(line)


class NoActions:
    """A host control with no capabilities (``HostControl``'s default)."""

    capabilities: frozenset[Any] = frozenset()


NO_ACTIONS = NoActions()


class CopySource:
    """A host made of the feed's lines, decoded as a remote host's would be; each line
    ``offset`` seconds late (real hosts' samples are not in step with each other)."""

    def __init__(self, name: str, feed: Feed, offset: float = 0.0) -> None:
        self.name = name
        self.feed = feed
        self.offset = offset

    round_trip_s = None  # (HostSource) nothing measured

    @property
    def route(self) -> str:
        return f"the bench's copy {self.name}"

    def stream(self, interval: float) -> AsyncIterator[Any]:
        return self._stream()

    async def _stream(self) -> AsyncIterator[Any]:
        from gpudash.protocol.wire import SnapshotDecoder

        decoder = SnapshotDecoder(self.name)
        q = self.feed.subscribe()
        while True:
            line = await q.get()
            if self.offset:
                await asyncio.sleep(self.offset)
            yield decoder.feed(line)

    @property
    def control(self) -> Any:
        """No capabilities: the dashboard asks (the crash reasons, the journal) and gets
        nothing; it runs read-only, so nothing is ever sent."""
        return NO_ACTIONS

    async def close(self) -> None:
        return None


def serve_copies(k: int, lockstep: bool) -> None:
    from gpudash.ui.app import run_dashboard

    feed = Feed()
    sources: list[Any] = [CopySource(f"copy-{i:03d}", feed, 0.0 if lockstep else 0.9 * i / k)
                          for i in range(k)]
    run_dashboard(sources, interval=1.0, read_only=True, theme=None, exec_options=None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="measured (default 20)")
    parser.add_argument("--warmup", type=float, default=6.0, help="before measuring (6)")
    parser.add_argument("--size", default="160x50", help="terminal COLSxROWS (160x50)")
    parser.add_argument("--holders", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1, help="nvitop/gpudash alternations")
    parser.add_argument("--hosts", type=int, default=0,
                        help="measure gpudash with this many hosts instead of the peer run")
    parser.add_argument("--via", choices=("ssh", "copies"), default="copies")
    parser.add_argument("--keys", type=int, default=0, help="time this many key presses")
    parser.add_argument("--json", type=Path, default=None, help="also write rows here")
    parser.add_argument("--lockstep", action="store_true",
                        help="copies: every host's sample at the same instant (worst case "
                        "for keys; default: spread over the interval, as real hosts are)")
    parser.add_argument("--serve-copies", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_copies:
        serve_copies(args.serve_copies, args.lockstep)
        return
    args.cols, args.rows = (int(v) for v in args.size.lower().split("x"))
    # terminated: clean up as after Ctrl+C (holders, sshd, the program measured)
    signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="gpudash-peer-"))
    stand = StandIn(work, args.holders)
    print(f"stand-in: 8 GPUs, {args.holders} holders; terminal {args.cols}x{args.rows}; "
          f"1 s interval; {args.warmup:g} s warm-up, {args.seconds:g} s measured")
    print(f"{'what':44} {'CPU':>8} {'(own)':>8} {'RSS':>10} {'+children':>10}  "
          "(CPU: % of one core)")
    try:
        if not args.hosts:
            rows = peer(args, stand)
        elif args.via == "ssh":
            rows = fleet_ssh(args, stand, work)
        else:
            rows = fleet_copies(args, stand)
    finally:
        stand.close()
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
