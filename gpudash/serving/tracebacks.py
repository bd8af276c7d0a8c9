"""Python tracebacks in a server's log: where each one starts, which lines are source code
it quotes, and the exception line that ends it.

A model server's journal interleaves several processes (vLLM's API server, EngineCore and
workers each print), and a traceback can come twice: once through a logger
(``logger.exception``, every line behind the logger's prefix) and once bare on stderr as
the process dies. The source lines a traceback quotes (``    raise RuntimeError(``) are
code, never a cause: only its exception line is. Pure functions of host text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpudash.record import record

# vLLM's process prefix: "(EngineCore pid=3703) ", "(Worker_TP1 pid=7) ", "(APIServer pid=1) "
_PROCESS = re.compile(r"^\([\w.:-]+ pid=\d+\) ?")
# vLLM's logger (vllm/logger.py: "%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d]
# %(message)s", dates "%m-%d %H:%M:%S"): one space after "]", the message's own indent kept
_VLLM_LOG = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d"
                       r"(?:\.\d+)? \[[^\]]*\] ?")
# SGLang's logger (python/sglang/srt/utils: "[%(asctime)s%(prefix)s] %(message)s"):
# "[2026-02-27 15:27:13 TP0] "
_SGLANG_LOG = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^\]]*\] ?")
# SGLang logs a scheduler's death as "Scheduler hit an exception: Traceback (most recent
# call last):" (the traceback's text after its own message): the header ends the line
_HEADER = re.compile(r"(?:^|\s)Traceback \(most recent call last\):\s*$")
# The line that ends a traceback: a (dotted) exception class, then ": message" or nothing
# ("ValueError: ...", "pydantic_core._pydantic_core.ValidationError: 1 validation error",
# "KeyboardInterrupt"). Python writes it unindented, after the indented frames.
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?::(?:\s.*)?)?$")
# pydantic's detail under "ValidationError: N validation error(s) for X": the cause
_PYDANTIC = re.compile(r"^\s*(?:Value error|Assertion failed|Input should|Field required|"
                       r"Extra inputs are not permitted)\b")
# a frame ('  File "x.py", line 3, in f') or what Python prints under it (the source
# line, its ^^^^ markers), four spaces in
_FRAME = re.compile(r'^(?:  File "|    )')
MAX_FRAMES_LINES = 600  # a traceback longer than this without its exception line: cut off


def bare(line: str) -> str:
    """``line`` without the prefixes servers put before what a process printed (vLLM's
    process tag and logger, SGLang's logger); the message's own indent kept."""
    line = _PROCESS.sub("", line, count=1)
    line = _VLLM_LOG.sub("", line, count=1)
    return _SGLANG_LOG.sub("", line, count=1)


@record
class Traceback:
    start: int  # index of its "Traceback (most recent call last):" line
    end: int  # index of its exception line
    exception: str  # that line, bare; for pydantic, the detail line under it

    def contains(self, index: int) -> bool:
        return self.start <= index <= self.end


def tracebacks(lines: Sequence[str]) -> list[Traceback]:
    """Every traceback the lines hold whose exception line is there, in order of their
    exception lines. Lines of other processes between its frames are passed over."""
    plain = [bare(line) for line in lines]
    out: list[Traceback] = []
    for start, line in enumerate(plain):
        if not _HEADER.search(line):
            continue
        for i in range(start + 1, min(len(plain), start + 1 + MAX_FRAMES_LINES)):
            text = plain[i]
            if _HEADER.search(text):
                break  # a new traceback began before this one ended: it was cut off
            if not text or text[0].isspace() or not _EXCEPTION.match(text):
                continue  # a frame, its source line, its ^^^^, or another process's line
            detail = next((d for d in plain[i + 1:i + 6] if _PYDANTIC.match(d)), None)
            out.append(Traceback(start, i, (detail or text).strip()))
            break
    out.sort(key=lambda t: t.end)
    return out


def quoted_source(lines: Sequence[str], found: Sequence[Traceback]) -> set[int]:
    """The indices of the lines that are a traceback's frames and the source they quote
    (code, never a cause): inside each traceback found, and any line shaped like one,
    for a log whose tail starts, or is cut, in the middle of a traceback."""
    inside = {i for t in found for i in range(t.start, t.end)}
    return inside | {i for i, line in enumerate(lines) if _FRAME.match(bare(line))}
