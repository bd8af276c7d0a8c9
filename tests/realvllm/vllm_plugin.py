"""vLLM general plugin: each real vLLM worker holds stand-in GPU memory itself.

Installed as the package ``gpudash_fakegpu_vllm`` (entry point group
``vllm.general_plugins``) in a directory put on ``PYTHONPATH``; vLLM calls
``register()`` in the API server, the engine core and every worker. In a worker
(``multiprocessing.current_process().name`` is ``VllmWorker-<rank>``; its title is not
set yet) it calls the stand-in driver's ``fakegpu_hold(gpu, mib)`` through ctypes, so
the memory is held by vLLM's own process until it dies (tests/fakegpu/README.md).

Environment:

- ``GPUDASH_VLLM_FAKEGPU_MIB``: MiB each worker holds (unset or 0: nothing);
- ``GPUDASH_VLLM_FAKEGPU_GPUS``: comma-separated GPU of each rank (rank r holds the
  r-th; default: GPU r);
- ``GPUDASH_VLLM_FAKEGPU_LIB``: the library (default ``libnvidia-ml.so.1``).

A failure is written to stderr (the journal) as ``gpudash-fakegpu: ...`` and ends the
worker: a server that silently holds nothing would make every test lie.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import sys

_held = False


def _gpu_of(rank: int) -> int:
    gpus = [g for g in os.environ.get("GPUDASH_VLLM_FAKEGPU_GPUS", "").split(",") if g.strip()]
    if not gpus:
        return rank
    return int(gpus[rank % len(gpus)])


def register() -> None:
    global _held
    name = multiprocessing.current_process().name
    if _held or not name.startswith("VllmWorker"):
        return
    mib = int(os.environ.get("GPUDASH_VLLM_FAKEGPU_MIB", "0") or 0)
    if mib <= 0:
        return
    try:
        rank = int(name.rsplit("-", 1)[-1])
    except ValueError:
        rank = 0
    gpu = _gpu_of(rank)
    lib = ctypes.CDLL(os.environ.get("GPUDASH_VLLM_FAKEGPU_LIB", "libnvidia-ml.so.1"),
                      use_errno=True)
    lib.fakegpu_hold.argtypes = (ctypes.c_uint, ctypes.c_ulonglong)
    lib.fakegpu_hold.restype = ctypes.c_int
    if lib.fakegpu_hold(gpu, mib) != 0:
        err = ctypes.get_errno()
        print(f"gpudash-fakegpu: {name} (pid {os.getpid()}): fakegpu_hold(GPU{gpu}, {mib} MiB)"
              f" failed: {os.strerror(err)}", file=sys.stderr, flush=True)
        os._exit(70)
    _held = True
    print(f"gpudash-fakegpu: {name} (pid {os.getpid()}) holds {mib} MiB of GPU{gpu}",
          file=sys.stderr, flush=True)
