"""The collector runs on a GPU host's own python3 (3.7 or later) with nothing installed:
it imports the standard library only, plus pynvml (sent along) and psutil when present."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import collector_run
import pytest

from gpudash.collector import hostside
from gpudash.protocol import payload
from gpudash.protocol.wire import SnapshotDecoder

HOSTSIDE = Path(hostside.__file__)
ALLOWED = {"pynvml", "psutil"}  # shipped with the collector / used only when importable


def _python37() -> str | None:
    """A working python3.7 (pyenv's shims exist for versions that are not selected)."""
    candidates = sorted(Path("/root/.pyenv/versions").glob("3.7*/bin/python3.7"))
    for python in [*map(str, candidates), shutil.which("python3.7")]:
        if python and subprocess.run([python, "-c", ""], capture_output=True).returncode == 0:
            return python
    return None


PY37 = _python37()


def test_hostside_imports_only_the_standard_library_by_its_source() -> None:
    tree = ast.parse(HOSTSIDE.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    outside = names - set(sys.stdlib_module_names) - ALLOWED
    assert not outside, f"hostside imports {outside}"


def test_hostside_loads_nothing_else_when_it_runs() -> None:
    """Run it isolated (-I), take a sample, then list every module it loaded."""
    code = (
        "import sys, json\n"
        "before = set(sys.modules)\n"
        f"src = open({str(HOSTSIDE)!r}).read()\n"
        "g = {'__name__': 'gpudash_hostside'}\n"
        "exec(compile(src, 'gpudash_hostside.py', 'exec'), g)\n"
        "g['HostCollector']().sample()\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    env = {"PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    loaded = {name.split(".")[0] for name in json.loads(done.stdout)}
    outside = loaded - set(sys.stdlib_module_names) - ALLOWED
    assert not outside, f"loaded {outside}"
    assert "gpudash" not in loaded


def test_bootstrap_runs_isolated() -> None:
    argv = payload.collector_argv("python3", "stream", interval=1, sudo=True)
    assert argv[:3] == ["python3", "-I", "-u"] and argv[3] == "-c"


def test_vermin_says_python_3_7() -> None:
    if importlib.util.find_spec("vermin") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("vermin is a test dependency (pip install -e '.[test]')")
        pytest.skip("vermin not installed")
    vermin = "import sys, vermin; sys.exit(vermin.main())"
    done = subprocess.run(
        [sys.executable, "-c", vermin, "--no-tips", "--violations", "-t=3.7-", str(HOSTSIDE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(PY37 is None, reason="no python3.7 on this machine")
def test_collector_streams_and_serves_on_python_3_7(fakegpu_state) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    """The payload on a real 3.7 interpreter with the stand-in driver: pynvml sent along,
    GPUs and a holder decoded, the serve mode's sample answered."""
    assert PY37 is not None
    st = fakegpu_state
    holder = st.hold(1, 1234, name="worker")
    proc = collector_run.start(python=PY37, env=st.env, with_pynvml=True)
    try:
        decoder = SnapshotDecoder("h")
        snap = decoder.feed(collector_run.read_line(proc))
        deadline = time.monotonic() + 10
        while snap.process(holder.pid) is None and time.monotonic() < deadline:
            snap = decoder.feed(collector_run.read_line(proc))
    finally:
        collector_run.stop(proc)
    assert snap.source.value == "nvml" and len(snap.gpus) == 8, snap.errors
    p = snap.process(holder.pid)
    assert p is not None and p.gpu_memory_mib == {1: 1234} and p.cmdline.startswith("worker")
    assert snap.boot_id and snap.mem_total_mib
