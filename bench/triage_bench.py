#!/usr/bin/env python3
"""Triage per sample at 500 processes: what the dashboard, the fleet and the exporter pay
for every sample of every host, beside an older checkout of gpudash in the same run.

    python bench/triage_bench.py                      # this checkout
    python bench/triage_bench.py --against /tmp/old   # and an older one (alternating)

The snapshot: 20 services of 25 processes each, vLLM V1 shaped (API server -> engine
core -> workers; one in three holds GPU memory), one of them respawned after ``kill -9``
with its old engine and workers left; CPU time (``time.process_time``) per triage, the
median of several alternating rounds (these machines are shared: compare in one run).
Three cases: a full triage (the structure changed), a sample whose processes changed only
in their measurements (CPU, RSS), and a sample where nothing changed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = textwrap.dedent("""
    import dataclasses, json, sys, time
    try:
        from gpudash.domain.model import Gpu, HostSnapshot, Process, Unit
        from gpudash.domain import triage as T
    except ImportError:  # a checkout before the layers
        from gpudash.model import Gpu, HostSnapshot, Process, Unit
        from gpudash import triage as T
    fields = {f.name for f in dataclasses.fields(Process)}

    def proc(**kw):
        return Process(**{k: v for k, v in kw.items() if k in fields})

    def snap(cpu):
        procs, units = [], []
        for u in range(20):
            name = f"vllm-{u}.service"
            cg = f"/system.slice/{name}"
            base = 10000 + u * 100
            main = base + 50 if u == 0 else base
            units.append(Unit(name, "active", "running", "enabled", "always", "process",
                              1 if u == 0 else 0, main))
            tree = [(base, 1, "vllm serve m"), (base + 1, base, "VLLM::EngineCore")]
            tree += [(base + 2 + k, base + 1, f"VLLM::Worker_TP{k}") for k in range(23)]
            if u == 0:  # respawned: the new API server, engine, one worker
                tree = [(p, 1 if p == base + 1 else pp, c) for p, pp, c in tree[1:]]
                tree += [(main, 1, "vllm serve m"), (main + 1, main, "VLLM::EngineCore"),
                         (main + 2, main + 1, "VLLM::Worker_TP0")]
            for pid, ppid, cmd in tree:
                holds = cmd.startswith("VLLM::Worker") and pid % 3 == 0
                procs.append(proc(pid=pid, ppid=ppid, start_ticks=pid, state="S",
                                  user="root", name=cmd[:15], cmdline=cmd, cgroup=cg,
                                  unit=name, pgid=base if pid < main or u else main,
                                  gpu_memory_mib={pid % 8: 4000} if holds else {},
                                  cpu_pct=cpu, rss_mib=900))
        gpus = tuple(Gpu(i, memory_total_mib=97887, memory_used_mib=60000) for i in range(8))
        return HostSnapshot("bench", 1.0, gpus, tuple(procs[:500]), tuple(units))

    def cpu_ms(fn, n):
        t0 = time.process_time()
        for _ in range(n):
            fn()
        return (time.process_time() - t0) / n * 1000

    a, b = snap(1.0), snap(2.0)
    n = int(sys.argv[1])
    full = cpu_ms(lambda: T.triage(a, a), n)
    last = T.retriage(a, None, None)
    # b: the same pids and structure, every process's CPU changed (new objects)
    try:
        from gpudash.domain.model import Changes
        b = dataclasses.replace(b, changes=Changes(
            gpus=frozenset(), processes=frozenset(p.pid for p in b.processes),
            units=frozenset(), containers=frozenset(), pods=frozenset(), structure=False))
    except ImportError:
        pass
    measurements = cpu_ms(lambda: T.retriage(b, a, last), n)
    quiet = dataclasses.replace(a, taken_at=2.0)
    try:
        from gpudash.domain.model import Changes
        quiet = dataclasses.replace(quiet, changes=Changes(
            gpus=frozenset(), processes=frozenset(), units=frozenset(),
            containers=frozenset(), pods=frozenset(), structure=False))
    except ImportError:
        pass
    nothing = cpu_ms(lambda: T.retriage(quiet, a, last), n)
    orphans = len(T.triage(a, a).orphans())
    print(json.dumps({"processes": len(a.processes), "orphans": orphans, "full": full,
                      "measurements": measurements, "nothing": nothing}))
""")


def run(checkout: Path, n: int) -> dict[str, float]:
    # -S: no site-packages, so no editable install of another checkout gets in the way
    # (the domain needs nothing but the standard library)
    out = subprocess.run([sys.executable, "-S", "-c", CHILD, str(n)], capture_output=True,
                         text=True, check=True, cwd=checkout,
                         env={"PYTHONPATH": str(checkout), "PATH": "/usr/bin:/bin"})
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--against", type=Path, default=None, help="an older gpudash checkout")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=40, help="triages per case and round")
    args = ap.parse_args()
    checkouts = {"this": ROOT} | ({"against": args.against} if args.against else {})
    results: dict[str, list[dict[str, float]]] = {k: [] for k in checkouts}
    for _ in range(args.rounds):
        for name, path in checkouts.items():  # alternating, in one run
            results[name].append(run(path, args.n))
    for name, rows in results.items():
        med = {k: statistics.median(r[k] for r in rows) for k in ("full", "measurements",
                                                                   "nothing")}
        print(f"{name:8} {rows[0]['processes']} processes, {rows[0]['orphans']} orphans: "
              f"full {med['full']:.2f} ms, measurements only {med['measurements']:.2f} ms, "
              f"nothing changed {med['nothing']:.3f} ms (CPU per sample, median of "
              f"{len(rows)} rounds)")
    if args.against:
        a, b = results["this"], results["against"]
        for k in ("full", "measurements"):
            ratio = statistics.median(x[k] for x in a) / statistics.median(y[k] for y in b)
            print(f"this/against {k}: {ratio:.2f}")


if __name__ == "__main__":
    main()
