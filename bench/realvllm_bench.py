"""The collector's cost per sample on a lab host running a real vLLM (tests/realvllm).

    sudo python bench/realvllm_bench.py [--samples 100] [--poll 0.5] [--rounds 3]

One lab host (real systemd, real sshd on 127.0.0.1) whose ``vllm-tiny.service`` is a
real ``vllm serve`` (API server -> VLLM::EngineCore -> VLLM::Worker holding stand-in GPU
memory), then the same host after ``kill -9`` of the API server (the respawned server
beside the old engine and worker: what the new orphan rule reads). In each state, the
host-side CPU (collector and its children, measured through /proc of the container's
processes) per sample of a stream over SSH, alternating with the same host with the unit
stopped (the stand-in only), in one run.

Not a test; see docs/BENCHMARKS.md. Needs root and the real-vLLM install
(``python3 tests/realvllm/install.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from lab.fixtures import labmod  # noqa: E402
from realvllm import scenarios as S  # noqa: E402
from swap_bench import cpu_s, host_side  # noqa: E402

from gpudash.transport import open_source  # noqa: E402


async def per_sample(host: labmod.LabHost, samples: int, poll: float) -> tuple[float, int]:
    """(host-side CPU ms per sample, processes in the last snapshot) of a stream."""
    source = open_source(host.alias, interval=poll, ssh_config=host.ssh_config_path,
                         known_hosts=host.known_hosts_path, read_only=True)
    stream = source.stream(poll)
    try:
        for _ in range(5):  # warm up: the first full snapshot, the caches filled
            await anext(stream)
        procs = host_side(host)
        c0 = cpu_s(procs)
        for _ in range(samples):
            snap = await anext(stream)
        spent = cpu_s(procs) - c0
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
        await source.close()
    return 1000 * spent / samples, len(snap.processes)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--poll", type=float, default=0.5)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    labmod.check_available()
    unit = S.tiny_unit()
    with labmod.Lab() as lab:
        [host] = lab.start([S.host_spec(unit)])
        S.wait_serving(host, unit.port)
        results: dict[str, list[float]] = {"serving": [], "after kill -9": [],
                                           "stand-in only": []}
        counts: dict[str, int] = {}
        for _ in range(args.rounds):
            for state in ("serving", "stand-in only"):
                if state == "stand-in only":
                    host.systemctl("stop", unit.name)
                    S.kill_pids(host, S.unit_pids(host, unit.name))
                elif results["serving"]:  # stopped by the round before
                    host.systemctl("start", unit.name)
                    S.wait_serving(host, unit.port)
                ms, n = asyncio.run(per_sample(host, args.samples, args.poll))
                results[state].append(ms)
                counts[state] = n
        host.systemctl("start", unit.name)
        S.wait_serving(host, unit.port)
        S.kill_main(host, unit)
        for _ in range(args.rounds):
            ms, n = asyncio.run(per_sample(host, args.samples, args.poll))
            results["after kill -9"].append(ms)
            counts["after kill -9"] = n
        for state, rows in results.items():
            print(f"{state:14} {counts[state]:3} processes listed: host-side CPU "
                  f"{statistics.median(rows):.2f} ms per sample (median of {len(rows)}: "
                  + ", ".join(f"{r:.2f}" for r in rows) + f"; {args.samples} samples, "
                  f"poll {args.poll:g} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
