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


# The tail of a real vLLM 0.32 (CPU build) started with --max-model-len 100000 on a model
# of 512 positions, as the lab's journal holds it: the summary quoted pydantic's footer.
PYDANTIC_TAIL = [
    "(APIServer pid=4501) INFO 12-01 10:00:01 [utils.py:253] non-default args: {...}",
    "Traceback (most recent call last):",
    '  File "/opt/v/bin/vllm", line 8, in <module>',
    "    sys.exit(main())",
    '  File "/opt/v/lib/python3.11/site-packages/pydantic/_internal/_dataclasses.py", '
    "line 121, in __init__",
    "    s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)",
    "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
    "  Value error, User-specified max_model_len (100000) is greater than the derived "
    "max_model_len (max_position_embeddings=512.0 or model_max_length=None in model's "
    "config.json). [type=value_error, input_value=ArgsKwargs((), {...}), "
    "input_type=ArgsKwargs]",
    "    For further information visit https://errors.pydantic.dev/2.14/v/value_error",
]


def test_a_python_servers_death_is_explained_by_its_cause_not_the_last_line() -> None:
    f = failure(PYDANTIC_TAIL)
    assert f is not None and f.kind == "exception"
    assert f.line.startswith("Value error, User-specified max_model_len (100000)")
    plain = ["INFO starting", "Traceback (most recent call last):",
             '  File "x.py", line 1, in <module>', "ModuleNotFoundError: No module named 'vllm'",
             "INFO shutting down"]
    g = failure(plain)
    assert g is not None and g.line == "ModuleNotFoundError: No module named 'vllm'"
    assert failure(["INFO fine", "WARNING a warning"]) is None  # no traceback: no cause
