"""gpudash and nvitop at the same time, each in its own tmux session of the same size.

    python bench/side_by_side.py [--seconds 45] [--runs 2] [--size 160x50]

The measurement of issue 18 (and ../shared/PERF.md): the stand-in driver (8 GPUs, 8
holders), both programs at a 1 s interval side by side over the same ``--seconds``; CPU is
each pane's process tree's user+system time, reaped children's included (utime+stime+
cutime+cstime, as peer_bench counts it), read before and after, in clock ticks. Each run
starts the two in the other order. Prints the ticks of each and the ratio gpudash /
nvitop, per run and over all runs.

Not a test: these machines are noisy; compare figures from one run.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_bench import StandIn, cpu_between, cpu_snapshot, nvitop_argv  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True,
                          text=True).stdout


def start(name: str, argv: list[str], env: dict[str, str], cols: int, rows: int) -> int:
    """A detached tmux session running ``argv``; the pane's pid."""
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()
                       if k.startswith(("LD_", "FAKEGPU", "XDG_", "HOME", "TERM", "COLORTERM",
                                        "PATH", "NVIDIA", "GPUDASH")))
    line = f"env {exports} {' '.join(shlex.quote(a) for a in argv)}"
    tmux("new-session", "-d", "-s", name, "-x", str(cols), "-y", str(rows), line)
    return int(tmux("display-message", "-p", "-t", name, "#{pane_pid}").strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=45.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--size", default="160x50")
    args = parser.parse_args()
    cols, rows = (int(v) for v in args.size.lower().split("x"))
    if shutil.which("tmux") is None:
        sys.exit("side_by_side: needs tmux")
    programs = {"nvitop": nvitop_argv(),
                "gpudash": [sys.executable, "-m", "gpudash", "--interval", "1"]}
    work = Path(tempfile.mkdtemp(prefix="gpudash-side-"))
    stand = StandIn(work, 8)
    print(f"stand-in: 8 GPUs, 8 holders; tmux {cols}x{rows}; 1 s interval; "
          f"{args.warmup:g} s warm-up, {args.seconds:g} s side by side")
    totals = {"nvitop": 0, "gpudash": 0}
    try:
        for run in range(args.runs):
            order = list(programs) if run % 2 == 0 else list(reversed(programs))
            names = {p: f"side-{p}-{os.getpid()}" for p in programs}
            pids = {p: start(names[p], programs[p], stand.env, cols, rows) for p in order}
            try:
                time.sleep(args.warmup)
                roots = {p: psutil.Process(pid) for p, pid in pids.items()}
                before = {p: cpu_snapshot(root, True) for p, root in roots.items()}
                time.sleep(args.seconds)
                after = {p: cpu_snapshot(root, True) for p, root in roots.items()}
            finally:
                for name in names.values():
                    subprocess.run(["tmux", "kill-session", "-t", name], check=False,
                                   capture_output=True)
            used = {p: round(TICK * cpu_between(before[p], after[p], True)) for p in programs}
            for p in programs:
                totals[p] += used[p]
            pct = {p: 100 * used[p] / TICK / args.seconds for p in programs}
            print(f"run {run + 1} (started {' then '.join(order)}): nvitop {used['nvitop']} "
                  f"ticks ({pct['nvitop']:.2f} %), gpudash {used['gpudash']} ticks "
                  f"({pct['gpudash']:.2f} %): ratio "
                  f"{used['gpudash'] / max(1, used['nvitop']):.2f}", flush=True)
            time.sleep(2)
    finally:
        stand.close()
        shutil.rmtree(work, ignore_errors=True)
    print(f"all runs: gpudash / nvitop CPU {totals['gpudash'] / max(1, totals['nvitop']):.2f} "
          "(issue 30: <= 0.5)")


if __name__ == "__main__":
    main()
