"""TensorRT-LLM's ``trtllm-serve`` with tensor parallelism, as its sources build it
(2026-12):

- tensorrt_llm/llmapi/mpi_session.py ``MpiPoolSession``: ranks through mpi4py's
  ``MPIPoolExecutor``; mpi4py/futures/_lib.py ``client_spawn`` calls ``MPI_Comm_spawn``
  of ``sys.executable -m mpi4py.futures.server`` (``get_spawn_module``).
- Open MPI answers a singleton's spawn by starting its daemon ``orted`` (``prted`` in
  Open MPI 5) in a process group of its own, which forks the ranks in rank order; they
  stay in its group (ai-dynamo PR #7122: killing trtllm-serve's group misses them).
- Nothing is titled: the ranks read as ``python -m mpi4py.futures.server``.

Words: ``trtllm-serve M --tp_size N`` (MiB per rank in FAKE_MIB).
"""

from __future__ import annotations

import os
import subprocess
import sys

from standins.base import forever, hold, say


def serve(words: list[str]) -> None:
    tp = int(words[words.index("--tp_size") + 1]) if "--tp_size" in words else 1
    here = os.path.dirname(os.path.abspath(sys.argv[0]))
    subprocess.Popen(["orted", "--hnp-uri", "1.0;tcp://127.0.0.1:1", "-np", str(tp)],
                     process_group=0, env={**os.environ, "PYTHONPATH": here})
    say("INFO:     Application startup complete.")
    forever()


def orted(words: list[str]) -> None:
    n = int(words[words.index("-np") + 1])
    for rank in range(n):
        subprocess.Popen([sys.executable, "-m", "mpi4py.futures.server"],
                         env={**os.environ, "OMPI_COMM_WORLD_RANK": str(rank)})
    forever()


def rank() -> None:
    r = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    hold(r, int(os.environ.get("FAKE_MIB", "1000")))
    say(f"[TRT-LLM] [RANK {r}] [I] worker ready")
    forever()


def main(program: str) -> None:
    (serve if program == "trtllm-serve" else orted)(sys.argv[1:])
