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

from gpudash.record import record


@record
class Signature:
    pattern: re.Pattern[str]
    kind: str  # memory-held | cuda-oom | nccl | port-in-use | model-missing | model-load
    advice: str


_HELD = ("another process still holds GPU memory: reclaim it (or lower "
         "--gpu-memory-utilization)")
_OOM = "the model does not fit in the GPU memory that is free"
_PORT = ("a port the server needs is taken, often by the previous server's leftovers: see "
         "who listens on it (ss -ltnp), reap it, or give the server another --port")
_MODEL = ("the model is not where the server looks: check its path or name, and that the "
          "weights were downloaded (HF_HUB_OFFLINE set means no download)")

# Most specific first: the first signature with a line in the log explains the failure.
SIGNATURES: tuple[Signature, ...] = (
    # vLLM v1/worker/gpu_worker.py, its startup memory check
    Signature(re.compile(r"Free memory on device .* is less than desired GPU memory "
                         r"utilization"), "memory-held", _HELD),
    # vLLM v1/core/kv_cache_utils.py
    Signature(re.compile(r"No available memory for the cache blocks|larger than the "
                         r"available KV cache"),
              "memory-held", "not enough GPU memory left for the KV cache"),
    # SGLang python/sglang/srt/model_executor/model_runner.py: no room left for the KV
    # cache once the weights are in (RuntimeError("Not enough memory. Please try to
    # increase --mem-fraction-static. ..."))
    Signature(re.compile(r"Not enough memory\. Please try to increase --mem-fraction-static"),
              "memory-held", "too little GPU memory left for SGLang's KV cache after the "
              "weights: another process may hold some (reclaim it), or raise "
              "--mem-fraction-static"),
    # TGI server/text_generation_server/models/flash_causal_lm.py, its warm-up
    Signature(re.compile(r"Not enough memory to handle \d+ prefill tokens"),
              "cuda-oom", "the warm-up batch does not fit in the free GPU memory: decrease "
              "--max-batch-prefill-tokens, or free the GPU"),
    # PyTorch (vLLM, SGLang, TGI shards, TRT-LLM's PyTorch backend)
    Signature(re.compile(r"CUDA out of memory|torch\.OutOfMemoryError|cudaErrorMemoryAllocation"),
              "cuda-oom", _OOM),
    # ggml ggml/src/ggml-cuda/ggml-cuda.cu (llama.cpp, and Ollama's runner that vendors it):
    # "%s: allocating %.2f MiB on device %d: cudaMalloc failed: %s"
    Signature(re.compile(r"cudaMalloc failed: out of memory"), "cuda-oom", _OOM),
    # Ollama ml/device.go, ErrNoMem: "insufficient memory - required allocations: %+v"
    Signature(re.compile(r"insufficient memory - required allocations"), "cuda-oom", _OOM),
    # TensorRT-LLM cpp/include/tensorrt_llm/common/cudaUtils.h, check():
    # "[TensorRT-LLM][ERROR] CUDA runtime error in %s: %s" with cudaGetErrorString's text
    Signature(re.compile(r"\[TensorRT-LLM\]\[ERROR\] CUDA runtime error in .*: out of memory"),
              "cuda-oom", _OOM),
    # PyTorch's ProcessGroupNCCL ("NCCL error in: ..."), SGLang's pynccl_wrapper.py
    # ("NCCL error: %s"), NCCL's own ncclGetErrorString texts
    Signature(re.compile(r"NCCL error|unhandled (?:system|cuda) error|ncclInternalError"),
              "nccl", "NCCL failed between the GPUs: check NCCL_DEBUG=INFO output and the "
              "GPUs' peers"),
    # the bind error as each runtime words it: Python's asyncio ("error while attempting
    # to bind on address ...: address already in use", uvicorn logs it: vLLM, SGLang,
    # trtllm-serve) and socket ("OSError: [Errno 98] Address already in use": vLLM binds
    # before its engine starts), ZeroMQ (SGLang's internal ports), Go's net ("listen tcp
    # ...: bind: address already in use": ollama serve, cmd/cmd.go RunServer), Rust's std
    # ("Address already in use (os error 98)": TGI router/src/server.rs "Failed to bind to")
    Signature(re.compile(r"[Aa]ddress already in use"), "port-in-use", _PORT),
    # llama.cpp tools/server/server-http.cpp, server_http_context::start()
    Signature(re.compile(r"couldn't bind HTTP server socket"), "port-in-use", _PORT),
    # huggingface_hub's errors (vLLM, SGLang, TRT-LLM and TGI load through it): a local
    # path that does not exist is taken for a repo id (HFValidationError "Repo id must
    # be in the form"), a repo not in the cache while offline (LocalEntryNotFoundError),
    # not on the hub (RepositoryNotFoundError); transformers utils/hub.py
    Signature(re.compile(r"\b(?:HFValidationError|LocalEntryNotFoundError|"
                         r"RepositoryNotFoundError|GatedRepoError)\b|is not a local folder "
                         r"and is not a valid model identifier"), "model-missing", _MODEL),
    # TGI server/text_generation_server/utils/hub.py weight_files()
    Signature(re.compile(r"Please run `text-generation-server download-weights"),
              "model-missing", _MODEL),
    # llama.cpp src/llama.cpp llama_model_load(): "%s: error loading model: %s" (a
    # missing file, an unknown architecture); Ollama's runner prints the same
    Signature(re.compile(r"error loading model: "), "model-load",
              "the server could not load the model file: the line says why (a wrong path, "
              "a format or architecture this build does not know)"),
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
    # SGLang python/sglang/srt/entrypoints/engine.py: the launcher's "Initialization
    # failed. Please see the error messages above.", "Rank {i} scheduler is dead. Please
    # check if there are relevant logs." (then its EOFError's traceback) and its SIGQUIT
    # handler's "Received sigquit from a child process. It usually means the child
    # failed."
    re.compile(r"Please see the error messages above"),
    re.compile(r"scheduler is dead\. Please check if there are relevant logs"),
    re.compile(r"Received sigquit from a child process"),
    # TGI launcher/src/main.rs: "Shard {rank} failed to start" after the shard's stderr
    re.compile(r"Shard \d+ failed to start"),
    # llama.cpp tools/server: "%s: exiting due to model loading error" after the cause
    re.compile(r"exiting due to model loading error"),
    # Ollama llm/llama_server.go: "model runner has unexpectedly stopped, this may be due
    # to resource limitations or an internal error, check ollama server logs for details"
    re.compile(r"model runner has unexpectedly stopped"),
)
