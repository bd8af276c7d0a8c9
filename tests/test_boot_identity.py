"""A process identity holds within one boot: a plan made before a reboot signals nothing.

Checked where the signal is sent, through the real collectors (Python and plain shell) on
this machine, against a real process.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpudash.protocol.source import SignalOutcome
from gpudash.transport import LocalSource

BOOT = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
OTHER = "0c4c1e2e-0000-4000-8000-000000000001"


def start_ticks(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rfind(")") + 2:].split()[19])


@pytest.mark.parametrize("python", [sys.executable, None], ids=["python", "shell"])
async def test_signal_refused_under_another_boot_sent_under_this_one(python: str | None) -> None:
    victim = subprocess.Popen(["sleep", "300"])  # noqa: ASYNC220 - starts at once
    source = LocalSource(python=python)
    try:
        ticks = start_ticks(victim.pid)
        control = source.control
        snap = await control.sample()
        assert snap.boot_id == BOOT  # the snapshot says which boot its identities belong to
        assert await control.signal(victim.pid, ticks, signal.SIGTERM,
                                    boot_id=OTHER) is SignalOutcome.MISMATCH
        assert victim.poll() is None
        assert await control.signal(victim.pid, ticks, signal.SIGTERM,
                                    boot_id=BOOT) is SignalOutcome.SENT
        assert victim.wait(5) == -signal.SIGTERM
    finally:
        victim.kill()
        await source.close()
