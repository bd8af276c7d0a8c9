"""The lines model servers print when they fail, taken from their own sources, and what
each means for the operator.

Each pattern names the file it was read in (checked 2026-12; servers reword their messages,
so a pattern matches the stable part). Two sorts:

- ``SIGNATURES``: a line that is a cause by itself (memory, a port, the model, NCCL);
- ``WRAPPERS``: a line that says only *that* something failed and points above it ("See
  root cause above"): the cause is the traceback, or error line, before it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Signature:
    pattern: re.Pattern[str]
    kind: str  # memory-held | cuda-oom | nccl
    advice: str


_HELD = ("another process still holds GPU memory: reclaim it (or lower "
         "--gpu-memory-utilization)")
_OOM = "the model does not fit in the GPU memory that is free"

# Most specific first: the first signature with a line in the log explains the failure.
SIGNATURES: tuple[Signature, ...] = (
    # vLLM v1/worker/gpu_worker.py, its startup memory check
    Signature(re.compile(r"Free memory on device .* is less than desired GPU memory "
                         r"utilization"), "memory-held", _HELD),
    # vLLM v1/core/kv_cache_utils.py
    Signature(re.compile(r"No available memory for the cache blocks|larger than the "
                         r"available KV cache"),
              "memory-held", "not enough GPU memory left for the KV cache"),
    # PyTorch (vLLM, SGLang, TGI shards, TRT-LLM's PyTorch backend)
    Signature(re.compile(r"CUDA out of memory|torch\.OutOfMemoryError|cudaErrorMemoryAllocation"),
              "cuda-oom", _OOM),
    # PyTorch's ProcessGroupNCCL ("NCCL error in: ..."), SGLang's pynccl_wrapper.py
    # ("NCCL error: %s"), NCCL's own ncclGetErrorString texts
    Signature(re.compile(r"NCCL error|unhandled (?:system|cuda) error|ncclInternalError"),
              "nccl", "NCCL failed between the GPUs: check NCCL_DEBUG=INFO output and the "
              "GPUs' peers"),
)

# A line that reports a failure described above it.
WRAPPERS: tuple[re.Pattern[str], ...] = (
    # vLLM v1/engine/utils.py wait_for_engine_startup(): "Engine core initialization
    # failed. See root cause above. Failed core proc(s): {...}" (and its "Frontend
    # process failed during engine core initialization. See root cause above."); the
    # engine's own report of a worker's error, v1/executor/multiproc_executor.py: "Worker
    # failed with error '...', please check the stack trace above for the root cause";
    # v1/engine/exceptions.py EngineDeadError: "EngineCore encountered an issue. See stack
    # trace (above) for the root cause."
    re.compile(r"See root cause above|stack trace (?:\(above\) |above )?for (?:the )?root "
               r"cause", re.IGNORECASE),
    re.compile(r"Engine core initialization failed"),
)
