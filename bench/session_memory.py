"""Memory over a session of use, gpudash beside nvitop: what moving the cursor and
opening help cost in RSS, and whether it comes back.

Each program runs alone on the stand-in (8 GPUs, 8 holders) in a pseudo-terminal of
160x50 at a 1 s interval, as in ``peer_bench.py``; the two alternate, ``--rounds`` times.
After ``--warmup`` seconds its RSS is read; then, for ``--seconds`` each:

- *cursor*: Down five times, Up five times, a key every 0.2 s (what changes which
  actions are enabled: between a unit's row and a process's);
- *help*: ``?`` then Esc, a key every 0.5 s (a screen made and let go, 60 times a minute);

and the RSS after each. The figures: RSS at rest, and what each phase added.

    python bench/session_memory.py [--rounds 2] [--seconds 60] [--warmup 15]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from peer_bench import StandIn, Terminal, gpudash_argv, nvitop_argv, rss_mb  # noqa: E402

DOWN, UP, HELP, ESC = b"\x1b[B", b"\x1b[A", b"?", b"\x1b"


def rss_of(term: Terminal) -> float:
    if term.proc.poll() is not None:
        raise RuntimeError(f"{term.proc.args[0]} exited with {term.proc.returncode}")
    return rss_mb(psutil.Process(term.proc.pid), False)


def press_for(term: Terminal, seconds: float, keys: list[bytes], every: float) -> None:
    end, i = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        term.key(keys[i % len(keys)])
        i += 1
        time.sleep(every)


def session(label: str, argv: list[str], stand: StandIn, args: argparse.Namespace
            ) -> tuple[float, float, float]:
    """(RSS at rest, after the cursor phase, after the help phase), MB."""
    term = Terminal(argv, stand.env, 160, 50)
    try:
        time.sleep(args.warmup)
        rest = rss_of(term)
        press_for(term, args.seconds, [DOWN] * 5 + [UP] * 5, 0.2)
        time.sleep(2)
        cursor = rss_of(term)
        press_for(term, args.seconds, [HELP, ESC], 0.5)
        time.sleep(2)
        helped = rss_of(term)
    finally:
        term.stop()
    print(f"{label:10} {rest:8.1f} MB {cursor - rest:+8.1f} MB {helped - cursor:+8.1f} MB "
          f"{helped:8.1f} MB", flush=True)
    return rest, cursor, helped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="nvitop/gpudash alternations")
    parser.add_argument("--seconds", type=float, default=60.0, help="each phase's length")
    parser.add_argument("--warmup", type=float, default=15.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpudash-session-"))
    stand = StandIn(work, 8)
    print(f"stand-in: 8 GPUs, 8 holders; 160x50; 1 s interval; {args.warmup:g} s at rest, "
          f"then {args.seconds:g} s of cursor moves and {args.seconds:g} s of help")
    print(f"{'program':10} {'at rest':>11} {'+cursor':>11} {'+help':>11} {'at the end':>11}")
    try:
        for _ in range(args.rounds):
            session("nvitop", nvitop_argv(), stand, args)
            session("gpudash", [*gpudash_argv(), "--interval", "1"], stand, args)
    finally:
        stand.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
