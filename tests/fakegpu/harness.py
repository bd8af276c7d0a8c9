"""Helpers to build and drive the stand-in NVIDIA driver from Python tests.

from fakegpu.harness import build, init_state, env, spawn_holder

out = build(tmp_dir)                       # make -C tests/fakegpu OUT=tmp_dir (cached)
e = env(out, state_dir)                    # LD_LIBRARY_PATH / FAKEGPU_STATE / PATH
init_state(state_dir, gpus=8, out_dir=out)  # fresh state
p = spawn_holder(0, 96801, name="VLLM::Worker_TP0", env=e)  # returns once registered
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parent
DEFAULT_OUT = SRC / "build"
_built: set[Path] = set()


def build(out_dir: os.PathLike | str | None = None) -> Path:
    """Run make (incremental; cached per process, serialised across processes with flock)."""
    out = Path(out_dir or DEFAULT_OUT).resolve()
    if out in _built:
        return out
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        r = subprocess.run(
            ["make", "-s", "-C", str(SRC), f"OUT={out}", f"PYTHON={sys.executable}"],
            capture_output=True,
            text=True,
        )
    if r.returncode != 0:
        raise RuntimeError(f"building fakegpu failed:\n{r.stdout}\n{r.stderr}")
    _built.add(out)
    return out


def env(out_dir: os.PathLike | str, state_dir: os.PathLike | str, base: dict | None = None) -> dict:
    """Environment in which pynvml/nvitop/gpustat/nvidia-smi see the stand-in."""
    e = dict(os.environ if base is None else base)
    out = str(Path(out_dir).resolve())
    e["FAKEGPU_STATE"] = str(Path(state_dir).resolve())
    e["LD_LIBRARY_PATH"] = out + (
        os.pathsep + e["LD_LIBRARY_PATH"] if e.get("LD_LIBRARY_PATH") else ""
    )
    e["PATH"] = out + os.pathsep + e.get("PATH", "")
    e["FAKEGPU_BIN"] = os.path.join(out, "fakegpu")
    return e


def fakegpu(
    out_dir: os.PathLike | str, state_dir: os.PathLike | str, *args: str, check: bool = True
) -> subprocess.CompletedProcess:
    """Run the fakegpu CLI (init/set/fault/status ...)."""
    return subprocess.run(
        [os.path.join(str(out_dir), "fakegpu"), *map(str, args)],
        env=env(out_dir, state_dir),
        capture_output=True,
        text=True,
        check=check,
    )


def init_state(
    state_dir: os.PathLike | str,
    gpus: int = 8,
    name: str = "NVIDIA H100 80GB HBM3",
    total_mib: int = 81559,
    teardown_ms: int = 1000,
    baseline_mib: int = 0,
    reserved_mib: int = 0,
    out_dir: os.PathLike | str | None = None,
) -> Path:
    """Write a fresh state into state_dir (created); returns state_dir."""
    out = build(out_dir)
    fakegpu(
        out,
        state_dir,
        "init",
        "--gpus",
        str(gpus),
        "--name",
        name,
        "--total-mib",
        str(total_mib),
        "--teardown-ms",
        str(teardown_ms),
        "--baseline-mib",
        str(baseline_mib),
        "--reserved-mib",
        str(reserved_mib),
    )
    return Path(state_dir)


def spawn_holder(
    gpu: int | str | list[int],
    mib: int,
    name: str | None = None,
    env: dict | None = None,
    timeout: float = 10.0,
) -> subprocess.Popen:
    """Start `fakegpu hold` (argv[0] = name, like `exec -a`) and wait until it is registered.

    env must come from env(); the holder holds until it dies (kill it to release,
    the memory returns teardown_ms after death). The process is its own session
    leader so killing it never hits the test runner.
    """
    if env is None or "FAKEGPU_BIN" not in env:
        raise ValueError("pass env=harness.env(out_dir, state_dir)")
    if isinstance(gpu, (list, tuple)):
        gpu = ",".join(map(str, gpu))
    binary = env["FAKEGPU_BIN"]
    p = subprocess.Popen(
        [name or binary, "hold", "--gpu", str(gpu), "--mib", str(mib)],
        executable=binary,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout
    line = p.stdout.readline()  # "ready <pid>" once the hold is registered
    if not line.startswith("ready"):
        p.kill()
        raise RuntimeError(f"holder failed: {line!r} {p.stderr.read()!r}")
    if time.monotonic() > deadline:
        raise TimeoutError("holder did not register in time")
    return p


def kill_holder(p: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Kill a holder by pid and reap it (so it does not stay a zombie)."""
    if p.poll() is None:
        os.kill(p.pid, sig)
    p.wait()
    for f in (p.stdout, p.stderr):
        if f:
            f.close()
