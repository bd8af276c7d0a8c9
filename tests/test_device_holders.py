"""Memory held through /dev/nvidia* by processes the driver does not list (nvitop #134).

A child forked from a CUDA process inherits its device files and keeps the memory after
the process NVML listed is gone. The stand-in driver does the same (tests/fakegpu); the
real collector must find such a child, the wire must carry it, triage must treat it as a
holder.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from lab.fixtures import HostSpec
from lab.probes import wait_host

from gpudash.collector.host.collector import HostCollector
from gpudash.collector.host.holders import DEV_DIR_ENV, DEV_SLACK_MIB, DeviceHolders
from gpudash.collector.host.procs import ProcReader
from gpudash.collector.host.units import UnitReader
from gpudash.domain.model import Gpu, HostSnapshot, Process, Unit
from gpudash.domain.triage import Flag, holders_by_gpu, process_flags, triage
from gpudash.protocol.payload import HOST, collector_argv, payload
from gpudash.protocol.source import ProtocolError
from gpudash.protocol.wire import SnapshotDecoder, apply_merge_patch, to_snapshot

SVC = "vllm.service"


# ------------------------------------------------- the real collector over the stand-in


class Stream:
    """The real collector (``stream``) on the stand-in driver, folded into wire state."""

    def __init__(self, env: dict[str, str], interval: float = 0.05) -> None:
        argv = collector_argv(sys.executable, "stream", interval=interval, sudo=False)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(payload(with_pynvml=False))
        self.proc.stdin.flush()
        self.state: dict[str, Any] = {}
        self.lines: list[bytes] = []

    def until(self, check: Any, timeout: float = 15.0) -> dict[str, Any]:
        assert self.proc.stdout
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            self.lines.append(line)
            message = json.loads(line)
            base = {} if message["k"] == "full" else self.state
            self.state = apply_merge_patch(base, message["s"])
            if check(self.state):
                return self.state
        raise AssertionError(f"not seen in time: {self.state.get('procs')}")

    def snapshot(self) -> HostSnapshot:
        decoder = SnapshotDecoder("h")
        snap = None
        for line in self.lines:
            snap = decoder.feed(line)
        assert snap is not None
        return snap

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def test_collector_shows_the_forked_child_that_keeps_a_dead_holders_memory(fakegpu_state):
    st = fakegpu_state.init(gpus=2, teardown_ms=200)
    p = st.hold(1, 5000, name="VLLM::Worker_TP1", fork_child="compile_worker")
    child = str(p.child_pid)
    stream = Stream(st.env)
    try:
        state = stream.until(lambda s: str(p.pid) in s["procs"])
        # the driver accounts for all of GPU 1's memory: nobody scans, the child is not shown
        assert child not in state["procs"]
        st.kill(p)
        state = stream.until(lambda s: child in s["procs"] and str(p.pid) not in s["procs"])
        shown = state["procs"][child]
        assert shown["device_gpus"] == [1] and shown["gpu_memory_mib"] == {"1": -1}
        assert shown["cmdline"].startswith("compile_worker")
        assert state["gpus"]["1"]["memory_used_mib"] == 5000

        snap = stream.snapshot()
        proc = snap.process(p.child_pid)
        assert proc is not None and proc.device_gpus == (1,)
        assert proc.gpu_memory_mib == {1: None}
        t = triage(snap)
        assert Flag.DEVICE_HOLDER in t.flags[p.child_pid]
        assert [h.pid for h, _mib in t.holders_by_gpu[1]] == [p.child_pid]
        assert t.group_of(p.child_pid) is not None

        st.kill_child(p)
        state = stream.until(
            lambda s: child not in s["procs"] and s["gpus"]["1"]["memory_used_mib"] == 0
        )
    finally:
        stream.close()


MAP_ONLY_HOLDER = """
    import ctypes, os, time
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    lib.fakegpu_hold.argtypes = [ctypes.c_uint, ctypes.c_ulonglong]
    assert lib.fakegpu_hold(0, 3000) == 0
    child = os.fork()
    if child == 0:
        os.closerange(0, 65536)  # every fd closed: only the driver's mappings are left
        time.sleep(120)
        os._exit(0)
    print(child, flush=True)
    time.sleep(120)
