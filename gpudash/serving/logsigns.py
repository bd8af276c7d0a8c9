"""What a model server's log says: loading progress, readiness, and why it failed.

Pure functions of log lines (host text: read, never run). The signatures are the ones
operators meet (``shared/MODEL-SERVERS.md``): vLLM's startup memory check, CUDA out of
memory, NCCL errors, and the "Engine core initialization failed" wrapper whose cause is
an earlier line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# tqdm as vLLM prints it: "Loading safetensors checkpoint shards:  37% Completed | 24/64 [..]"
_SHARDS = re.compile(
    r"Loading safetensors checkpoint shards:\s*(\d{1,3})% Completed \| (\d+)/(\d+)"
)
_LOADED = re.compile(r"Model loading took ([\d.]+) ?GiB and ([\d.]+) ?s")
_READY_LINES = (
    "Application startup complete",
    "The server is fired up and ready to roll",  # SGLang
    "Starting Webserver",  # TGI
)


@dataclass(frozen=True, slots=True)
class LoadProgress:
    percent: int
    done: int
    total: int

    def describe(self) -> str:
        return f"{self.percent}% of checkpoint shards ({self.done}/{self.total})"


@dataclass(frozen=True, slots=True)
class Failure:
    """The line that explains why a server did not come up, and what it means."""

    kind: str  # memory-held | cuda-oom | nccl | engine-init | exception | exited
    line: str  # the host's line, as it was (escape it before showing)
    advice: str


_SIGNATURES: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"Free memory on device .* is less than desired GPU memory utilization"),
     "memory-held",
     "another process still holds GPU memory: reclaim it (or lower "
     "--gpu-memory-utilization)"),
    (re.compile(r"No available memory for the cache blocks|larger than the available KV cache"),
     "memory-held", "not enough GPU memory left for the KV cache"),
    (re.compile(r"CUDA out of memory|torch\.OutOfMemoryError|cudaErrorMemoryAllocation"),
     "cuda-oom", "the model does not fit in the GPU memory that is free"),
    (re.compile(r"NCCL error|unhandled (?:system|cuda) error|ncclInternalError"),
     "nccl", "NCCL failed between the GPUs: check NCCL_DEBUG=INFO output and the GPUs' peers"),
)
_WRAPPER = re.compile(r"Engine core initialization failed")
_CAUSE = re.compile(r"(Error|Exception|error:|ERROR)")
# vLLM prefixes what its processes print: "(EngineCore pid=3703) ", "(APIServer pid=1) "
_PREFIX = re.compile(r"^\((?:\w+) pid=\d+\)\s?")
_TRACEBACK = re.compile(r"Traceback \(most recent call last\):")
# the exception line that ends a traceback: "ValueError: ...", "pkg.mod.SomeError: ..."
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt"
                        r"|Warning|Failure)\b(?::|$)")
# pydantic's detail under "ValidationError: N validation error(s) for X": the cause
_PYDANTIC = re.compile(r"^\s*(?:Value error|Assertion failed|Input should|Field required|"
                       r"Extra inputs are not permitted)\b")


def load_progress(lines: Iterable[str]) -> LoadProgress | None:
    """The latest checkpoint-loading progress the log shows, if any."""
    last: LoadProgress | None = None
    for line in lines:
        m = _SHARDS.search(line)
        if m:
            last = LoadProgress(min(100, int(m.group(1))), int(m.group(2)), int(m.group(3)))
        elif _LOADED.search(line) and last is not None:
            last = LoadProgress(100, last.total, last.total)
    return last


def says_ready(lines: Iterable[str]) -> bool:
    """Whether the log says the server finished starting (the health check decides)."""
    return any(marker in line for line in lines for marker in _READY_LINES)


def failure(lines: Sequence[str]) -> Failure | None:
    """The line that explains a failed start, most specific first; the wrapper's cause is
    the last error line above it."""
    for pattern, kind, advice in _SIGNATURES:
        for line in reversed(lines):
            if pattern.search(line):
                return Failure(kind, line.strip(), advice)
    for i in range(len(lines) - 1, -1, -1):
        if _WRAPPER.search(lines[i]):
            cause = next((lines[j] for j in range(i - 1, -1, -1) if _CAUSE.search(lines[j])),
                         lines[i])
            return Failure("engine-init", cause.strip(),
                           "the engine failed to start; the line above is its cause")
    died = _exception(lines)
    if died is not None:
        return Failure("exception", died.strip(),
                       "the server stopped on this error: fix what it names (its arguments, "
                       "its model, its environment) and start it again")
    return None


def _exception(lines: Sequence[str]) -> str | None:
    """The line that says why a Python program died: the exception line of its last
    traceback, or, for pydantic's ValidationError, the detail line under it ("Value
    error, ..."), not its "For further information visit ..." footer."""
    start = None
    for i in range(len(lines) - 1, -1, -1):
        if _TRACEBACK.search(lines[i]):
            start = i
            break
    if start is None:
        return None
    bare = [_PREFIX.sub("", line) for line in lines[start + 1:]]
    for i, line in enumerate(bare):
        if _EXCEPTION.match(line):
            detail = next((d for d in bare[i + 1:i + 6] if _PYDANTIC.match(d)), None)
            return detail.strip() if detail is not None else line.strip()
    return None
