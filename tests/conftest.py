"""Shared test set-up: every test runs with its own XDG dirs, so no test reads or
writes the developer's config, state or audit file."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


@pytest.fixture(autouse=True)
def _isolated_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        d = tmp_path / "xdg" / var.lower()
        d.mkdir(parents=True)
        monkeypatch.setenv(var, str(d))


# Shared fixtures of the test infrastructure (the stand-in driver, the sshd, the lab, the
# real vLLM in the lab).
pytest_plugins = ["fakegpu.fixtures", "lab.fixtures", "realvllm.fixtures"]
