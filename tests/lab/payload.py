"""Programs that run *inside* a lab container (Debian's /usr/bin/python3, stdlib only).

Copied to /opt/gpulab/py/gpulab_payload.py in the container root; small stub modules
(``vllm.entrypoints.openai.api_server``, ``sglang.launch_server``, ``embed_server``,
``ipykernel_launcher``) call into it so that ``/proc/PID/cmdline`` of each main process
looks like the real thing (``python3 -m vllm.entrypoints.openai.api_server --model ...``).

GPU memory is held by real processes through the stand-in driver: a worker execs
``/opt/gpulab/bin/<NAME>`` (a symlink to ``fakegpu``, so both argv[0] and comm carry the
worker's name) with ``hold --gpu K --mib M``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

BIN = "/opt/gpulab/bin"


def _env_list(name: str, default: str) -> list[str]:
    return [x for x in os.environ.get(name, default).split(",") if x]


def _exec_holder(name: str, gpu: str, mib: str) -> None:
    path = os.path.join(BIN, name)
    if not os.path.exists(path):
        os.symlink("/usr/local/bin/fakegpu", path)
    os.execv(path, [name, "hold", "--gpu", str(gpu), "--mib", str(mib)])


def _spawn_holder(
    name: str, gpu: str, mib: str, *, escape: bool = False, ignore_term: bool = False
) -> int:
    """Fork a holder process; with escape=True it setsid()s and is reparented to PID 1."""
    pid = os.fork()
    if pid:
        if escape:
            os.waitpid(pid, 0)  # the intermediate child exits at once
        return pid
    try:
        if escape:
            if os.fork():
                os._exit(0)
            os.setsid()  # the scheduler leads its own session, parent is PID 1
        if ignore_term:
            # like `trap '' TERM` in a bash wrapper before exec: SIG_IGN survives exec
            os.execv(
                "/bin/bash",
                [
                    "bash",
                    "-c",
                    f"trap '' TERM; exec -a {name} {BIN}/{name} hold --gpu {gpu} --mib {mib}",
                ],
            )
        _exec_holder(name, gpu, mib)
    finally:
        os._exit(127)


def _wait_forever() -> None:
    """Reap children as they die, never exit on our own (like a server's main loop)."""
    while True:
        try:
            os.wait()
        except ChildProcessError:
            signal.pause()
        except InterruptedError:
            pass


def vllm_main() -> None:
    gpus = _env_list("GPULAB_GPUS", "0,1,2,3,4,5,6,7")
    mib = os.environ.get("GPULAB_MIB", "96801")
    for tp, gpu in enumerate(gpus):
        _spawn_holder(f"VLLM::Worker_TP{tp}", gpu, mib)
    _wait_forever()


def sglang_main() -> None:
    gpus = _env_list("GPULAB_GPUS", "6,7")
    mib = os.environ.get("GPULAB_MIB", "512")
    for tp, gpu in enumerate(gpus):
        # schedulers start their own session and leave the main's process tree,
        # but stay in the unit's cgroup
        _spawn_holder(f"sglang::scheduler_DP0_TP{tp}_EP{tp}", gpu, mib, escape=True)
    _wait_forever()


def embed_main() -> None:
    gpu = os.environ.get("GPULAB_GPUS", "5").split(",")[0]
    mib = os.environ.get("GPULAB_MIB", "512")
    _spawn_holder("embed-worker", gpu, mib, ignore_term=True)
    _wait_forever()


def kernel_main() -> None:
    """A Jupyter-kernel lookalike that holds GPU memory in its own process."""
    gpu = int(os.environ.get("GPULAB_GPUS", "0").split(",")[0])
    mib = int(os.environ.get("GPULAB_MIB", "1024"))
    held = False
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        fn = lib.fakegpu_hold
        fn.argtypes = [ctypes.c_uint, ctypes.c_ulonglong]
        held = fn(gpu, mib) == 0
    except (OSError, AttributeError):
        held = False
    if not held:  # fall back to a child holder named like the kernel
        _spawn_holder("ipykernel-cuda", str(gpu), str(mib))
    _wait_forever()


MAINS = {"vllm": vllm_main, "sglang": sglang_main, "embed": embed_main, "kernel": kernel_main}

if __name__ == "__main__":
    MAINS[sys.argv[1]]()
