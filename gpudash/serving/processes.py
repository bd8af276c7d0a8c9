"""What a model server's processes are, by the titles and command lines they give themselves.

Servers name their processes on purpose, so that an operator can tell them apart: the
names are evidence, not guesses. What each server builds (checked against its source,
2026-12; the stand-ins in tests/standins/ copy these trees):

- **vLLM** (V1): the API server (``vllm serve ...``) forks ``VLLM::EngineCore[_DP<d>]``,
  which forks ``VLLM::Worker[_DP<d>][_PP<p>]_TP<t>`` (``VLLM::Worker`` at world size 1);
  ``VLLM::APIServer_<n>`` and ``VLLM::DPCoordinator`` beside them with several API servers
  or data parallelism. ``VLLM`` is ``VLLM_PROCESS_NAME_PREFIX`` (vllm/utils/system_utils.py
  ``set_process_title``: ``f"{prefix}::{name}"``), any word an operator sets.
- **SGLang**: the launcher (``python -m sglang.launch_server``, ``sglang serve``) forks
  ``sglang::scheduler[_DP<d>][_PP<p>][_TP<t>][_EP<e>]`` (they hold the memory; under
  ``sglang::data_parallel_controller`` with ``--dp``), ``sglang::detokenizer`` and, with
  several HTTP workers, ``sglang::tokenizer_worker:<pid>``
  (python/sglang/srt/managers/scheduler.py ``run_scheduler_process``,
  data_parallel_controller.py, detokenizer_manager.py, multi_tokenizer_mixin.py).
- **TGI**: ``text-generation-launcher`` runs ``text-generation-server download-weights
  <model>``, then one ``text-generation-server serve <model> --uds-path <path> [--sharded]``
  per rank, each in its own process group (launcher/src/main.rs ``shard_manager``:
  ``Command::new("text-generation-server")...process_group(0)``).
- **Ollama**: ``ollama serve`` runs its runner: ``ollama runner [--ollama-engine] --model
  <blob> --port N`` (llm/server.go ``StartRunner`` until 2026-05), ``<lib>/ollama/
  llama-server --model <blob> --port N`` since (llm/llama_server.go ``startLlamaServer``),
  ``ollama_llama_server`` before 2025. Nothing else starts them.
- **TensorRT-LLM**: ``trtllm-serve`` spawns its ranks through MPI (mpi4py's
  ``MPIPoolExecutor``): Open MPI's ``orted`` (``prted`` in Open MPI 5) in its own process
  group, under it ``python -m mpi4py.futures.server`` per rank (mpi4py/futures/_lib.py
  ``get_spawn_module``). TensorRT-LLM titles none of them.
- **llama.cpp**: one ``llama-server``: API and GPU in one process, often under a wrapper
  (llama-swap, a shell script).

``comm`` (``/proc/PID/comm``, the name nvidia-smi shows) is cut at 15 bytes
(``VLLM::EngineCor``): a name of that length is read as the start of a title. Pure
functions of host text (read, never run).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum
from typing import Protocol

from gpudash.record import record

COMM_LEN = 15  # TASK_COMM_LEN - 1: the kernel cuts comm there


class Role(StrEnum):
    API = "api server"  # what clients talk to; its children die with it only by choice
    ENGINE = "engine"  # between the API server and the GPU holders (vLLM's EngineCore)
    WORKER = "worker"  # holds a GPU's memory for the server
    WHOLE = "whole server"  # API and GPU memory in one process (llama.cpp's llama-server)


@record
class ServerProcess:
    server: str  # vLLM, SGLang, TGI, Ollama, TRT-LLM, MPI, llama.cpp
    role: Role
    label: str  # short, for the holders table
    # the server whose API process alone starts this one (TGI's shards, Ollama's runner):
    # under anything else it was re-parented. None: a user's script may start it too
    # (vLLM's and SGLang's engines run inside ``LLM(...)``/``sgl.Engine(...)``).
    born_of: str | None = None


_WORD = r"[A-Za-z0-9_.\-]+"  # VLLM_PROCESS_NAME_PREFIX: any word the operator sets
_RANKS = r"((?:_(?:DP|PP|TP|EP)\d+)*)"  # _DP0_TP3: SGLang's and vLLM's rank suffixes


def _ranks(suffix: str | None) -> str:
    """``_DP0_TP3`` -> ``DP0 TP3 `` (for a label); DP/PP/EP shown only when not 0."""
    parts = re.findall(r"(DP|PP|TP|EP)(\d+)", suffix or "")
    shown = [f"{k}{n}" for k, n in parts if k == "TP" or n != "0"]
    return "".join(f"{s} " for s in shown)


class _Fn:
    """A label made of the ranks a title carries (``_DP0_TP3``)."""

    def __init__(self, template: str, group: int = 1) -> None:
        self.template, self.group = template, group

    def __call__(self, m: re.Match[str]) -> str:
        return self.template.format(_ranks(m.group(self.group))).replace("  ", " ")


# (pattern on the title or command line, server, role, label or how to make it, born_of)
_KNOWN: tuple[tuple[re.Pattern[str], str, Role, str | _Fn, str | None], ...] = (
    # vLLM, any prefix; ray's ``ray::`` titles are Ray's own
    (re.compile(rf"(?:^|\s)(?!ray::){_WORD}::Worker{_RANKS}(?![A-Za-z])"), "vLLM", Role.WORKER,
     _Fn("vLLM {}worker"), None),
    (re.compile(r"(?:^|\s)VllmWorker(?: (TP\d+))?\b"), "vLLM", Role.WORKER,
     _Fn("vLLM {}worker"), None),
    (re.compile(rf"(?:^|\s){_WORD}::EngineCore{_RANKS}"), "vLLM", Role.ENGINE,
     _Fn("vLLM {}engine core"), None),
    (re.compile(rf"(?:^|\s){_WORD}::DPCoordinator\b"), "vLLM", Role.ENGINE,
     "vLLM DP coordinator", None),
    (re.compile(rf"(?:^|\s){_WORD}::APIServer(?:_\d+)?\b"), "vLLM", Role.API,
     "vLLM API server", None),
    # SGLang
    (re.compile(rf"(?:^|\s)sglang::scheduler{_RANKS}"), "SGLang", Role.WORKER,
     _Fn("SGLang {}scheduler"), None),
    (re.compile(r"(?:^|\s)sglang::data_parallel_controller\b"), "SGLang", Role.ENGINE,
     "SGLang DP controller", None),
    (re.compile(r"(?:^|\s)sglang::detokenizer"), "SGLang", Role.ENGINE,
     "SGLang detokenizer", None),
    (re.compile(r"(?:^|\s)sglang::tokenizer_worker"), "SGLang", Role.ENGINE,
     "SGLang tokenizer worker", None),
    # TGI: download-weights holds no GPU; it is the launcher's child all the same
    (re.compile(r"(?:^|/|\s)text-generation-server\s+download-weights\b"), "TGI", Role.ENGINE,
     "TGI weights download", "TGI"),
    (re.compile(r"(?:^|/|\s)text-generation-server\b"), "TGI", Role.WORKER, "TGI shard",
     "TGI"),
    # Ollama's runners, old and new
    (re.compile(r"(?:^|/|\s)ollama\s+runner\b|(?:^|/|\s)ollama_llama_server\b"
                r"|/ollama/(?:\S+/)?llama-server\b"), "Ollama", Role.WORKER, "Ollama runner",
     "Ollama"),
    # TensorRT-LLM's ranks, through MPI
    (re.compile(r"(?:^|/|\s)(?:orted|prted)\b"), "MPI", Role.ENGINE, "MPI daemon", None),
    (re.compile(r"\s-m\s+mpi4py\.futures\.server\b"), "MPI", Role.WORKER, "MPI rank", None),
    # the API servers and launchers, by their command lines
    (re.compile(r"(?:^|\s|/)vllm(?:\.entrypoints\b|\s+serve\b)"), "vLLM", Role.API,
     "vLLM server", None),
    (re.compile(r"\bsglang\.launch_server\b|(?:^|\s|/)sglang\s+serve\b"), "SGLang", Role.API,
     "SGLang server", None),
    (re.compile(r"(?:^|/|\s)text-generation-launcher\b"), "TGI", Role.API, "TGI launcher",
     None),
    (re.compile(r"(?:^|/|\s)ollama\s+serve\b"), "Ollama", Role.API, "Ollama server", None),
    (re.compile(r"(?:^|/|\s)trtllm-serve\b"), "TRT-LLM", Role.API, "TRT-LLM server", None),
    (re.compile(r"(?:^|/|\s)llama-server\b"), "llama.cpp", Role.WHOLE, "llama.cpp server",
     None),
)
# Titles as the kernel cuts them in comm: the start of the title after ``::`` -> the title
_CUT_TITLES = (
    "EngineCore", "Worker", "DPCoordinator", "APIServer",  # vLLM, any prefix
)
_CUT_SGLANG = ("scheduler", "data_parallel_controller", "detokenizer", "tokenizer_worker")
# Friendly names of other well-known GPU processes (no role: nobody's orphan by title).
_OTHERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"ray::RayWorkerWrapper"), "Ray worker"),
    (re.compile(r"multiprocessing\.spawn import spawn_main|from multiprocessing"), "mp child"),
    (re.compile(r"ipykernel_launcher"), "Jupyter kernel"),
)


def _uncut(name: str) -> str | None:
    """The title a 15-byte comm is the start of (``VLLM::EngineCor`` ->
    ``VLLM::EngineCore``), or None. Only a name the kernel cut, with ``::`` in it."""
    if len(name.encode()) != COMM_LEN or "::" not in name:
        return None
    prefix, _, rest = name.partition("::")
    if not rest:
        return None
    titles = _CUT_SGLANG if prefix == "sglang" else _CUT_TITLES
    for title in titles:
        if title.startswith(rest) or rest.startswith(title):
            return f"{prefix}::{title}{rest[len(title):]}" if rest.startswith(title) \
                else f"{prefix}::{title}"
    return None


def server_process(cmdline: str, name: str = "") -> ServerProcess | None:
    """The model-server process this is, by its title (``cmdline`` as the host reads it:
    a title a server set replaces it) or its command line, else its ``comm`` (cut at 15
    bytes); None: not one we know."""
    for text in (cmdline, name, _uncut(name) if not cmdline else None):
        if not text:
            continue
        for pattern, server, role, label_of, born_of in _KNOWN:
            m = pattern.search(text)
            if m:
                said = label_of if isinstance(label_of, str) else label_of(m)
                return ServerProcess(server, role, said, born_of)
        if cmdline:
            return None  # a command line says what it is: its comm is not asked
    return None


def label(cmdline: str, name: str = "") -> str | None:
    """A short human label for well-known GPU processes, or None."""
    known = server_process(cmdline, name)
    if known is not None:
        return known.label
    text = cmdline or name
    for pattern, text_label in _OTHERS:
        if pattern.search(text):
            return text_label
    return None


class _Proc(Protocol):
    @property
    def pid(self) -> int: ...
    @property
    def ppid(self) -> int | None: ...
    @property
    def start_ticks(self) -> int | None: ...
    @property
    def cmdline(self) -> str: ...
    @property
    def name(self) -> str: ...


def tree_labels(procs: Iterable[_Proc]) -> dict[int, str]:
    """Labels only the tree can tell (pid -> label): the ranks an MPI daemon spawned,
    numbered in the order it started them (Open MPI forks a job's ranks in rank order),
    and called TensorRT-LLM's where ``trtllm-serve`` is above them."""
    listed = list(procs)
    by_pid = {p.pid: p for p in listed}
    ranks: dict[int, list[_Proc]] = {}
    for p in listed:
        known = server_process(p.cmdline, p.name)
        if known is not None and known.label == "MPI rank" and p.ppid is not None:
            ranks.setdefault(p.ppid, []).append(p)
    out: dict[int, str] = {}
    for daemon, group in ranks.items():
        server = "MPI"
        up, seen = by_pid.get(daemon), 0
        while up is not None and seen < 64:
            above = server_process(up.cmdline, up.name)
            if above is not None and above.server == "TRT-LLM":
                server = "TRT-LLM"
                break
            up, seen = by_pid.get(up.ppid) if up.ppid is not None else None, seen + 1
        group.sort(key=lambda p: (p.start_ticks or 0, p.pid))
        for n, p in enumerate(group):
            out[p.pid] = f"{server} rank {n}"
    return out
