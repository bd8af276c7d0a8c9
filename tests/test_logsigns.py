"""Reading a model server's log: progress, readiness, and the line that explains a failure."""

from __future__ import annotations

from gpudash.serving.logsigns import failure, load_progress, says_ready

VLLM_LOADING = [
    "INFO 11-30 12:00:01 [api_server.py:1024] vLLM API server version 0.11.0",
    "Loading safetensors checkpoint shards:   0% Completed | 0/64 [00:00<?, ?it/s]",
    "Loading safetensors checkpoint shards:  37% Completed | 24/64 [00:41<01:09,  1.73s/it]",
]
FREE_MEMORY = (
    "ValueError: Free memory on device (1.36/95.59 GiB) on startup is less than desired GPU "
    "memory utilization (0.9, 86.03 GiB). Decrease GPU memory utilization or reduce GPU "
    "memory used by other processes."
)


def test_progress_is_the_latest_shard_line_and_complete_after_loading() -> None:
    p = load_progress(VLLM_LOADING)
    assert p is not None and (p.percent, p.done, p.total) == (37, 24, 64)
    assert p.describe() == "37% of checkpoint shards (24/64)"
    done = load_progress([*VLLM_LOADING, "Model loading took 94.31 GiB and 18.20 seconds"])
    assert done is not None and done.percent == 100
    assert load_progress(["nothing here"]) is None


def test_ready_markers_of_vllm_sglang_and_tgi() -> None:
    assert says_ready(["INFO:     Application startup complete."])
    assert says_ready(["The server is fired up and ready to roll!"])
    assert not says_ready(VLLM_LOADING)


def test_vllms_free_memory_check_names_the_held_memory() -> None:
    f = failure([*VLLM_LOADING[:1], FREE_MEMORY,
                 "RuntimeError: Engine core initialization failed. See root cause above. "
                 "Failed core proc(s): {'EngineCore_0': 1}"])
    assert f is not None and f.kind == "memory-held" and f.line == FREE_MEMORY
    assert "still holds GPU memory" in f.advice


def test_the_engine_wrapper_points_at_the_error_above_it() -> None:
    f = failure(["INFO starting", "ERROR worker: KeyError: 'model.layers.61.mlp'",
                 "INFO cleaning up",
                 "RuntimeError: Engine core initialization failed. See root cause above."])
    assert f is not None and f.kind == "engine-init"
    assert f.line == "ERROR worker: KeyError: 'model.layers.61.mlp'"


def test_cuda_oom_and_nccl() -> None:
    oom = failure(["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"])
    assert oom is not None and oom.kind == "cuda-oom"
    nccl = failure(["RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO)"])
    assert nccl is not None and nccl.kind == "nccl"
    assert failure(["all good"]) is None
