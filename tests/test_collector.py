"""The collector's parsing and unit mapping on fabricated inputs; the decoder under fuzz."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudash.collector.host import gpus
from gpudash.collector.host.collector import HostCollector
from gpudash.collector.host.gpus import gpu_reader
from gpudash.collector.host.parsing import (
    cgroup_path,
    parse_smi_apps,
    parse_smi_gpus,
    parse_stat,
    parse_systemctl_show,
    unit_of_cgroup,
)
from gpudash.collector.host.procs import STAT_EVERY, ProcReader
from gpudash.collector.host.protocol import PROTOCOL, merge_patch
from gpudash.collector.host.signals import send_signal
from gpudash.collector.host.units import UnitReader
from gpudash.protocol import shell
from gpudash.protocol.source import ProtocolError
from gpudash.protocol.wire import SnapshotDecoder, apply_merge_patch
from gpudash.transport.commands import systemctl_argv, validate_pid, validate_unit
from gpudash.transport.ssh import SshTarget, parse_target


def stat_line(pid: int, comm: str, state: str = "S", ppid: int = 1, start: int = 4242) -> str:
    fields = [state, str(ppid)] + ["0"] * 17 + [str(start)] + ["0"] * 30
    return f"{pid} ({comm}) " + " ".join(fields) + "\n"


@pytest.mark.parametrize("comm", ["python3", "a b", "x) S 1 (y", "((()))", "VLLM::Worker_TP0"])
def test_stat_comm_with_spaces_and_parens(comm: str) -> None:
    assert parse_stat(stat_line(77, comm, "D", 9, 123456)) == (comm, "D", 9, 123456)


def test_stat_garbage() -> None:
    assert parse_stat("") is None
    assert parse_stat("12 (x) S 1 2") is None
    assert parse_stat("12 (x) S notanint " + "0 " * 30) is None


@pytest.mark.parametrize(
    ("cgroup", "unit"),
    [
        ("0::/system.slice/vllm-minimax-m25.service\n", "vllm-minimax-m25.service"),
        ("0::/user.slice/user-1000.slice/session-4.scope\n", "session-4.scope"),
        (
            "0::/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service\n",
            "user@1000.service",
        ),
        ("0::/system.slice/docker-0123abcd.scope\n", "docker-0123abcd.scope"),
        ("0::/\n", None),
        ("0::/system.slice\n", None),
        ("12:cpu,cpuacct:/x\n1:name=systemd:/system.slice/old.service\n", "old.service"),
        ("1:name=systemd:/system.slice/v1.service\n0::/system.slice/v1.service\n", "v1.service"),
        ("", None),
        ("garbage", None),
    ],
)
def test_unit_mapping(cgroup: str, unit: str | None) -> None:
    assert unit_of_cgroup(cgroup_path(cgroup)) == unit


def test_systemctl_show_batch() -> None:
    text = (
        "Id=vllm.service\nActiveState=active\nSubState=running\nUnitFileState=enabled\n"
        "Restart=always\nKillMode=control-group\nNRestarts=3\nMainPID=4242\n"
        "ControlGroup=/system.slice/vllm.service\nDescription=vLLM = server\n\n"
        "Id=session-4.scope\nActiveState=active\nMainPID=0\nNRestarts=\nUnitFileState=\n"
    )
    a, b = parse_systemctl_show(text)
    assert a == {
        "name": "vllm.service",
        "active_state": "active",
        "sub_state": "running",
        "unit_file_state": "enabled",
        "restart": "always",
        "kill_mode": "control-group",
        "n_restarts": 3,
        "main_pid": 4242,
        "control_group": "/system.slice/vllm.service",
        "description": "vLLM = server",
    }
    assert b == {"name": "session-4.scope", "active_state": "active"}


def test_nvidia_smi_csv_with_na_and_lost_gpu() -> None:
    text = (
        "0, GPU-aaa, NVIDIA H100 80GB HBM3, 81559, 1000, 5, 30, 70.00, 700.00\n"
        "1, GPU-bbb, NVIDIA H100 80GB HBM3, 81559, [N/A], [Not Supported], [N/A], "
        "[Insufficient Permissions], [N/A]\n"
        "2, GPU-ccc, [GPU requires reset], [Unknown Error], [Unknown Error], [Unknown Error], "
        "[Unknown Error], [Unknown Error], [Unknown Error]\n"
        "Unable to determine the device handle for GPU 0000:3F:00.0: GPU is lost\n"
    )
    gpus, errors = parse_smi_gpus(text)
    assert gpus[0]["memory_used_mib"] == 1000 and gpus[0]["power_w"] == 70.0
    assert gpus[1] == {
        "index": 1,
        "uuid": "GPU-bbb",
        "name": "NVIDIA H100 80GB HBM3",
        "memory_total_mib": 81559,
    }
    assert gpus[2]["error"] == "GPU is lost" and "memory_used_mib" not in gpus[2]
    assert len(errors) == 1 and "GPU is lost" in errors[0]
    apps = "GPU-aaa, 10, 500\nGPU-aaa, 11, [N/A]\nGPU-zzz, 12, 5\nGPU-bbb, 10, 7\n"
    holders, errors = parse_smi_apps(apps, {"GPU-aaa": 0, "GPU-bbb": 1})
    assert holders == {10: {0: 500, 1: 7}, 11: {0: -1}}
    assert len(errors) == 1


def fake_proc(
    root: Path,
    pid: int,
    comm: str,
    cgroup: str,
    ppid: int = 1,
    start: int = 100,
    cmdline: str = "x",
) -> None:
    d = root / "proc" / str(pid)
    d.mkdir(parents=True)
    (d / "stat").write_text(stat_line(pid, comm, "S", ppid, start))
    (d / "cgroup").write_text(f"0::{cgroup}\n")
    (d / "cmdline").write_text(cmdline.replace(" ", "\0") + "\0")


class FakeGpus:
    def __init__(self, holders: dict[int, dict[int, int]]) -> None:
        self.holders = holders

    def read(self):  # type: ignore[no-untyped-def]
        return [{"index": 0, "memory_used_mib": 10}], self.holders, []


def test_collector_includes_unit_members_and_batches_systemctl(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "stat").write_text("cpu 0\nbtime 1000\n")
    unit_cg = "/system.slice/vllm.service"
    fake_proc(tmp_path, 100, "vllm", unit_cg, cmdline="python -m vllm serve")
    fake_proc(tmp_path, 101, "VLLM::Worker", unit_cg, ppid=100)
    fake_proc(tmp_path, 200, "orphan", unit_cg + "/sub", ppid=1)
    fake_proc(tmp_path, 300, "notebook", "/user.slice/user-1000.slice/session-4.scope")
    cg = tmp_path / "cgroup" / unit_cg.strip("/")
    (cg / "sub").mkdir(parents=True)
    (cg / "cgroup.procs").write_text("100\n101\n")
    (cg / "sub" / "cgroup.procs").write_text("200\n")
    (tmp_path / "cgroup" / "cgroup.controllers").write_text("")
    calls = tmp_path / "calls"
    systemctl = tmp_path / "systemctl"
    systemctl.write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\n'
        "printf 'Id=session-4.scope\\nActiveState=active\\n\\nId=vllm.service\\n"
        "ActiveState=active\\nRestart=always\\nMainPID=100\\n'\n"
    )
    systemctl.chmod(systemctl.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "run").mkdir()
    collector = HostCollector(
        gpus=FakeGpus({101: {0: 5000}, 200: {0: 3000}, 300: {0: -1}}),
        proc=ProcReader(str(tmp_path / "proc"), str(tmp_path / "cgroup")),
        units=UnitReader(str(systemctl), str(tmp_path / "run")),
    )
    snap = collector.sample()
    assert set(snap["procs"]) == {"100", "101", "200", "300"}  # main pid joins as tree root
    assert snap["procs"]["100"]["cmdline"] == "python -m vllm serve"
    assert "gpu_memory_mib" not in snap["procs"]["100"]
    assert snap["procs"]["200"]["unit"] == "vllm.service"
    assert snap["procs"]["300"]["gpu_memory_mib"] == {"0": -1}
    assert set(snap["units"]) == {"vllm.service", "session-4.scope"}
    assert snap["units"]["vllm.service"]["main_pid"] == 100
    collector.sample()  # nothing changed: the cached unit states serve
    lines = calls.read_text().splitlines()
    assert len(lines) == 1 and lines[0].endswith("-- session-4.scope vllm.service")
    (tmp_path / "proc" / "200" / "stat").unlink()  # the orphan died and let go
    collector.gpus.holders.pop(200)
    (cg / "sub" / "cgroup.procs").write_text("")
    later = collector.sample()
    assert "200" not in later["procs"] and len(calls.read_text().splitlines()) == 2


def test_no_systemd_is_an_error_not_an_exception(tmp_path: Path) -> None:
    units = UnitReader("systemctl", str(tmp_path / "no-run-systemd"))
    assert units.read({"a.service"}, None) == ([], ["host is not running systemd: units unknown"])


def test_no_driver_is_an_error_not_an_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus.shutil, "which", lambda name: None)
    monkeypatch.setattr(gpus, "load_pynvml", lambda src: (_ for _ in ()).throw(OSError("x")))
    reader, kind = gpu_reader(None)
    assert reader.read()[0] == [] and kind == "none"
    assert "nvidia-smi not found" in reader.read()[2][0]


def test_signal_program_checks_identity_here(tmp_path: Path) -> None:
    pid = os.getpid()
    start = ProcReader().start_ticks(pid)
    assert start is not None
    assert send_signal(pid, start + 1, 0) == "mismatch"
    assert send_signal(pid, None, 0) == "mismatch"
    assert send_signal(pid, start, 0) == "sent"  # signal 0: existence check only
    assert send_signal(2**22 + 7, 1, 0) == "gone"


def test_validation_before_any_command() -> None:
    assert systemctl_argv("stop", "vllm.service", sudo=True) == [
        "sudo",
        "-n",
        "systemctl",
        "stop",
        "--",
        "vllm.service",
    ]
    for bad in [
        "--now.service",
        "a b.service",
        "x.service;reboot",
        "x",
        "x.foo",
        "$(x).service",
        "",
        "a/b.service",
    ]:
        with pytest.raises(ValueError):
            validate_unit(bad)
    assert validate_unit("user@1000.service") == "user@1000.service"
    for pid in [0, -1, 1, True, "12", 2**40]:
        with pytest.raises(ValueError):
            validate_pid(pid)  # type: ignore[arg-type]


def test_targets() -> None:
    assert parse_target("ssh://op@127.0.0.1:2222") == SshTarget("127.0.0.1", "op", 2222)
    assert parse_target("root@gpu01") == SshTarget("gpu01", "root", None)
    assert parse_target("gpu01") == SshTarget("gpu01")


def test_shell_frame_parses_like_the_collector() -> None:
    frame = [
        "@frame 1700000000",
        "@btime 1000 100",
        "@gpus",
        "|0, GPU-aaa, NVIDIA H100, 81559, 700, 0, 30, 70.00, 700.00",
        "@apps",
        "|GPU-aaa, 55, 700",
        "@stat 55",
        "|" + stat_line(55, "py thon)", start=500).strip(),
        "@user 55",
        "|root",
        "@cmdline 55",
        "|python3 serve.py ",
        "@cgroup 55",
        "|0::/system.slice/vllm.service",
        "@units",
        "|Id=vllm.service",
        "|ActiveState=active",
        "@end",
    ]
    state = shell.parse_frame(frame)
    p = state["procs"]["55"]
    assert p["name"] == "py thon)" and p["start_ticks"] == 500 and p["started_at"] == 1005.0
    assert p["unit"] == "vllm.service" and p["gpu_memory_mib"] == {"0": 700}
    assert state["units"]["vllm.service"]["active_state"] == "active"
    with pytest.raises(ProtocolError):
        shell.parse_frame(frame[:-1])


def wire(n_gpus: int = 8, n_procs: int = 500, t: float = 1.0, used: int = 1000) -> dict:
    return {
        "v": PROTOCOL,
        "host": "h",
        "taken_at": t,
        "source": "nvml",
        "errors": [],
        "can_act": True,
        "gpus": {
            str(i): {
                "index": i,
                "uuid": f"GPU-{i}",
                "name": "NVIDIA H100 80GB HBM3",
                "memory_total_mib": 81559,
                "memory_used_mib": used + i,
                "utilization_pct": int(t) % 100,
                "temperature_c": 40 + int(t) % 3,
                "power_w": 300.0 + t % 7,
                "power_limit_w": 700.0,
            }
            for i in range(n_gpus)
        },
        "procs": {
            str(1000 + p): {
                "pid": 1000 + p,
                "ppid": 1,
                "start_ticks": 5000 + p,
                "started_at": 1.7e9,
                "state": "S",
                "user": "svc",
                "name": "VLLM::Worker",
                "cmdline": "python -m vllm serve x",
                "cgroup": "/system.slice/v.service",
                "unit": "v.service",
                "gpu_memory_mib": {str(p % 8): 100},
            }
            for p in range(n_procs)
        },
        "units": {"v.service": {"name": "v.service", "active_state": "active"}},
    }


def test_patch_per_sample_is_small_for_8_gpus_and_500_processes() -> None:
    a, b = wire(t=1.0), wire(t=2.0, used=900)
    full = json.dumps({"k": "full", "s": a}, separators=(",", ":"))
    patch = json.dumps({"k": "patch", "s": merge_patch(a, b)}, separators=(",", ":"))
    assert len(patch) < 2048 < len(full)
    decoder = SnapshotDecoder("h")
    decoder.feed(full.encode())
    assert decoder.feed(patch.encode()) == decoder.feed(json.dumps({"k": "full", "s": b}).encode())


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=3))
json_obj = st.recursive(
    st.dictionaries(st.text(max_size=3), json_leaf, max_size=4),
    lambda inner: st.dictionaries(st.text(max_size=3), st.one_of(json_leaf, inner), max_size=4),
    max_leaves=20,
)


def strip_none(d: dict) -> dict:
    return {k: strip_none(v) if isinstance(v, dict) else v for k, v in d.items() if v is not None}


@given(json_obj, json_obj)
def test_merge_patch_round_trips(a: dict, b: dict) -> None:
    a, b = strip_none(a), strip_none(b)
    assert apply_merge_patch(a, merge_patch(a, b)) == b


@settings(max_examples=300)
@given(
    st.lists(
        st.one_of(
            st.binary(max_size=200),
            json_obj.map(lambda o: json.dumps(o).encode()),
            st.builds(
                lambda o, k: json.dumps({"k": k, "s": o}).encode(),
                json_obj,
                st.sampled_from(["full", "patch", "error", "x"]),
            ),
            st.builds(
                lambda n, t: json.dumps({"k": "full", "s": {**wire(1, 2), "taken_at": t}}).encode()[
                    :n
                ],
                st.integers(0, 2000),
                st.floats(allow_nan=True),
            ),
        ),
        max_size=5,
    )
)
def test_decoder_raises_only_protocol_error(lines: list[bytes]) -> None:
    decoder = SnapshotDecoder("h")
    for line in lines:
        try:
            decoder.feed(line)
        except ProtocolError:
            pass


def test_pinned_stat_fds_follow_process_identity(tmp_path: Path) -> None:
    """Known processes keep /proc/PID/stat open; a dead one is dropped and its fd closed."""
    import subprocess

    sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(3)]
    try:
        import time

        time.sleep(0.3)  # let them settle asleep: an unchanged process keeps its dict
        reader = ProcReader(fd_limit=2)  # the third process takes the open/read/close path
        first = [reader.read(p.pid) for p in sleepers]
        assert all(info is not None for info in first) and reader.pinned == 2
        again = [reader.read(p.pid) for p in sleepers]
        assert all(a is b for a, b in zip(first, again, strict=True))  # unchanged: same dict
        reader.forget_unseen()
        for p in sleepers[:2]:
            p.kill()
            p.wait()  # reaped: the pinned fds now name processes that are gone
        assert reader.read(sleepers[0].pid) is None and reader.pinned == 1
        assert reader.read(sleepers[2].pid) is not None
        reader.forget_unseen()  # sleepers[1] was not read: forgotten, its fd closed
        assert reader.pinned == 0 and set(reader.known) == {sleepers[2].pid}
        reader.stale_all()
        info = reader.read(sleepers[2].pid)
        assert info is not None and info["cmdline"] == "sleep 60" and info["ppid"] == os.getpid()
        reader.close()
        assert not reader.known
    finally:
        for p in sleepers:
            p.kill()
            p.wait()


def test_merge_patch_skips_shared_dicts() -> None:
    shared = {"pid": 1, "state": "S"}
    assert merge_patch({"procs": {"1": shared}}, {"procs": {"1": shared}}) == {}


def test_stream_sees_holders_die_and_appear_with_pinned_fds(fakegpu_state) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    """The real collector on the stand-in driver: a holder killed between samples leaves the
    next snapshots, a new one appears with its own identity, the others stay as they were."""
    import subprocess
    import time

    from gpudash.protocol.payload import collector_argv, payload

    st = fakegpu_state.init(gpus=2, teardown_ms=0)
    a = st.hold(0, 1000, name="worker-a")
    b = st.hold(1, 2000, name="worker-b")
    argv = collector_argv(sys.executable, "stream", interval=0.05, sudo=False)
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=st.env)
    assert proc.stdin and proc.stdout
    proc.stdin.write(payload(with_pynvml=False))
    proc.stdin.flush()
    state: dict = {}

    def until(check, timeout: float = 10.0) -> dict:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = json.loads(proc.stdout.readline())
            base = {} if message["k"] == "full" else dict(state)
            merged = apply_merge_patch(base, message["s"])
            state.clear()
            state.update(merged)
            if check(state["procs"]):
                return state["procs"]
        raise AssertionError(f"not seen in time: {state.get('procs')}")

    try:
        procs = until(lambda p: {str(a.pid), str(b.pid)} <= set(p))
        assert procs[str(a.pid)]["gpu_memory_mib"] == {"0": 1000}
        assert procs[str(b.pid)]["gpu_memory_mib"] == {"1": 2000}
        b_before = dict(procs[str(b.pid)])
        st.kill(a)
        c = st.hold(0, 3000, name="worker-c")
        procs = until(lambda p: str(a.pid) not in p and str(c.pid) in p)
        assert procs[str(c.pid)]["gpu_memory_mib"] == {"0": 3000}
        assert procs[str(c.pid)]["start_ticks"] == ProcReader().start_ticks(c.pid)
        # b as it was: its measurements (CPU, RSS) may appear or move meanwhile (a first
        # reading has no CPU yet), its identity and holdings may not
        moving = {"cpu_pct", "rss_mib"}
        assert {k: v for k, v in procs[str(b.pid)].items() if k not in moving} == {
            k: v for k, v in b_before.items() if k not in moving}
        st.cli("fault", "procmem-na")  # usedGpuMemory N/A through the ctypes fast path
        procs = until(lambda p: p.get(str(c.pid), {}).get("gpu_memory_mib") == {"0": -1})
        assert procs[str(b.pid)]["gpu_memory_mib"] == {"1": -1}
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)


# ------------------------------------------------ pidfds: exits exact, state in rotation

needs_pidfd = pytest.mark.skipif(
    ProcReader().poller is None, reason="no pidfd_open here: every sample re-reads every stat"
)


def _sleepers(n: int) -> list:  # type: ignore[type-arg]
    import subprocess
    import time

    procs = [subprocess.Popen(["sleep", "60"]) for _ in range(n)]
    time.sleep(0.2)  # settled asleep (S)
    return procs


def _stat_of(pid: int) -> tuple[str, str, int, int] | None:
    return parse_stat(Path(f"/proc/{pid}/stat").read_text())


def _collector(holders: dict[int, dict[int, int]], stat_every: int, tmp_path: Path
               ) -> HostCollector:
    return HostCollector(
        gpus=FakeGpus(holders),
        proc=ProcReader(stat_every=stat_every),
        units=UnitReader("systemctl", str(tmp_path / "no-systemd")),
    )


@needs_pidfd
def test_holder_killed_between_samples_is_gone_in_the_next_one(tmp_path: Path) -> None:
    """No rotation turn is ever due (stat_every huge): exits still show the very next sample."""
    import time

    a, b, c = _sleepers(3)
    collector = _collector({p.pid: {0: 100} for p in (a, b, c)}, 10**9, tmp_path)
    try:
        first = collector.sample()
        assert first["procs"][str(a.pid)]["state"] == "S"
        again = collector.sample()  # nothing changed and none is due: the same dicts
        assert all(again["procs"][str(p.pid)] is first["procs"][str(p.pid)] for p in (a, b, c))
        a.kill()
        a.wait()  # reaped: gone from /proc
        b.kill()  # not reaped: a zombie
        while (_stat_of(b.pid) or ("", "", 0, 0))[1] != "Z":
            time.sleep(0.01)
        snap = collector.sample()  # the driver still lists both (it lags): not as they were
        assert snap["procs"][str(a.pid)] == {"pid": a.pid, "gpu_memory_mib": {"0": 100},
                                           "unreadable": "gone"}
        assert snap["procs"][str(b.pid)]["state"] == "Z"
        assert snap["procs"][str(c.pid)] is first["procs"][str(c.pid)]
        collector.gpus.holders.pop(a.pid)  # type: ignore[attr-defined]
        assert str(a.pid) not in collector.sample()["procs"]
        assert a.pid not in collector.proc.known
    finally:
        for p in (a, b, c):
            p.kill()
            p.wait()
        collector.proc.close()


@needs_pidfd
def test_holder_whose_parent_dies_shows_its_new_parent_next_sample(tmp_path: Path) -> None:
    import signal
    import subprocess

    shell_proc = subprocess.Popen(
        ["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE, text=True
    )
    assert shell_proc.stdout is not None
    child = int(shell_proc.stdout.readline())
    collector = _collector({child: {0: 100}}, 10**9, tmp_path)
    try:
        assert collector.sample()["procs"][str(child)]["ppid"] == shell_proc.pid
        collector.sample()
        shell_proc.kill()
        shell_proc.wait()  # its child is re-parented to init or the nearest subreaper
        new_parent = (_stat_of(child) or ("", "", 0, 0))[2]
        assert new_parent != shell_proc.pid
        assert collector.sample()["procs"][str(child)]["ppid"] == new_parent
    finally:
        shell_proc.kill()
        shell_proc.wait()
        os.kill(child, signal.SIGKILL)
        collector.proc.close()


@needs_pidfd
def test_stopped_holder_shows_T_within_the_rotation_and_at_once_when_signalled(
    tmp_path: Path,
) -> None:
    import signal
    import time

    a, b = _sleepers(2)
    stat_every = STAT_EVERY
    collector = _collector({a.pid: {0: 1}, b.pid: {0: 2}}, stat_every, tmp_path)
    try:
        collector.sample()
        collector.sample()
        os.kill(a.pid, signal.SIGSTOP)  # from outside: only the rotation sees it
        while (_stat_of(a.pid) or ("", "", 0, 0))[1] != "T":
            time.sleep(0.01)
        states = [collector.sample()["procs"][str(a.pid)]["state"] for _ in range(stat_every)]
        assert "T" in states and states[-1] == "T"  # at most stat_every - 1 samples late
        assert collector.proc.known[a.pid].hot  # and now re-read every sample
        collector.sample()
        assert send_signal(b.pid, collector.proc.known[b.pid].start, signal.SIGSTOP)
        collector.proc.watch(b.pid)  # what the serve mode's signal op does
        while (_stat_of(b.pid) or ("", "", 0, 0))[1] != "T":
            time.sleep(0.01)
        assert collector.sample()["procs"][str(b.pid)]["state"] == "T"  # the very next one
        os.kill(a.pid, signal.SIGCONT)
        while (_stat_of(a.pid) or ("", "", 0, 0))[1] == "T":
            time.sleep(0.01)
        assert collector.sample()["procs"][str(a.pid)]["state"] != "T"  # T is re-read each time
    finally:
        for p in (a, b):
            p.kill()
            p.wait()
        collector.proc.close()


class _CountingReader(ProcReader):
    def __init__(self, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(**kwargs)
        self.reads: dict[int, int] = {}

    def _update(self, known, data):  # type: ignore[no-untyped-def]
        self.reads[known.pid] = self.reads.get(known.pid, 0) + 1
        return super()._update(known, data)


@needs_pidfd
def test_unchanged_processes_are_reread_in_rotation(tmp_path: Path) -> None:
    sleepers = _sleepers(6)
    reader = _CountingReader(stat_every=4)
    collector = HostCollector(
        gpus=FakeGpus({p.pid: {0: 1} for p in sleepers}),
        proc=reader,
        units=UnitReader("systemctl", str(tmp_path / "no-systemd")),
    )
    try:
        collector.sample()
        collector.sample()  # new processes settle (first reads, parents watched)
        reader.reads.clear()
        for _ in range(8):
            collector.sample()
        counts = {p.pid: reader.reads.get(p.pid) for p in sleepers}
        assert counts == {p.pid: 2 for p in sleepers}  # every 4th sample, no more
        reader.reads.clear()
        reader.stale_all()
        collector.sample()
        counts = {p.pid: reader.reads.get(p.pid) for p in sleepers}
        assert counts == {p.pid: 1 for p in sleepers}  # stale_all re-reads at once
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
        reader.close()


def test_fd_budget_raises_a_low_soft_limit_within_the_hard_one() -> None:
    import subprocess
    import sys

    code = (
        "import resource\n"
        "from gpudash.collector.host.procfs import fd_budget\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))\n"
        "budget = fd_budget()\n"
        "print(budget, resource.getrlimit(resource.RLIMIT_NOFILE)[0], hard)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=30, check=True).stdout.split()
    budget, soft, hard = map(int, out)
    if hard != -1 and hard < 4 * 4096 + 256:
        assert soft == hard  # raised as far as allowed
    else:
        assert soft == 4 * 4096 + 256 and budget == 4096
