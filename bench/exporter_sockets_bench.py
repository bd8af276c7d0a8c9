"""What N idle sockets on /metrics cost ``gpudash exporter``: threads, RSS, CPU seconds.

    python bench/exporter_sockets_bench.py [--sockets 1000] [--hosts 16] [--requests 300]

Starts ``gpudash exporter --demo-hosts H --listen 127.0.0.1:0`` as a real process, reads
its threads, resident memory and CPU time from /proc, then opens N TCP connections to it
that send nothing (a slow or hostile scraper, or a port scanner) and reads them again
after 3 s; then R of them send a whole ``GET /metrics`` and close at once without reading
the answer, and the exporter's CPU seconds are read once it is quiet again: a server that
builds one exposition per scrape pays R full scrapes there. Last, a real scrape is timed
while the idle sockets are still open. Not a test: compare figures from one run.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def stats(pid: int) -> tuple[int, float, float]:
    """(threads, RSS MiB, CPU seconds) of ``pid``."""
    status = Path(f"/proc/{pid}/status").read_text()
    threads = int(re.search(r"^Threads:\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]
    rss = int(re.search(r"^VmRSS:\s+(\d+)", status, re.M).group(1)) / 1024  # type: ignore[union-attr]
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICK
    return threads, rss, cpu


def settle(pid: int, quiet_s: float = 1.0, limit_s: float = 120.0) -> tuple[int, float, float]:
    """Stats once the process used less than 5 % of a core for ``quiet_s``."""
    deadline = time.monotonic() + limit_s
    last = stats(pid)
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = stats(pid)
        if now[2] - last[2] < 0.05 * quiet_s:
            return now
        last = now
    return last


def scrape(port: int) -> float:
    started = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as r:
        r.read()
    return time.monotonic() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sockets", type=int, default=1000)
    ap.add_argument("--hosts", type=int, default=16)
    ap.add_argument("--requests", type=int, default=300)
    a = ap.parse_args()
    proc = subprocess.Popen([sys.executable, "-m", "gpudash", "exporter", "--demo-hosts",
                             str(a.hosts), "--listen", "127.0.0.1:0", "--interval", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    idle: list[socket.socket] = []
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
        time.sleep(3)
        scrape(port)  # the hosts are sampled and one scrape has been built
        base = settle(proc.pid)
        for _ in range(a.sockets):
            s = socket.create_connection(("127.0.0.1", port))
            idle.append(s)
        time.sleep(3)
        held = stats(proc.pid)
        print(f"{a.hosts} demo hosts; before: {base[0]} threads, {base[1]:.0f} MiB RSS")
        print(f"{a.sockets} idle sockets: {held[0]} threads, {held[1]:.0f} MiB RSS "
              f"(+{held[1] - base[1]:.0f} MiB)")
        print(f"one scrape meanwhile: {scrape(port):.2f} s")
        before = settle(proc.pid)
        for s in idle[:a.requests]:
            try:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            except OSError:
                pass  # the exporter closed it already
            s.close()
        after = settle(proc.pid)
        print(f"{a.requests} of them send GET /metrics and close: "
              f"{after[2] - before[2]:.2f} CPU s")
    finally:
        for s in idle:
            s.close()
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
