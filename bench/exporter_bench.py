"""What one Prometheus scrape of ``gpudash exporter`` costs the exporter, for N hosts.

    python bench/exporter_bench.py [--hosts 1 16 64 256] [--scrapes 20]

Each host is a demo host (8 GPUs) in the incident's state after ``systemctl stop``: 8
orphaned workers, so every metric family has series. A scrape triages every host's
newest snapshot and writes the exposition text, exactly as ``/metrics`` does; sampling
the hosts is not included (that is the collector's and the transport's cost, see
collector_bench.py). Not a test: compare figures from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from prometheus_client import CollectorRegistry, generate_latest

from gpudash.demo.host import MINIMAX, DemoHost
from gpudash.feed.follow import HostFollower
from gpudash.feed.reconnect import LinkState
from gpudash.render.metrics import TriageCollector


def watches(n: int) -> list[HostFollower]:
    out = []
    for i in range(n):
        host = DemoHost(name=f"gpu{i:03d}")
        asyncio.run(host.systemctl("stop", MINIMAX))
        w = HostFollower(host, 1.0)
        w.link_changed(LinkState("connected", time.time()))
        w.sampled(host.snapshot())
        out.append(w)
    return out


def measure(n: int, scrapes: int) -> tuple[float, int, int]:
    """(CPU ms per scrape, bytes per scrape, series per scrape)."""
    registry = CollectorRegistry()
    registry.register(TriageCollector(watches(n)))
    text = generate_latest(registry)  # warm up
    cpu = time.process_time()
    for _ in range(scrapes):
        text = generate_latest(registry)
    used = time.process_time() - cpu
    series = sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))
    return 1000 * used / scrapes, len(text), series


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--scrapes", type=int, default=20)
    args = parser.parse_args()
    print(f"{'hosts':>6}  {'CPU ms / scrape':>15}  {'KiB / scrape':>12}  {'series':>7}")
    for n in args.hosts:
        ms, size, series = measure(n, args.scrapes)
        print(f"{n:>6}  {ms:>15.1f}  {size / 1024:>12.1f}  {series:>7}")


if __name__ == "__main__":
    main()
