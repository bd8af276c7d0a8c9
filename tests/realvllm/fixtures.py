"""Pytest fixtures for the real vLLM in the lab (registered in tests/conftest.py).

- ``realvllm``: session-scoped; the install's :class:`~realvllm.install.Layout`. Skips
  (fails under ``CI=true``, like the lab) without root/the lab or without the install
  (``python3 tests/realvllm/install.py``; tests/run.sh runs it).
- ``realvllm_host``: module-scoped :class:`RealVllmHost`: one lab host whose
  ``vllm-tiny.service`` (real ``vllm serve``, Restart=always, KillMode=process, its
  worker holding DEFAULT_MIB of GPU 0) is already serving when the first test runs, plus
  a stopped standby unit (GPU 3) and a stopped misconfigured unit (GPU 4). Tests may
  change its state; it is destroyed after the module.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from lab.fixtures import lab_unavailable, labmod

from realvllm import scenarios
from realvllm.install import Layout, layout


def realvllm_unavailable(reason: str) -> None:
    """Skip, or fail under CI=true (CI must run the real-vLLM tests)."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"real vLLM required under CI=true but unavailable: {reason}",
                    pytrace=False)
    pytest.skip(f"real vLLM unavailable: {reason}")


@pytest.fixture(scope="session")
def realvllm() -> Layout:
    try:
        labmod.check_available()
    except labmod.LabUnavailable as e:
        lab_unavailable(str(e))
    lay = layout()
    if not lay.complete():
        realvllm_unavailable(f"not installed in {lay.root} (run: python3 "
                             "tests/realvllm/install.py, or tests/run.sh as root)")
    return lay


@dataclass(frozen=True)
class RealVllmHost:
    host: Any  # LabHost
    tiny: scenarios.VllmUnit  # enabled, serving
    standby: scenarios.VllmUnit  # (c) stopped, disabled
    bad: scenarios.VllmUnit  # (d) stopped, disabled; start_crash_loop() starts it
    tree: scenarios.ServerTree  # tiny's tree once it served
    serve_seconds: float  # boot to /health 200


@pytest.fixture(scope="module")
def realvllm_host(realvllm: Layout, lab: Any) -> Iterator[RealVllmHost]:
    tiny = scenarios.tiny_unit()
    standby = scenarios.standby_unit()
    bad = scenarios.misconfigured_unit()
    [host] = lab.start([scenarios.host_spec(tiny, standby, bad)])
    try:
        try:
            took = scenarios.wait_serving(host, tiny.port)
        except AssertionError as e:
            tail = "\n".join(scenarios.journal(host, tiny.name).splitlines()[-40:])
            raise AssertionError(f"{e}\n--- journal of {tiny.name}:\n{tail}") from None
        tree = scenarios.server_tree(host, scenarios.main_pid(host, tiny.name))
        scenarios.wait_held(host, tree.workers, tiny.mib)
        yield RealVllmHost(host, tiny, standby, bad, tree, took)
    finally:
        lab.remove(host)