"""


def test_collector_finds_a_child_that_only_maps_the_device(fakegpu_state):
    st = fakegpu_state.init(gpus=1, teardown_ms=200)
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(MAP_ONLY_HOLDER)],
        env=st.env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout
    child = int(holder.stdout.readline())
    pidfd = os.pidfd_open(child)
    stream = Stream(st.env)
    try:
        stream.until(lambda s: str(holder.pid) in s["procs"])
        holder.kill()
        holder.wait()
        state = stream.until(lambda s: str(child) in s["procs"])
        assert state["procs"][str(child)]["device_gpus"] == [0]
        assert str(holder.pid) not in state["procs"]
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        stream.until(lambda s: str(child) not in s["procs"])
    finally:
        stream.close()
        holder.kill()
        holder.wait()
        holder.stdout.close()
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(pidfd)


# ---------------------------------------- when the scan runs, what counts, what it costs


class Gpus:
    """A GPU reader whose used memory and holder lists a test sets."""

    def __init__(self) -> None:
        self.used = {3: 100}
        self.holders: dict[int, dict[int, int]] = {}

    def read(self) -> tuple[list[dict[str, Any]], dict[int, dict[int, int]], list[str]]:
        gpus = [{"index": i, "memory_used_mib": u} for i, u in self.used.items()]
        return gpus, self.holders, []


OPENER = """
    import os, sys, time
    fds = [os.open(path, os.O_RDONLY) for path in sys.argv[1:]]
    print("ready", flush=True)
    time.sleep(60)
"""


@pytest.fixture
def dev_holder(tmp_path: Path):
    """A real process holding tmp/dev/nvidia3 (and nvidiactl) open; yields (dev dir, process)."""
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidiactl", "nvidia-uvm", "nvidia3", "nvidia4"):
        (dev / name).write_bytes(b"")
    held = [str(dev / "nvidia3"), str(dev / "nvidiactl")]
    p = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(OPENER), *held],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout and p.stdout.readline() == "ready\n"
    yield dev, p
    p.kill()
    p.wait()
    p.stdout.close()


def _collector(dev: Path, gpus: Gpus, tmp_path: Path) -> HostCollector:
    c = HostCollector(gpus=gpus, proc=ProcReader(),
                      units=UnitReader("systemctl", str(tmp_path / "x")))
    c.devices = DeviceHolders(dev_dir=str(dev))
    return c


def test_scan_only_while_memory_is_unexplained_and_only_unlisted_processes(
    dev_holder, tmp_path: Path
) -> None:
    dev, p = dev_holder
    gpus = Gpus()
    c = _collector(dev, gpus, tmp_path)
    try:
        gpus.used = {3: 100}  # within the slack: nothing to explain, nothing scanned
        assert str(p.pid) not in c.sample(force_units=True)["procs"]
        gpus.used = {3: 100 + DEV_SLACK_MIB + 1}
        shown = c.sample()["procs"][str(p.pid)]
        assert shown["device_gpus"] == [3] and shown["gpu_memory_mib"] == {"3": -1}
        assert shown["start_ticks"] == ProcReader().start_ticks(p.pid)
        again = c.sample()["procs"][str(p.pid)]
        assert again is shown  # unchanged: the same dict, so merge patches skip it
        gpus.holders = {999999: {3: -1}}  # a listed holder of unknown size: cannot tell
        assert str(p.pid) not in c.sample()["procs"]
        gpus.holders = {p.pid: {3: 50}}  # NVML lists it: its memory is attributed
        snap = c.sample(force_units=True)["procs"]
        shown = snap[str(p.pid)]
        assert "device_gpus" not in shown and shown["gpu_memory_mib"] == {"3": 50}
        gpus.holders, gpus.used = {}, {3: 100}  # explained again: device holders go
        assert str(p.pid) not in c.sample()["procs"]
    finally:
        c.proc.close()


def test_a_request_scans_at_once_despite_the_rate_limit(dev_holder, tmp_path: Path) -> None:
    dev, p = dev_holder
    gpus = Gpus()
    gpus.used = {4: 9000}
    c = _collector(dev, gpus, tmp_path)
    try:
        # full scan; p holds nvidia3, but GPU 3's memory needs no explaining
        assert str(p.pid) not in c.sample()["procs"]
        first = c.devices.full_at
        late = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(OPENER), str(dev / "nvidia4")],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert late.stdout and late.stdout.readline() == "ready\n"
            gpus.used = {4: 9100}  # changed, but a full scan ran just now
            c.sample()
            assert c.devices.full_at == first  # so only the rotation ran
            procs = c.sample(force_units=True)["procs"]  # a request: scanned now
            second = c.devices.full_at
            assert second > first
            assert procs[str(late.pid)]["device_gpus"] == [4]
            c.sample(force_units=True)  # the same shortfall: that scan still stands
            assert c.devices.full_at == second
        finally:
            late.kill()
            late.wait()
            assert late.stdout
            late.stdout.close()
    finally:
        c.proc.close()


NOT_ROOT = """
    import sys
    sys.path.insert(0, sys.argv[1])
    from host.holders import DeviceHolders  # the package as sent to a host: no gpudash
    d = DeviceHolders(dev_dir="/nonexistent")
    procs, problem = d.sample([{"index": 2, "memory_used_mib": 5000}], {}, lambda pid: None, False)
    print(problem)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as another user")
