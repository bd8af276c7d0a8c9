"""What the collector states about a host is true: its GPU source, its boot, the CPU and
memory of the host and of each holder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import collector_run
import psutil
import pytest

from gpudash.collector.host import hoststats
from gpudash.collector.host.collector import HostCollector
from gpudash.collector.host.hoststats import OWN_CPU_S, HostStats, read_boot_id
from gpudash.collector.host.procs import ProcReader
from gpudash.collector.host.signals import send_signal
from gpudash.collector.host.units import UnitReader
from gpudash.domain.model import SourceKind
from gpudash.protocol.wire import SnapshotDecoder, parse_message

BOOT_ID = Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def _bare_env() -> dict[str, str]:
    """No stand-in driver, no nvidia-smi on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKEGPU", "LD_LIBRARY"))}
    env["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
    return env


# -------------------------------------------------------------------- no GPU source at all


def test_host_without_any_gpu_source_is_not_called_healthy() -> None:
    proc = collector_run.start(env=_bare_env())
    try:
        snap = SnapshotDecoder("h").feed(collector_run.read_line(proc))
    finally:
        collector_run.stop(proc)
    assert snap.source == SourceKind.NONE and snap.degraded
    assert any("nvidia-smi not found" in e for e in snap.errors)
    assert snap.gpus == ()


# ------------------------------------------------------------------------------- boot id


def test_every_snapshot_names_the_boot(tmp_path: Path) -> None:
    assert read_boot_id() == BOOT_ID
    assert read_boot_id(str(tmp_path)) is None
    proc = collector_run.start(env=_bare_env())
    try:
        decoder = SnapshotDecoder("h")
        first = decoder.feed(collector_run.read_line(proc))
        second = decoder.feed(collector_run.read_line(proc))  # a patch: the boot stays
    finally:
        collector_run.stop(proc)
    assert first.boot_id == second.boot_id == BOOT_ID


def test_signal_from_another_boot_is_refused_on_the_host() -> None:
    victim = subprocess.Popen(["sleep", "60"])
    try:
        start = ProcReader().start_ticks(victim.pid)
        other = "00000000-0000-4000-8000-000000000000"
        assert send_signal(victim.pid, start, 0, boot_id=other) == "mismatch"
        assert send_signal(victim.pid, start, 0, boot_id=BOOT_ID) == "sent"
        proc = collector_run.start("serve", interval=None, env=_bare_env())
        try:
            assert parse_message(collector_run.read_line(proc))["k"] == "ready"
            fields = {"pid": victim.pid, "start": start, "sig": int(signal.SIGTERM)}
            collector_run.request(proc, "signal", id=1, boot=other, **fields)
            assert parse_message(collector_run.read_line(proc))["outcome"] == "mismatch"
            time.sleep(0.2)
            assert victim.poll() is None  # still running: nothing was sent
            collector_run.request(proc, "signal", id=2, boot=BOOT_ID, **fields)
            assert parse_message(collector_run.read_line(proc))["outcome"] == "sent"
            assert victim.wait(timeout=10) == -signal.SIGTERM
        finally:
            collector_run.stop(proc)
    finally:
        victim.kill()
        victim.wait()


# ------------------------------------------------------------------- CPU and memory, honest


def test_host_cpu_and_memory_agree_with_and_without_psutil(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hoststats, "HOST_STATS_S", 0.0)  # every read reads
    with_psutil, without = HostStats(psutil), HostStats(None)
    assert with_psutil.uses_psutil and not without.uses_psutil
    first = without.read()
    both = with_psutil.read()
    last = without.read()
    assert both["mem_total_mib"] == first["mem_total_mib"] == psutil.virtual_memory().total >> 20
    low = min(first["mem_used_mib"], last["mem_used_mib"]) - 64
    high = max(first["mem_used_mib"], last["mem_used_mib"]) + 64
    assert low <= both["mem_used_mib"] <= high
    deadline = time.monotonic() + 0.6
    while time.monotonic() < deadline:  # keep one core busy between the two readings
        pass
    a, b = with_psutil.read()["cpu_pct"], without.read()["cpu_pct"]
    assert a is not None and b is not None and abs(a - b) <= 10, (a, b)
    assert a >= 100 / (os.cpu_count() or 1) / 2  # this loop alone kept one core busy


def test_the_collector_reports_its_own_cpu_time_every_ten_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hoststats, "HOST_STATS_S", 0.0)
    clock = [1000.0]
    monkeypatch.setattr(hoststats.time, "monotonic", lambda: clock[0])
    stats = HostStats(None)
    first = stats.read()["collector_cpu_s"]
    t = os.times()
    assert 0 < first <= t[0] + t[1] + t[2] + t[3] + 0.01  # this process, its children
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:  # burn CPU: the figure must not move yet
        pass
    clock[0] += 5
    assert stats.read()["collector_cpu_s"] == first  # re-read only every OWN_CPU_S
    clock[0] += OWN_CPU_S
    assert stats.read()["collector_cpu_s"] >= first + 0.2


