"""The model swap's figures, on a real systemd host of the lab (tests/lab), over real SSH.

    sudo flock /tmp/gpudash-lab.lock python bench/swap_bench.py [--runs 5] [--poll 0.5]
                                                               [--samples 100] [--chatter 0.1]

1. Ready -> serving: the engine starts the lab's model-server stand-in and follows it to
   serving (``start`` over SSH, the ready URL asked on the host); the stand-in logs the
   wall-clock time its /health starts answering. Prints the delay from then to the
   engine's verdict, per run. Target: <= 1 sample interval (``--poll``).
2. Collector cost while following a journal: a stream of samples every ``--poll`` s plus
   the unit's journal followed (``journalctl -o json -f`` over the same connection) while
   the server logs a line every ``--chatter`` s. CPU of the host-side programs (collector,
   its children, journalctl) per sample, measured through /proc of the container's
   processes; with and without the follower. Target: <= 2 ms per sample.

Not a test; see docs/BENCHMARKS.md. Needs what the lab needs (root, systemd-nspawn).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import re
import statistics
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from lab.fixtures import HostSpec, labmod  # noqa: E402
from lab.probes import wait_host  # noqa: E402

from gpudash.engine import SPECS, ActionKind, ExecOptions, execute, unit_ref  # noqa: E402
from gpudash.engine.plan import Selection  # noqa: E402
from gpudash.transport import open_source  # noqa: E402

UNIT = "vllm-bench.service"
PORT = 8001
LISTENING = re.compile(r"listening at (\d+\.\d+)")


def bench_unit(chatter: float) -> labmod.UnitSpec:
    # memory loads fast and stays steady for 3 s before /health answers (as vLLM's graph
    # capture does), so the ready URL is what the verdict waits for
    return dataclasses.replace(
        labmod.VLLM_KIMI, name=UNIT, mib=8192, restart="no",
        env=("GPULAB_STEPS=4", "GPULAB_STEP_S=0.2", "GPULAB_READY_DELAY_S=3",
             f"GPULAB_CHATTER_S={chatter:g}"))


def container_procs(host: labmod.LabHost) -> list[psutil.Process]:
    """Every process in the host's pid namespace (seen from this machine)."""
    ns = os.readlink(f"/proc/{host.pid1}/ns/pid")
    out = []
    for p in psutil.process_iter():
        try:
            if os.readlink(f"/proc/{p.pid}/ns/pid") == ns:
                out.append(p)
        except OSError:
            continue
    return out


def host_side(host: labmod.LabHost) -> list[psutil.Process]:
    """gpudash's programs on the host: the collector(s) and journalctl."""
    mine = []
    for p in container_procs(host):
        try:
            cmd = p.cmdline()
        except psutil.Error:
            continue
        if ("-I" in cmd and "-c" in cmd and ("stream" in cmd or "serve" in cmd)) or (
                cmd[:1] == ["journalctl"]):
            mine.append(p)
    return mine


def cpu_s(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


async def ready_to_serving(host: labmod.LabHost, runs: int, poll: float) -> list[float]:
    source = open_source(host.alias, interval=poll, ssh_config=host.ssh_config_path,
                         known_hosts=host.known_hosts_path)
    opts = ExecOptions(poll=poll, settle=3, serve_timeout=120, verify_timeout=60)
    delays = []
    try:
        control = source.control
        control.watch_unit(UNIT)
        for _ in range(runs):
            snap = await control.sample()
            spec = SPECS[ActionKind.START]
            plan = spec.plan(snap, Selection(owner=unit_ref(UNIT),
                                             ready_url=f"http://127.0.0.1:{PORT}/health"))
            report = await execute(plan, control, opts, lambda p: None)
            detected = time.time()
            assert report.confirmed, report.describe()
            log = host.exec(["journalctl", "--no-pager", "-o", "cat", "-u", UNIT]).stdout
            listening = float(LISTENING.findall(log)[-1])
            delays.append(detected - listening)
            host.systemctl("stop", UNIT)
            await asyncio.to_thread(wait_host, lambda: not any(host.gpu_used_mib()[1:]),
                                    what="the bench unit's memory back")
    finally:
        await source.close()
    return delays


async def follow_cost(host: labmod.LabHost, samples: int, poll: float, journal: bool
                      ) -> float:
    """Host-side CPU ms per sample, streaming (and following the unit's journal)."""
    source = open_source(host.alias, interval=poll, ssh_config=host.ssh_config_path,
                         known_hosts=host.known_hosts_path)
    lines = 0

    async def follow() -> None:
        nonlocal lines
        async for _line in source.control.journal(UNIT, lines=10, follow=True):  # type: ignore[attr-defined]
            lines += 1

    task = asyncio.ensure_future(follow()) if journal else None
    stream = source.stream(poll)
    try:
        for _ in range(5):  # warm up: first full snapshot, journalctl started
            await anext(stream)
        procs = host_side(host)
        c0, n0 = cpu_s(procs), lines
        for _ in range(samples):
            await anext(stream)
        spent = cpu_s(procs) - c0
        if journal:
            assert any(p.cmdline()[:1] == ["journalctl"] for p in procs), "no follower"
            assert lines - n0 > 0, "the follower read nothing"
    finally:
        if task is not None:
            task.cancel()
        await stream.aclose()  # type: ignore[attr-defined]
        await source.close()
    return 1000 * spent / samples


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--poll", type=float, default=0.5)
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--chatter", type=float, default=0.1)
    args = ap.parse_args()
    labmod.check_available()
    with labmod.Lab() as lab:
        [host] = lab.start([HostSpec(units=(bench_unit(args.chatter),),
                                     session_procs=())])
        delays = asyncio.run(ready_to_serving(host, args.runs, args.poll))
        print(f"ready -> serving (poll {args.poll:g} s, {args.runs} runs): "
              + ", ".join(f"{d * 1000:.0f}" for d in delays) + " ms; "
              f"median {statistics.median(delays) * 1000:.0f} ms, max {max(delays) * 1000:.0f}"
              f" ms: {'OK' if max(delays) <= args.poll else 'ABOVE'} (<= {args.poll:g} s)")
        host.systemctl("start", UNIT)
        time.sleep(6)  # loaded and chattering
        base = asyncio.run(follow_cost(host, args.samples, args.poll, journal=False))
        with_j = asyncio.run(follow_cost(host, args.samples, args.poll, journal=True))
        print(f"host-side CPU per sample ({args.samples} samples, poll {args.poll:g} s, "
              f"a log line every {args.chatter:g} s): collector alone {base:.2f} ms; "
              f"collector + journal follower {with_j:.2f} ms: "
              f"{'OK' if with_j <= 2.0 else 'ABOVE'} (<= 2 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
