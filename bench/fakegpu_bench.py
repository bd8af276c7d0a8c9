"""Benchmark: CPU time per full NVML sample against the stand-in driver.

Sets up 8 GPUs with 500 real `fakegpu hold` processes, then in a subprocess
(so libnvidia-ml.so.1 loads from LD_LIBRARY_PATH) measures CPU time of a full
sample: count + per device name / memory / utilisation / temperature / power /
compute processes. Reported twice: through pynvml (includes pynvml's Python
object building) and through raw ctypes calls (the stand-in's own cost).

    python bench/fakegpu_bench.py [--holders 500] [--gpus 8] [--samples 200]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from fakegpu import harness  # noqa: E402

CHILD = r"""
import ctypes, json, sys, time, pynvml as N
samples = int(sys.argv[1])
N.nvmlInit()
n = N.nvmlDeviceGetCount()
lib = N.nvmlLib

def sample_pynvml():
    cnt = N.nvmlDeviceGetCount()
    procs = 0
    for i in range(cnt):
        h = N.nvmlDeviceGetHandleByIndex(i)
        N.nvmlDeviceGetName(h)
        N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)
        N.nvmlDeviceGetUtilizationRates(h)
        N.nvmlDeviceGetTemperature(h, 0)
        N.nvmlDeviceGetPowerUsage(h)
        procs += len(N.nvmlDeviceGetComputeRunningProcesses(h))
    return procs

arr = (N.c_nvmlProcessInfo_v3_t * 4096)()
name = ctypes.create_string_buffer(96)
mem = N.c_nvmlMemory_v2_t(); util = N.c_nvmlUtilization_t(); u = ctypes.c_uint()
handles = [N.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
def sample_raw():
    c = ctypes.c_uint(); lib.nvmlDeviceGetCount_v2(ctypes.byref(c))
    procs = 0
    for i in range(c.value):
        h = ctypes.c_void_p(); lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h))
        lib.nvmlDeviceGetName(h, name, 96)
        mem.version = N.nvmlMemory_v2; lib.nvmlDeviceGetMemoryInfo_v2(h, ctypes.byref(mem))
        lib.nvmlDeviceGetUtilizationRates(h, ctypes.byref(util))
        lib.nvmlDeviceGetTemperature(h, 0, ctypes.byref(u))
        lib.nvmlDeviceGetPowerUsage(h, ctypes.byref(u))
        k = ctypes.c_uint(0); lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(k), None)
        k.value += 16; lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(k), arr)
        procs += k.value
    return procs

res = {}
t0 = time.process_time()
first = sample_pynvml()
res["first_sample_ms"] = (time.process_time() - t0) * 1e3
for label, fn in (("pynvml", sample_pynvml), ("raw ctypes", sample_raw)):
    fn()
    t = time.process_time()
    for _ in range(samples):
        procs = fn()
    res[label] = (time.process_time() - t) / samples * 1e3
res["procs"] = procs
# a dashboard samples ~1/s: include the periodic liveness probe (every 1 s)
time.sleep(1.1)
t = time.process_time()
sample_raw()
res["raw after 1.1 s idle"] = (time.process_time() - t) * 1e3
print(json.dumps(res))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--holders", type=int, default=500)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--samples", type=int, default=200)
    a = ap.parse_args()
    # watchers still rename and unlink entries of the holders just killed: ignore that
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        out = harness.build(Path(tmp) / "build")
        state = Path(tmp) / "state"
        harness.init_state(state, gpus=a.gpus, out_dir=out, total_mib=10**7)
        env = harness.env(out, state)
        t = time.monotonic()
        holders = [harness.spawn_holder(i % a.gpus, 10, env=env) for i in range(a.holders)]
        setup = time.monotonic() - t
        try:
            r = subprocess.run(
                [sys.executable, "-c", CHILD, str(a.samples)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            res = json.loads(r.stdout)
        finally:
            for p in holders:
                harness.kill_holder(p)
    assert res["procs"] == a.holders, res
    print(
        f"fakegpu bench: {a.gpus} GPUs, {a.holders} holder processes (setup {setup:.1f} s), "
        f"{a.samples} samples"
    )
    print(f"{'path':<28}{'CPU ms / full sample':>22}")
    for k in ("pynvml", "raw ctypes", "raw after 1.1 s idle", "first_sample_ms"):
        print(f"{k:<28}{res[k]:>22.3f}")


if __name__ == "__main__":
    main()
