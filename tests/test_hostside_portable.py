"""The collector runs on a GPU host's own python3 (3.7 or later) with nothing installed:
its package imports the standard library only, plus pynvml (sent along) and psutil when
present, and its modules import each other the one way the bootstrap provides."""

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

from gpudash.protocol import payload
from gpudash.protocol.wire import SnapshotDecoder

SOURCES = sorted(payload.HOST.glob("*.py"))
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
    names = set()
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
            elif isinstance(node, ast.ImportFrom):  # the bootstrap has every module made
                # before it runs those that import it: ``from .module import name`` only
                assert node.level == 1 and node.module, f"{path.name}: {ast.unparse(node)}"
    outside = names - set(sys.stdlib_module_names) - ALLOWED
    assert not outside, f"the collector imports {outside}"


def test_payload_ships_every_module_after_those_it_imports() -> None:
    shipped = payload.modules()
    names = [name for name, _ in shipped]
    assert names[0] == payload.PACKAGE and len(names) == len(SOURCES) == len(set(names))
    for at, (name, source) in enumerate(shipped):
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert f"{payload.PACKAGE}.{node.module}" in names[:at], (name, node.module)


def test_hostside_loads_nothing_else_when_it_runs() -> None:
    """Run the bootstrap isolated (-I) on the payload, but take a sample instead of its
    main loop, then list every module it loaded."""
    bootstrap, main = payload.BOOTSTRAP.rsplit("sys.exit(", 1)
    assert main.startswith(f"sys.modules['{payload.PACKAGE}.loop'].main(")
    code = (
        "import sys, json\n"
        "before = set(sys.modules)\n"
        + bootstrap
        + f"sys.modules['{payload.PACKAGE}.collector'].HostCollector().sample()\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    env = {"PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-I", "-c", code], input=payload.payload(with_pynvml=False),
        capture_output=True, env=env, timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()
    loaded = {name.split(".")[0] for name in json.loads(done.stdout)}
    assert payload.PACKAGE in loaded
    outside = loaded - set(sys.stdlib_module_names) - ALLOWED - {payload.PACKAGE}
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
        [sys.executable, "-c", vermin, "--no-tips", "--violations", "-t=3.7-", *map(str, SOURCES)],
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
    server = collector_run.start("serve", interval=None, python=PY37, env=st.env,
                                 with_pynvml=True)
    try:
        assert json.loads(collector_run.read_line(server))["k"] == "ready"
        collector_run.request(server, "sample", id=7)
        reply = json.loads(collector_run.read_line(server))
    finally:
        collector_run.stop(server)
    assert reply["k"] == "full" and reply["id"] == 7 and str(holder.pid) in reply["s"]["procs"]