def test_without_root_the_snapshot_says_holders_may_be_missing() -> None:
    here = HOST.parent
    cp = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3",
         "-c", textwrap.dedent(NOT_ROOT), str(here)],
        capture_output=True, text=True, timeout=60,
    )
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.startswith("memory on GPU 2 has no listed holder and the open files of ")
    assert "without root (--sudo)" in cp.stdout


def _fake_pid(root: Path, pid: int, links: list[str], maps: list[str]) -> None:
    d = root / str(pid)
    (d / "fd").mkdir(parents=True)
    fields = ["S", "1"] + ["0"] * 17 + [str(1000 + pid)] + ["0"] * 30
    (d / "stat").write_text(f"{pid} (x) " + " ".join(fields) + "\n")
    for n, target in enumerate(links):
        (d / "fd" / str(n)).symlink_to(target)
    lines = [f"7f00{n:08x}-7f01{n:08x} rw-s 00000000 00:05 {n} {m}" for n, m in enumerate(maps)]
    (d / "maps").write_text("\n".join(lines + ["7fff0000-7fff1000 r-xp 0 0:0 0 [vdso]"]) + "\n")


def test_real_device_names_under_dev(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """By default /dev/nvidia<N> (fd or mapping) counts; nvidiactl, nvidia-uvm, caps and
    modeset name no GPU; the collector itself is never a device holder."""
    monkeypatch.delenv(DEV_DIR_ENV, raising=False)
    root = tmp_path / "proc"
    _fake_pid(root, 10, ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia7", "/dev/null"], [])
    _fake_pid(root, 11, ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-modeset"],
              ["/dev/nvidia-uvm", "/dev/nvidiactl", "/dev/nvidia-caps/nvidia-cap1"])
    _fake_pid(root, 12, [], ["/dev/nvidia2", "/dev/nvidia12", "/usr/lib/libcuda.so.1"])
    _fake_pid(root, 13, ["/tmp/dev/nvidia1", "/dev/nvidia0x"], ["/dev/nvidia0 (deleted)"])
    _fake_pid(root, os.getpid(), ["/dev/nvidia0"], [])
    d = DeviceHolders(str(root))
    d._full_scan({0}, {})  # GPU 0 unexplained by fds: maps are read too
    assert d.found == {10: (1010, (7,)), 12: (1012, (2, 12))}
    d._full_scan({7}, {})  # explained by an fd: maps are not read
    assert d.found == {10: (1010, (7,))}


def test_rotating_scan_stays_within_its_budget(tmp_path: Path) -> None:
    root = tmp_path / "proc"
    big = [f"/usr/lib/lib{n}.so" for n in range(300)]
    for pid in range(100, 400):
        _fake_pid(root, pid, [f"/tmp/f{n}" for n in range(20)], big)
    _fake_pid(root, 50, [], big + ["/dev/nvidia1"])
    d = DeviceHolders(str(root))
    d._rotate({})
    # one turn reads at least one, however loaded the host, and stops at its time budget
    # (the cost is measured in bench/collector_bench.py: these machines are noisy)
    assert len(d.queue) <= 300
    while d.queue:
        d._rotate({})
    assert d.found == {50: (1050, (1,))}


# ----------------------------------------------------------------------- wire and triage


def test_wire_carries_device_gpus() -> None:
    state = {
        "taken_at": 1.0,
        "procs": {"7": {"pid": 7, "gpu_memory_mib": {"2": -1}, "device_gpus": [2, 0, 2]}},
    }
    p = to_snapshot(state, "h").processes[0]
    assert p.device_gpus == (0, 2) and p.gpu_memory_mib == {2: None}
    plain = to_snapshot({"taken_at": 1.0, "procs": {"7": {"pid": 7}}}, "h").processes[0]
    assert plain.device_gpus == ()
    for bad in ([True], ["0"], [-1], {"0": 1}, 3, [1.0]):
        with pytest.raises(ProtocolError):
            to_snapshot({"taken_at": 1.0, "procs": {"7": {"pid": 7, "device_gpus": bad}}}, "h")


def _snap(procs: list[Process], units: list[Unit]) -> HostSnapshot:
    return HostSnapshot("h", 0.0, gpus=(Gpu(0), Gpu(1)), processes=tuple(procs), units=tuple(units))


def test_device_holder_of_a_stopped_unit_is_an_orphan_like_an_nvml_holder() -> None:
    child = Process(pid=20, ppid=1, start_ticks=5, unit=SVC, device_gpus=(1,))
    down = Unit(SVC, active_state="inactive", unit_file_state="disabled")
    snap = _snap([child], [down])
    assert process_flags(snap)[20] == {Flag.DEVICE_HOLDER, Flag.ORPHAN, Flag.UNIT_INACTIVE}
    t = triage(snap)
    group = t.group(SVC)
    assert group is not None and Flag.ORPHAN in group.flags and group.gpu_memory_mib == {1: 0}
    assert t.orphans() == (child,)
    assert holders_by_gpu(snap)[1] == ((child, None),)


def test_device_holder_in_a_live_tree_or_no_unit_is_a_holder_not_an_orphan() -> None:
    main = Process(pid=10, ppid=1, start_ticks=1, unit=SVC, gpu_memory_mib={0: 4000})
    worker = Process(pid=11, ppid=10, start_ticks=2, unit=SVC, gpu_memory_mib={0: None},
                     device_gpus=(0,))
    stray = Process(pid=30, ppid=1, start_ticks=3, device_gpus=(1,))
    up = Unit(SVC, active_state="active", main_pid=10)
    snap = _snap([main, worker, stray], [up])
    flags = process_flags(snap)
    assert flags[11] == {Flag.DEVICE_HOLDER} and flags[30] == {Flag.DEVICE_HOLDER}
    t = triage(snap)
    assert t.group("no unit") is not None  # a no-unit group appears only while it holds
    assert [p.pid for p, _m in t.holders_by_gpu[0]] == [10, 11]
    assert [p.pid for p, _m in t.holders_by_gpu[1]] == [30]


# ------------------------------------------ end to end: a unit's child on a lab host


COMPILE_JOB = "compile-job.service"
COMPILE_UNIT = """[Unit]
Description=Training job whose compile worker outlives it

[Service]
ExecStart=/usr/local/bin/fakegpu hold --gpu 3 --mib 20000 --fork-child torch_compile_worker
KillMode=process
"""


@pytest.mark.lab
@pytest.mark.parametrize("lab_host", [HostSpec(units=(), session_procs=())], indirect=True)
def test_lab_child_of_a_dead_unit_main_is_a_device_holder_orphan(lab_host) -> None:
    """systemd host, real SSH: the unit's main (the CUDA process) is SIGKILLed, its forked
    compile worker stays in the unit's cgroup with the device files; NVML lists nobody,
    gpudash shows the worker as a device holder of GPU 3, an orphan of the failed unit."""
    h = lab_host
    h.sh(f"cat > /etc/systemd/system/{COMPILE_JOB} <<'EOF'\n{COMPILE_UNIT}EOF\n"
         f"systemctl daemon-reload && systemctl start {COMPILE_JOB}")
    [child] = wait_host(lambda: h.pids_of("^torch_compile_worker __child"), what="compile worker")
    main = int(h.unit_show(COMPILE_JOB, ["MainPID"])["MainPID"])
    assert h.proc(child)["ppid"] == str(main)  # type: ignore[index]
    h.systemctl("kill", "-s", "KILL", "--kill-who=main", COMPILE_JOB)
    wait_host(lambda: not h.alive(main), what="main gone")
    assert h.gpu_used_mib()[3] == 20000  # the child keeps it
    assert h.exec(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"]).stdout == ""

    cp = subprocess.run(
        [sys.executable, "-m", "gpudash", "snapshot", h.alias, "--json",
         "--ssh-config", str(h.ssh_config_path), "--known-hosts", str(h.known_hosts_path)],
        capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
    )
    assert cp.returncode == 0, cp.stderr
    [snap] = json.loads(cp.stdout)["hosts"]
    [shown] = [p for p in snap["processes"] if p["pid"] == child]
    assert shown["unit"] == COMPILE_JOB and shown["cgroup"].endswith("/" + COMPILE_JOB)
    assert shown["gpu_memory_mib"] == {"3": None}
    assert {"DEVICE HOLDER", "ORPHAN"} <= set(shown["flags"])
    assert not any(p["pid"] == main for p in snap["processes"])
    [unit] = [u for u in snap["units"] if u["name"] == COMPILE_JOB]
    assert unit["active_state"] in ("failed", "inactive")
