"""What a model server's processes are, by the titles and command lines they give themselves.

vLLM (V1) runs three levels deep: the API server (``vllm serve ...``, a unit's MainPID)
forks ``VLLM::EngineCore``, which forks the workers (``VLLM::Worker`` with world size 1,
``VLLM::Worker_TP<n>`` with tensor parallelism), all in the API server's process group.
SGLang's launcher forks ``sglang::scheduler*`` (they hold the GPU memory) and a
detokenizer; TGI's launcher runs ``text-generation-server`` shards. Servers set these
titles on purpose, so that an operator can tell them apart: they are evidence, not
guesses. Pure functions of host text (read, never run).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class Role(StrEnum):
    API = "api server"  # what clients talk to; its children die with it only by choice
    ENGINE = "engine"  # between the API server and the workers (vLLM's EngineCore)
    WORKER = "worker"  # holds a GPU's memory for the server


@dataclass(frozen=True, slots=True)
class ServerProcess:
    server: str  # vLLM, SGLang, TGI
    role: Role
    label: str  # short, for the holders table


# (pattern on the process title or command line, server, role, label template: {0} is the
# first number the pattern caught, e.g. the tensor-parallel rank)
_KNOWN: tuple[tuple[re.Pattern[str], str, Role, str], ...] = (
    (re.compile(r"(?:^|\s)(?:VLLM::Worker_TP(\d+)|VllmWorker TP(\d+))"), "vLLM", Role.WORKER,
     "vLLM TP{0} worker"),
    (re.compile(r"(?:^|\s)(?:VLLM::Worker\b|VllmWorker\b)"), "vLLM", Role.WORKER,
     "vLLM worker"),
    (re.compile(r"(?:^|\s)VLLM::EngineCore"), "vLLM", Role.ENGINE, "vLLM engine core"),
    (re.compile(r"(?:^|\s)sglang::scheduler(?:_DP\d+)?(?:_TP(\d+))?"), "SGLang", Role.WORKER,
     "SGLang TP{0} scheduler"),
    (re.compile(r"(?:^|\s)sglang::detokenizer"), "SGLang", Role.ENGINE, "SGLang detokenizer"),
    (re.compile(r"(?:^|/|\s)text-generation-server\b"), "TGI", Role.WORKER, "TGI shard"),
    (re.compile(r"(?:^|\s|/)vllm(?:\.entrypoints\b|\s+serve\b)"), "vLLM", Role.API,
     "vLLM server"),
    (re.compile(r"\bsglang\.launch_server\b|(?:^|\s|/)sglang\s+serve\b"), "SGLang", Role.API,
     "SGLang server"),
    (re.compile(r"(?:^|/|\s)text-generation-launcher\b"), "TGI", Role.API, "TGI launcher"),
)
# Friendly names of other well-known GPU processes (no role: nobody's orphan by title).
_OTHERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"ray::RayWorkerWrapper"), "Ray worker"),
    (re.compile(r"multiprocessing\.spawn import spawn_main|from multiprocessing"), "mp child"),
    (re.compile(r"ipykernel_launcher"), "Jupyter kernel"),
)


def server_process(cmdline: str, name: str = "") -> ServerProcess | None:
    """The model-server process this is, by its title (``cmdline`` as the host reads it:
    a title a server set replaces it) or its command line; None: not one we know."""
    text = cmdline or name
    for pattern, server, role, template in _KNOWN:
        m = pattern.search(text)
        if m:
            if "{0}" in template:
                number = next((g for g in m.groups() if g is not None), None)
                template = template.replace(" TP{0}", "") if number is None else template
                return ServerProcess(server, role, template.format(number))
            return ServerProcess(server, role, template)
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
