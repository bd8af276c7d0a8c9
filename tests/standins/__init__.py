"""Faithful stand-ins for the model servers that cannot run here (issue 34): each
reproduces its server's process tree as the server's own source builds it. ``install``
writes the programs (``sglang``, ``text-generation-launcher``, ``ollama``, ...) into a
directory, so that their command lines read as the real ones do."""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# program name -> stand-in module
PROGRAMS = {
    "sglang": "sglang", "text-generation-launcher": "tgi", "text-generation-server": "tgi",
    "ollama": "ollama", "trtllm-serve": "trtllm", "orted": "trtllm",
    "llama-server": "llamacpp", "llama-swap": "llamacpp",
}


def install(bin_dir: Path, python: str = sys.executable, lib: str = str(HERE.parent)) -> Path:
    """Write the stand-in programs into ``bin_dir`` (and mpi4py's ``futures.server``,
    which the MPI daemon runs as ``python -m``); returns ``bin_dir``. ``python`` runs them
    and ``lib`` is the directory holding this package, as the machine that runs them sees
    both (a lab host: its own python3 and a copy every user can read)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for program, module in PROGRAMS.items():
        path = bin_dir / program
        path.write_text(f"#!{python}\nimport sys\n"
                        f"sys.path.insert(0, {lib!r})\n"
                        f"from standins import {module}\n{module}.main({program!r})\n")
        path.chmod(0o755)
    futures = bin_dir / "mpi4py" / "futures"
    futures.mkdir(parents=True, exist_ok=True)
    (bin_dir / "mpi4py" / "__init__.py").write_text("")
    (futures / "__init__.py").write_text("")
    (futures / "server.py").write_text(
        f"import sys\nsys.path.insert(0, {lib!r})\n"
        "from standins import trtllm\ntrtllm.rank()\n")
    return bin_dir


def env(bin_dir: Path, base: dict[str, str]) -> dict[str, str]:
    """``base`` (the stand-in driver's environment) with the programs first on PATH."""
    e = dict(base)
    e["PATH"] = f"{bin_dir}{os.pathsep}{e.get('PATH', '')}"
    return e