def test_busy_holder_shows_high_cpu_and_a_sleeping_one_about_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hoststats, "HOST_STATS_S", 0.0)
    busy = subprocess.Popen(
        [sys.executable, "-c", "x = bytearray(200 << 20)\nwhile True: pass"]
    )
    idle = subprocess.Popen(["sleep", "60"])

    class Gpus:
        def read(self):  # type: ignore[no-untyped-def]
            return [], {busy.pid: {0: 1}, idle.pid: {0: 1}}, []

    collector = HostCollector(
        gpus=Gpus(),
        proc=ProcReader(stat_every=1),
        units=UnitReader("systemctl", str(tmp_path / "no-systemd")),
    )

    def cpu_s() -> float:
        t = psutil.Process(busy.pid).cpu_times()
        return t.user + t.system

    try:
        deadline = time.monotonic() + 30  # the busy one has touched its 200 MiB
        while psutil.Process(busy.pid).memory_info().rss < 190 << 20:
            assert time.monotonic() < deadline, "the busy process never held 190 MiB"
            time.sleep(0.05)
        c0, t0 = cpu_s(), time.monotonic()
        collector.sample()
        time.sleep(1.0)
        snap = collector.sample()
        used = 100 * (cpu_s() - c0) / (time.monotonic() - t0)
        hot, cold = snap["procs"][str(busy.pid)], snap["procs"][str(idle.pid)]
        # As much as it really got (seen: 24 % of a core, with the machine's 2 cores shared
        # by a whole test run): what the collector says, not what a quiet machine gives.
        assert hot["cpu_pct"] >= 10 and abs(hot["cpu_pct"] - used) <= 15, (hot, used)
        assert cold["cpu_pct"] <= 5, cold
        assert hot["rss_mib"] >= 190 and cold["rss_mib"] < 50
        assert snap["mem_total_mib"] > 0 and snap["cpu_pct"] is not None
    finally:
        for p in (busy, idle):
            p.kill()
            p.wait()
        collector.proc.close()


def test_cpu_and_rss_reach_the_model_through_the_stream(fakegpu_state) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    st = fakegpu_state
    holder = st.hold(0, 100, name="worker")
    proc = collector_run.start(env=st.env)
    try:
        decoder = SnapshotDecoder("h")
        for _ in range(40):  # the holder's stat is read in rotation, the host's once a second
            snap = decoder.feed(collector_run.read_line(proc))
            p = snap.process(holder.pid)
            if p is not None and p.cpu_pct is not None and snap.cpu_pct is not None:
                break  # the host's CPU % needs two samples
    finally:
        collector_run.stop(proc)
    assert p is not None and p.cpu_pct is not None and p.cpu_pct <= 5
    assert p.rss_mib is not None and 0 <= p.rss_mib < 100
    assert snap.mem_total_mib == psutil.virtual_memory().total >> 20
    assert snap.cpu_pct is not None and 0 <= snap.cpu_pct <= 100


def test_lifetime_cpu_on_first_sight(tmp_path: Path) -> None:
    """A process seen for the first time gets its lifetime average at once, not N/A."""
    pid = os.getpid()  # (not a parameter: its id would differ between xdist's workers)
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass

    class Gpus:
        def read(self):  # type: ignore[no-untyped-def]
            return [], {pid: {0: 1}}, []

    collector = HostCollector(
        gpus=Gpus(), proc=ProcReader(), units=UnitReader("systemctl", str(tmp_path / "x"))
    )
    try:
        info = collector.sample()["procs"][str(pid)]
    finally:
        collector.proc.close()
    assert info["cpu_pct"] > 0


def test_unreadable_requests_get_an_error_reply_and_the_collector_stays() -> None:
    victim = subprocess.Popen(["sleep", "60"])
    proc = collector_run.start("serve", interval=None, env=_bare_env())
    try:
        assert parse_message(collector_run.read_line(proc))["k"] == "ready"
        start = ProcReader().start_ticks(victim.pid)
        collector_run.request(proc, "signal", id=7, pid=victim.pid, start=start, sig=10**30)
        assert parse_message(collector_run.read_line(proc)) == {
            "k": "error", "msg": "bad request", "id": 7
        }
        collector_run.request(proc, "signal", id=8, pid="x", sig=15)
        assert parse_message(collector_run.read_line(proc))["id"] == 8
        collector_run.request(proc, "sample", id=9)
        reply = parse_message(collector_run.read_line(proc))
        assert reply["k"] == "full" and reply["id"] == 9
        assert victim.poll() is None
    finally:
        collector_run.stop(proc)
        victim.kill()
        victim.wait()


def test_idle_holder_that_wakes_up_shows_its_cpu(tmp_path: Path) -> None:
    """An idle process's stat is re-read as the same bytes (nothing parsed): once it
    starts spinning the next read shows it."""
    # It says when its start-up is behind it and spins when told: no fixed sleeps, so a
    # loaded machine (a slow interpreter start) cannot make it look busy while "asleep".
    waker = subprocess.Popen(
        [sys.executable, "-c", "import sys\nprint('asleep', flush=True)\nsys.stdin.readline()"
         "\nwhile True: pass"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )
    assert waker.stdout is not None and waker.stdin is not None
    waker.stdout.readline()

    class Gpus:
        def read(self):  # type: ignore[no-untyped-def]
            return [], {waker.pid: {0: 1}}, []

    collector = HostCollector(
        gpus=Gpus(),
        proc=ProcReader(stat_every=1),
        units=UnitReader("systemctl", str(tmp_path / "no-systemd")),
    )
    try:
        seen = []
        for _ in range(4):  # asleep: 0 % once its start-up is behind the first reading
            seen.append(collector.sample()["procs"][str(waker.pid)].get("cpu_pct"))
            time.sleep(0.2)
        assert seen[-1] == 0 and seen[-2] == 0, seen
        waker.stdin.write(b"spin\n")
        waker.stdin.flush()
        deadline = time.monotonic() + 15
        cpu = 0.0
        while cpu < 30 and time.monotonic() < deadline:  # now spinning: a read shows it
            time.sleep(0.5)
            cpu = collector.sample()["procs"][str(waker.pid)]["cpu_pct"]
        assert cpu >= 30, cpu
    finally:
        waker.kill()
        waker.wait()
        collector.proc.close()
