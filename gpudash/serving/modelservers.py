"""Which systemd units on a host are model servers, and the port each listens on.

Pure functions of what ``systemctl show`` prints (host text: parsed, never run). A unit
is a model server when its ExecStart runs a known server (vLLM, SGLang, TGI, TensorRT-LLM,
llama.cpp, Ollama, Triton) or its name matches one of the operator's globs
(``models = ["vllm-*", "sglang@*"]`` in config.toml).
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections.abc import Iterable, Sequence

from gpudash.record import record

# (kind, what in ExecStart's argv says so, the port the server listens on by default)
_SERVERS: tuple[tuple[str, re.Pattern[str], int | None], ...] = (
    ("vllm", re.compile(r"(?:^|\s)(?:\S*/)?vllm\s+serve\b|\bvllm\.entrypoints\b"), 8000),
    ("sglang", re.compile(r"\bsglang\.launch_server\b|(?:^|\s)(?:\S*/)?sglang\s+serve\b"),
     30000),
    ("tgi", re.compile(r"(?:^|\s)(?:\S*/)?text-generation-launcher\b"), 80),
    ("trtllm", re.compile(r"(?:^|\s)(?:\S*/)?trtllm-serve\b"), 8000),
    ("llama.cpp", re.compile(r"(?:^|\s)(?:\S*/)?llama-server\b"), 8080),
    ("ollama", re.compile(r"(?:^|\s)(?:\S*/)?ollama\s+serve\b"), 11434),
    ("triton", re.compile(r"(?:^|\s)(?:\S*/)?tritonserver\b"), 8000),
)
_PORT_FLAGS = ("--port", "-p", "--http-port")
# the images of the servers whose GET /health answers 200 once they serve (vLLM, SGLang,
# TGI, TensorRT-LLM, llama.cpp's server); Ollama's and Triton's have other routes
_HEALTH_IMAGES = re.compile(
    r"vllm|sglang|text-generation-inference|tensorrt[-_]llm|trtllm|llama\.cpp", re.I)


def answers_health(image: str | None) -> bool:
    """A container of ``image`` (host text) runs a server whose ``/health`` proves it
    serves: its start waits for it. Any other image is proven running, not ready."""
    return bool(image) and _HEALTH_IMAGES.search(image or "") is not None
SHOW_PROPERTIES = ("Id", "Description", "ActiveState", "UnitFileState", "Restart",
                   "ExecStart")


@record
class ModelUnit:
    """A unit that runs a model server, running or not (host text, shown literally)."""

    name: str
    description: str | None
    active_state: str
    unit_file_state: str
    exec_start: str
    kind: str  # vllm, sglang, ... or "config" (named by a glob, server not recognised)
    port: int | None
    restart: str | None = None


def server_kind(exec_start: str) -> str | None:
    """The known server this command line runs, if any."""
    for kind, pattern, _port in _SERVERS:
        if pattern.search(exec_start):
            return kind
    return None


def port_of(exec_start: str, kind: str | None) -> int | None:
    """``--port N`` (or ``--port=N``) from the command line, else the server's default."""
    try:
        words = shlex.split(exec_start)
    except ValueError:
        words = exec_start.split()
    for i, word in enumerate(words):
        value: str | None = None
        if word in _PORT_FLAGS and i + 1 < len(words):
            value = words[i + 1]
        elif word.startswith("--port="):
            value = word.split("=", 1)[1]
        if value is not None and value.isdigit() and 0 < int(value) < 65536:
            return int(value)
    return next((port for k, _p, port in _SERVERS if k == kind), None)


def exec_argv(value: str) -> str:
    """The command line out of ``systemctl show``'s ExecStart value
    (``{ path=/usr/bin/python3 ; argv[]=/usr/bin/python3 -m vllm... ; ignore_errors=no ... }``)."""
    m = re.search(r"argv\[\]=(.*?)(?: ; [a-z_]+=|\s*}\s*$)", value)
    return (m.group(1) if m else value).strip()


def parse_show(text: str) -> list[dict[str, str]]:
    """``systemctl show -p A,B -- U1 U2``: one dict per unit (blocks between blank lines)."""
    out: list[dict[str, str]] = []
    block: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if block:
                out.append(block)
            block = {}
            continue
        key, sep, value = line.partition("=")
        if sep and key not in block:
            block[key] = value
    if block:
        out.append(block)
    return out


def model_units(blocks: Iterable[dict[str, str]], patterns: Sequence[str] = ()
                ) -> tuple[ModelUnit, ...]:
    """The model-server units among ``systemctl show`` blocks, sorted by name."""
    found: dict[str, ModelUnit] = {}
    for b in blocks:
        name = b.get("Id", "")
        if not name.endswith(".service") or name.endswith("@.service"):
            continue
        cmd = exec_argv(b.get("ExecStart", ""))
        kind = server_kind(cmd)
        if kind is None and not any(fnmatch.fnmatchcase(name, p)
                                    or fnmatch.fnmatchcase(name.removesuffix(".service"), p)
                                    for p in patterns):
            continue
        found[name] = ModelUnit(
            name, b.get("Description") or None, b.get("ActiveState", ""),
            b.get("UnitFileState", ""), cmd, kind or "config", port_of(cmd, kind),
            b.get("Restart") or None)
    return tuple(found[n] for n in sorted(found))


def unit_names(list_units: str, list_unit_files: str) -> list[str]:
    """Service names from ``systemctl list-units --all`` and ``list-unit-files`` (plain,
    no legend): loaded instances of templates come from the first, disabled units from
    the second; template files themselves (``vllm@.service``) are not units to start."""
    names: list[str] = []
    for text in (list_units, list_unit_files):
        for line in text.splitlines():
            words = line.split()
            word = next((w for w in words if w.endswith(".service")), None)
            if word and not word.endswith("@.service") and word not in names:
                names.append(word)
    return names
