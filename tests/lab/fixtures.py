"""Pytest fixtures for the container lab (register with ``pytest_plugins``).

- ``lab``: session-scoped :class:`Lab` (one run dir, one client key/ssh_config).
- ``lab_host``: a freshly booted host per test (default :class:`HostSpec`, or the spec
  given with ``@pytest.mark.parametrize("lab_host", [HostSpec(...)], indirect=True)``);
  destroyed after the test (power off, unmount, remove), even when the test fails.
- ``lab_module_host``: one default host shared by a test module, for the tests that change
  nothing on it or put back what they change (a test that kills, stops, disables, swaps or
  powers off takes ``lab_host``).
- ``lab_hosts``: factory ``lab_hosts(n_or_specs) -> list[LabHost]``, booted in parallel,
  destroyed after the test.

Where the lab cannot run (not root, no systemd-nspawn, no cgroups, stand-in driver not
buildable) the fixtures skip with the reason, except with ``CI=true``: there they fail,
so CI never silently skips the lab.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest


def _load_lab():
    """tests/lab/lab.py as module ``gpudash_lab``, however this file was imported."""
    if "gpudash_lab" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "gpudash_lab", Path(__file__).resolve().parent / "lab.py"
        )
        mod = importlib.util.module_from_spec(spec)
        sys.modules["gpudash_lab"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["gpudash_lab"]


labmod = _load_lab()

HostSpec = labmod.HostSpec
Lab = labmod.Lab
LabHost = labmod.LabHost


def lab_unavailable(reason: str) -> None:
    """Skip, or fail under CI=true."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"lab required under CI=true but unavailable: {reason}", pytrace=False)
    pytest.skip(f"lab unavailable: {reason}")


@pytest.fixture(scope="session")
def lab():
    try:
        labmod.check_available()
        labmod.reap_stale()  # leftovers of sessions that were killed before teardown
        the_lab = Lab()
    except labmod.LabUnavailable as e:
        lab_unavailable(str(e))
    try:
        _ = the_lab.fakegpu_dir  # build the stand-in driver once
    except labmod.LabError as e:
        the_lab.stop()
        lab_unavailable(f"stand-in driver: {e}")
    yield the_lab
    the_lab.stop()


@pytest.fixture
def lab_host(lab, request):
    spec = getattr(request, "param", None) or HostSpec()
    [host] = lab.start([spec])
    try:
        yield host
    finally:
        lab.remove(host)


@pytest.fixture(scope="module")
def _lab_module_host_booted(lab):
    [host] = lab.start([HostSpec()])
    try:
        yield host
    finally:
        lab.remove(host)


UNIT_STATE = ("ActiveState", "UnitFileState", "MainPID", "NRestarts")


def _units_state(host) -> dict:
    return {u.name: host.unit_show(u.name, UNIT_STATE) for u in host.spec.units}


@pytest.fixture
def lab_module_host(_lab_module_host_booted, request):
    """One host shared by a module's tests that leave it as they found it: a test that
    stopped, restarted, disabled or powered off one of its units errors here."""
    host = _lab_module_host_booted
    before = _units_state(host)
    yield host
    after = _units_state(host) if host.running else "powered off"
    if after != before:
        pytest.fail(f"{request.node.name} changed the module's shared host (give it its own:"
                    f" lab_host): units {before} -> {after}", pytrace=False)


@pytest.fixture
def lab_hosts(lab):
    made: list = []

    def make(specs=1):
        hosts = lab.start(specs)
        made.extend(hosts)
        return hosts

    try:
        yield make
    finally:
        errors = []
        for h in made:
            try:
                lab.remove(h)
            except Exception as e:  # noqa: BLE001
                errors.append(e)
        if errors:
            raise errors[0]


@pytest.fixture(scope="module")
def slurm_host(lab):
    """One host running a real Slurm (tests/lab/slurm.py) for a test module, its node IDLE;
    torn down after the module. Skips where the lab or Slurm's packages are not here."""
    from lab import slurm

    try:
        slurm.check_available()
    except labmod.LabUnavailable as e:
        lab_unavailable(str(e))
    sh = slurm.start(lab)
    try:
        yield sh
    finally:
        lab.remove(sh.host)
