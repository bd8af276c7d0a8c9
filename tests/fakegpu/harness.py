"""Helpers to build and drive the stand-in NVIDIA driver from Python tests.

from fakegpu.harness import build, init_state, env, spawn_holder

out = build(tmp_dir)                       # make -C tests/fakegpu OUT=tmp_dir (cached)
e = env(out, state_dir)                    # LD_LIBRARY_PATH / FAKEGPU_STATE / PATH
init_state(state_dir, gpus=8, out_dir=out)  # fresh state
p = spawn_holder(0, 96801, name="VLLM::Worker_TP0", env=e)  # returns once registered
p = spawn_holder(0, 500, env=e, fork_child="compile_worker")  # p.child_pid keeps the memory
kill_child(p)                              # ... until it is killed too
"""

from __future__ import annotations

import fcntl
import os
import select
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
    # gpudash's collector looks for /dev/nvidia* held by processes NVML does not list;
    # here the stand-in's device files are the ones holders open
    e["GPUDASH_NVIDIA_DEV_DIR"] = os.path.join(e["FAKEGPU_STATE"], "dev")
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
    fork_child: str | None = None,
    sm_util: int | None = None,
) -> subprocess.Popen:
    """Start `fakegpu hold` (argv[0] = name, like `exec -a`) and wait until it is registered.

    env must come from env(); the holder holds until it dies (kill it to release,
    the memory returns teardown_ms after death). The process is its own session
    leader so killing it never hits the test runner.

    fork_child: the holder also forks a child of that name that inherits its device
    files and never calls NVML (``p.child_pid``; ``p.child_pidfd`` names exactly it):
    the memory then stays until both are gone; the driver lists only the holder.

    sm_util: the holder's own SM utilisation (its nvmlDeviceGetProcessUtilization
    samples), set before it is reported registered.
    """
    if env is None or "FAKEGPU_BIN" not in env:
        raise ValueError("pass env=harness.env(out_dir, state_dir)")
    if isinstance(gpu, (list, tuple)):
        gpu = ",".join(map(str, gpu))
    binary = env["FAKEGPU_BIN"]
    extra = ["--fork-child", fork_child] if fork_child else []
    if sm_util is not None:
        extra += ["--sm-util", str(sm_util)]
    p = subprocess.Popen(
        [name or binary, "hold", "--gpu", str(gpu), "--mib", str(mib), *extra],
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
    p.child_pid = p.child_pidfd = None  # type: ignore[attr-defined]
    words = line.split()
    if fork_child:
        child = int(words[3])
        pidfd = os.pidfd_open(child)
        # the pidfd names whatever has this pid now: prove it is the holder's child
        with open(f"/proc/{child}/stat") as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        if ppid != p.pid:
            os.close(pidfd)
            p.kill()
            raise RuntimeError(f"pid {child} is not the holder's child")
        p.child_pid, p.child_pidfd = child, pidfd  # type: ignore[attr-defined]
    return p


def kill_child(p: subprocess.Popen, sig: int = signal.SIGKILL, timeout: float = 10.0) -> None:
    """Signal the holder's forked child (through its pidfd); with SIGKILL, wait until it is
    gone (its device files closed)."""
    pidfd = getattr(p, "child_pidfd", None)
    if pidfd is None:
        return
    try:
        signal.pidfd_send_signal(pidfd, sig)
    except ProcessLookupError:
        pass
    if sig == signal.SIGKILL:
        select.select([pidfd], [], [], timeout)  # readable once it has exited
        os.close(pidfd)
        p.child_pidfd = None  # type: ignore[attr-defined]


def kill_holder(p: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Kill a holder by pid and reap it (so it does not stay a zombie). Its forked child,
    if any, lives on (that is the point of it): see kill_child."""
    if p.poll() is None:
        os.kill(p.pid, sig)
    p.wait()
    for f in (p.stdout, p.stderr):
        if f:
            f.close()
