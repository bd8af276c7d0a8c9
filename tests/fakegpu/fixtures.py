"""pytest fixtures for the stand-in driver.

Use from a conftest with ``pytest_plugins = ["fakegpu.fixtures"]`` (tests/ on sys.path)
or import the fixtures into a test module.

    def test_x(fakegpu_state):
        fakegpu_state.init(gpus=2, total_mib=1000, teardown_ms=100)
        p = fakegpu_state.hold(0, 500, name="VLLM::Worker_TP0")
        subprocess.run(["nvidia-smi", ...], env=fakegpu_state.env)
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from . import harness


@pytest.fixture(scope="session")
def fakegpu_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding libnvidia-ml.so.1, nvidia-smi and fakegpu (built once per session)."""
    out = os.environ.get("FAKEGPU_BUILD_DIR")
    return harness.build(out or tmp_path_factory.mktemp("fakegpu-build"))


class FakeGpuState:
    """One state directory; holders it spawned are killed at teardown."""

    def __init__(self, out: Path, state_dir: Path):
        self.out = out
        self.dir = state_dir
        self.env = harness.env(out, state_dir)
        self.holders: list[subprocess.Popen] = []

    def init(self, **kw) -> FakeGpuState:
        harness.init_state(self.dir, out_dir=self.out, **kw)
        return self

    def hold(
        self,
        gpu,
        mib: int,
        name: str | None = None,
        fork_child: str | None = None,
        sm_util: int | None = None,
    ) -> subprocess.Popen:
        p = harness.spawn_holder(
            gpu, mib, name=name, env=self.env, fork_child=fork_child, sm_util=sm_util
        )
        self.holders.append(p)
        return p

    def kill(self, p: subprocess.Popen, sig: int = 9) -> None:
        harness.kill_holder(p, sig)

    def kill_child(self, p: subprocess.Popen, sig: int = 9) -> None:
        """Kill the child a `hold(..., fork_child=NAME)` forked (it keeps the memory)."""
        harness.kill_child(p, sig)

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return harness.fakegpu(self.out, self.dir, *args, check=check)

    def run(self, *argv: str, **kw) -> subprocess.CompletedProcess:
        """Run a command (e.g. nvidia-smi) with the stand-in environment."""
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        return subprocess.run(list(argv), env=self.env, **kw)

    def close(self) -> None:
        for p in self.holders:
            harness.kill_holder(p)
            harness.kill_child(p)
        self.holders.clear()


@pytest.fixture
def fakegpu_state(fakegpu_build: Path, tmp_path: Path):
    """Fresh 8-GPU state (H100 80GB defaults, teardown 1 s); call .init(...) to change."""
    st = FakeGpuState(fakegpu_build, tmp_path / "fakegpu-state")
    st.init()
    try:
        yield st
    finally:
        st.close()
