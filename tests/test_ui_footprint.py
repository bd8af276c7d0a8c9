"""What the local dashboard has loaded once its first screen is drawn: its memory at rest
is measured in bench/ (docs/BENCHMARKS.md), and what is mapped is asserted here, where a
change that loads a library for nothing would otherwise go unseen until the next bench.
Real app on a real pty, on the stand-in driver."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest
from ptydash import Dashboard, local_env

pytestmark = pytest.mark.terminal  # a real pty, in real time: not the fast tier


def _mapped(pid: int) -> set[str]:
    """The names of the files mapped into ``pid``."""
    return {Path(m.path).name for m in psutil.Process(pid).memory_maps()}


def test_the_local_dashboard_draws_its_plot_without_loading_openssl(fakegpu_state) -> None:
    fakegpu_state.hold(0, 1000, name="python3")
    d = Dashboard((), size=(160, 50), env=local_env(fakegpu_state.env))
    try:
        d.wait_for(b"1.0/79.6 GiB")  # a sample is drawn
        end = time.monotonic() + 40  # real time: a real process drawing on a real pty
        # until the plot of the memory history is drawn (plotext is imported to draw it)
        while "kernel.so" not in (mapped := _mapped(d.proc.pid)) and time.monotonic() < end:
            d.read(0.5)
        d.read(1.0)  # and a sample more
        mapped = _mapped(d.proc.pid)
    finally:
        d.proc.terminate()
        d.finish()
    assert any(name.startswith("libnvidia-ml") for name in mapped)  # the local collector
    assert "kernel.so" in mapped  # plotext's, where the plot is drawn: a 160x50 first screen
    # no TLS here and no hash: the imports of ssl (asyncio's) and hashlib (plotext's) are
    # deferred to their first use (gpudash.cli.lazy_openssl)
    assert not {n for n in mapped if n.startswith(("libssl", "libcrypto", "_ssl", "_hashlib"))}
