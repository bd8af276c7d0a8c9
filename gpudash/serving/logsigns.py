"""What a model server's log says: loading progress, readiness, and why it failed.

Pure functions of log lines (host text: read, never run). The cause of a failure is a
server's own failure line (``failurelines``: vLLM's startup memory check, CUDA out of
memory, NCCL errors, a port taken, a model missing; SGLang's, TGI's, Ollama's,
TensorRT-LLM's, llama.cpp's), else the exception line of the traceback that ended a
process (``tracebacks``), never a source line the traceback quotes. A wrapper ("Engine
core initialization failed. See root cause above") points to the account before it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from gpudash.record import record
from gpudash.serving.failurelines import SIGNATURES, WRAPPERS
from gpudash.serving.tracebacks import Traceback, bare, quoted_source, tracebacks

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


@record
class LoadProgress:
    percent: int
    done: int
    total: int

    def describe(self) -> str:
        return f"{self.percent}% of checkpoint shards ({self.done}/{self.total})"


@record
class Failure:
    """The line that explains why a server did not come up, and what it means."""

    # memory-held | cuda-oom | nccl | port-in-use | model-missing | model-load |
    # engine-init (a wrapper's cause) | exception
    kind: str
    line: str  # the host's line without the server's prefixes (escape it before showing)
    advice: str


_WRAPPED = ("a part of the server failed to start and the server stopped with it: this is "
            "that part's error")
_DIED = ("the server stopped on this error: fix what it names (its arguments, its model, "
         "its environment) and start it again")
# a line that reads as an error, for a wrapper with no traceback above it
_ERROR_LIKE = re.compile(r"(Error|Exception|error:|ERROR)")
MAX_HOPS = 8  # wrappers followed back, at most


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
    """The line that explains a failed start: a server's own failure line (its signature,
    most specific first), else the exception that ended a process; a wrapper that points
    above itself ("See root cause above") is followed to the cause it points at. Never a
    source line a traceback quotes."""
    found = tracebacks(lines)
    source = quoted_source(lines, found)
    for sig in SIGNATURES:
        for i in range(len(lines) - 1, -1, -1):
            if i not in source and sig.pattern.search(lines[i]):
                return Failure(sig.kind, bare(lines[i]).strip(), sig.advice)
    return _cause(lines, found, source)


def _cause(lines: Sequence[str], found: Sequence[Traceback], source: set[int]
           ) -> Failure | None:
    """From the end of the log back: the last traceback's exception, unless a wrapper
    reported it (a wrapper line after it, or its own exception line one, or one just
    before it): then the account above that wrapper, and so on."""
    wrappers = [i for i, line in enumerate(lines)
                if i not in source and any(p.search(line) for p in WRAPPERS)]
    pos = len(lines)
    first: int | None = None  # the wrapper met first (the latest in the log)
    for _ in range(MAX_HOPS):
        before = [t for t in found if t.end < pos]
        last = before[-1] if before else None
        previous_end = before[-2].end if len(before) > 1 else -1
        w = max((i for i in wrappers if i < pos), default=None)
        if w is not None and (last is None or w > last.end):
            pos = w  # a wrapper after the last traceback: its cause is above it
        elif last is not None and w is not None and w > previous_end:
            pos = last.start  # the wrapper's own traceback: the cause is before it
        elif last is not None:
            if first is None:
                return Failure("exception", last.exception, _DIED)
            return Failure("engine-init", last.exception, _WRAPPED)
        else:
            break
        first = w if first is None else first
    if first is None:
        return None
    above = next((bare(lines[i]).strip() for i in range(pos - 1, -1, -1)
                  if i not in source and i not in wrappers
                  and _ERROR_LIKE.search(lines[i])), None)
    return Failure("engine-init", above or bare(lines[first]).strip(), _WRAPPED)
