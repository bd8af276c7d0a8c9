"""Per-sample cost of the streaming collector vs polling tools, on the stand-in driver.

    python bench/collector_bench.py [--holders 500] [--samples 30] [--interval 0.2]
                                    [--sleepers 0] [--detached 0]

--detached N: N holders whose forked child keeps their memory after they are killed, so
the collector looks for device-file holders every sample (the steady state of a host
with leftovers NVML does not list).

Prints a table: CPU per sample on the GPU host (collector process + its children), bytes
per sample on the wire, and release-to-snapshot latency. Not a test; see docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fakegpu import harness  # noqa: E402

from gpudash.protocol.payload import collector_argv, payload  # noqa: E402
from gpudash.protocol.wire import SnapshotDecoder  # noqa: E402


def cpu_of(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


def bench_collector(
    env: dict[str, str], samples: int, interval: float, victim: subprocess.Popen[str]
):
    argv = collector_argv(sys.executable, "stream", interval=interval, sudo=False)
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert proc.stdin and proc.stdout
    proc.stdin.write(payload(with_pynvml=False))
    proc.stdin.flush()
    decoder = SnapshotDecoder("bench")
    ps = psutil.Process(proc.pid)
    sizes: list[int] = []
    for _ in range(3):  # warm up: first full snapshot, caches filled
        decoder.feed(proc.stdout.readline())
    cpu0 = cpu_of(ps)
    for _ in range(samples):
        line = proc.stdout.readline()
        sizes.append(len(line))
        decoder.feed(line)
    cpu = (cpu_of(ps) - cpu0) / samples
    # release -> seen: kill a holder, time until a snapshot shows its GPU's memory back
    gpu = 7
    snap = decoder.feed(proc.stdout.readline())
    before = snap.gpu(gpu).memory_used_mib  # type: ignore[union-attr]
    killed = time.monotonic()
    harness.kill_holder(victim)
    released_at = None
    latency = None
    while True:
        snap = decoder.feed(proc.stdout.readline())
        if snap.gpu(gpu).memory_used_mib < before:  # type: ignore[operator,union-attr]
            latency = time.monotonic() - killed
            break
    proc.stdin.close()
    proc.wait()
    return cpu, sum(sizes) / len(sizes), max(sizes), latency, released_at


def bench_command(argv: list[str], env: dict[str, str], samples: int) -> float:
    before = os.times()
    for _ in range(samples):
        subprocess.run(argv, env=env, capture_output=True, check=False)
    after = os.times()
    return ((after.children_user - before.children_user)
            + (after.children_system - before.children_system)) / samples


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--holders", type=int, default=500)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--teardown-ms", type=int, default=0)
    parser.add_argument("--sleepers", type=int, default=0,
                        help="extra processes on the host that hold no GPU")
    parser.add_argument("--detached", type=int, default=0,
                        help="killed holders whose forked children keep their memory")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpudash-bench-"))
    out = harness.build(work / "build")
    state = work / "state"
    harness.init_state(state, gpus=8, out_dir=out, teardown_ms=args.teardown_ms)
    env = harness.env(out, state)
    holders = [harness.spawn_holder(i % 8, 10, name=f"worker-{i}", env=env)
               for i in range(args.holders)]
    victim = harness.spawn_holder(7, 4000, name="victim", env=env)
    sleepers = [subprocess.Popen(["sleep", "3600"]) for _ in range(args.sleepers)]
    detached = [harness.spawn_holder(i % 7, 2000, env=env, fork_child=f"compile-{i}")
                for i in range(args.detached)]
    for p in detached:
        harness.kill_holder(p)
    try:
        cpu, avg, peak, latency, _ = bench_collector(env, args.samples, args.interval, victim)
        smi = bench_command(["nvidia-smi", "--query-gpu=index,uuid,name,memory.total,memory.used,"
                             "utilization.gpu,temperature.gpu,power.draw,power.limit",
                             "--format=csv,noheader,nounits"], env, args.samples)
        smi += bench_command(["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory",
                              "--format=csv,noheader,nounits"], env, args.samples)
        gpustat = shutil.which("gpustat")
        gs = bench_command([gpustat, "--json"], env, max(3, args.samples // 5)) if gpustat else None
    finally:
        for p in holders:
            harness.kill_holder(p)
        for p in detached:
            harness.kill_child(p)
        for p in sleepers:
            p.kill()
            p.wait()
    print(f"8 GPUs, {args.holders + 1} GPU processes (+{args.sleepers} without a GPU, "
          f"+{args.detached} forked children holding dead holders' memory), "
          f"interval {args.interval:g} s, "
          f"teardown {args.teardown_ms} ms, {args.samples} samples")
    print(f"{'method':38} {'CPU ms/sample':>14} {'wire B/sample':>14}")
    print(f"{'gpudash streaming collector':38} {cpu * 1000:14.2f} {avg:10.0f} (max {peak})")
    print(f"{'nvidia-smi --query-gpu + compute-apps':38} {smi * 1000:14.2f} {'-':>14}")
    if gs is not None:
        print(f"{'gpustat --json':38} {gs * 1000:14.2f} {'-':>14}")
    print(f"release -> snapshot seen: {latency * 1000:.0f} ms "
          f"(target <= interval + 50 ms = {args.interval * 1000 + 50:.0f} ms + teardown)")


if __name__ == "__main__":
    main()
