"""Per-process SM utilisation: from the driver's samples, through the collector and the
wire, into the model; absent where the driver cannot tell, never breaking a sample."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fakegpu.fixtures import fakegpu_build, fakegpu_state  # noqa: F401  (fixtures)

from gpudash.collector.host.collector import HostCollector
from gpudash.collector.host.gpus import NvmlReader, SmiReader
from gpudash.collector.host.procs import ProcReader
from gpudash.collector.host.protocol import PROTOCOL, UTIL_WINDOW_US
from gpudash.collector.host.units import UnitReader
from gpudash.protocol.payload import collector_argv, payload
from gpudash.protocol.source import ProtocolError
from gpudash.protocol.wire import SnapshotDecoder, apply_merge_patch

# ------------------------------------------------------------ the real collector, stand-in


def _stream(st: Any) -> tuple[subprocess.Popen[bytes], Any]:
    argv = collector_argv(sys.executable, "stream", interval=0.05, sudo=False)
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=st.env)
    assert proc.stdin and proc.stdout
    proc.stdin.write(payload(with_pynvml=False))
    proc.stdin.flush()
    state: dict[str, Any] = {}

    def until(check: Any, timeout: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert proc.stdout is not None
            message = json.loads(proc.stdout.readline())
            base = {} if message["k"] == "full" else dict(state)
            merged = apply_merge_patch(base, message["s"])
            state.clear()
            state.update(merged)
            if check(state["procs"]):
                return dict(state["procs"])
        raise AssertionError(f"not seen in time: {state.get('procs')}")

    return proc, until


def test_collector_sends_each_holders_sm_utilisation(fakegpu_state) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    """An operator sees which process keeps a GPU busy: the busy worker's own SM %, 0 for
    the idle one beside it (the driver samples only busy processes), a change within a
    sample or two, and the field gone once the driver says it cannot tell."""
    st = fakegpu_state.init(gpus=2, teardown_ms=0)
    busy = st.hold(0, 1000, name="VLLM::Worker_TP0", sm_util=87)
    idle = st.hold(0, 500, name="orphan")
    other = st.hold(1, 700, name="VLLM::Worker_TP1", sm_util=40)
    proc, until = _stream(st)

    def sm(pid: int) -> Any:
        return lambda p: p.get(str(pid), {}).get("sm_util_pct")

    try:
        procs = until(lambda p: sm(busy.pid)(p) == 87 and sm(other.pid)(p) == 40)
        assert procs[str(idle.pid)]["sm_util_pct"] == 0
        # every sample reads only what is newer: the figure holds while the process is busy
        time.sleep(0.3)
        procs = until(lambda p: True)
        assert procs[str(busy.pid)]["sm_util_pct"] == 87
        st.cli("set", "--pid", str(busy.pid), "sm_util=15")
        until(lambda p: sm(busy.pid)(p) == 15)
        st.cli("set", "--pid", str(busy.pid), "sm_util=0")
        until(lambda p: sm(busy.pid)(p) == 0)
        # an older GPU: NOT_SUPPORTED on GPU 1 -> its process has no figure; the sample goes on
        st.cli("fault", "unsupported", "process_util", "--gpu", "1")
        procs = until(lambda p: "sm_util_pct" not in p.get(str(other.pid), {"sm_util_pct": 1}))
        assert procs[str(other.pid)]["gpu_memory_mib"] == {"1": 700}
        assert procs[str(idle.pid)]["sm_util_pct"] == 0
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=10)


def test_nvidia_smi_fallback_has_no_sm_utilisation(fakegpu_state, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    st = fakegpu_state.init(gpus=1)
    p = st.hold(0, 1000, sm_util=90)
    old = dict(os.environ)
    os.environ.update(st.env)
    try:
        c = HostCollector(
            gpus=SmiReader(str(st.out / "nvidia-smi")),
            source="nvidia-smi",
            proc=ProcReader(),
            units=UnitReader("systemctl", str(tmp_path / "no-systemd")),
        )
        snap = c.sample()
    finally:
        os.environ.clear()
        os.environ.update(old)
    info = snap["procs"][str(p.pid)]
    assert info["gpu_memory_mib"] == {"0": 1000} and "sm_util_pct" not in info


# ------------------------------------------------------------ the reader against drivers


class FakeNvml:
    """Just what NvmlReader asks, with process utilisation samples as a test scripts them."""

    NVML_SUCCESS = 0
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NOT_FOUND = 6
    NVML_ERROR_INSUFFICIENT_SIZE = 7
    NVML_ERROR_GPU_IS_LOST = 15
    NVML_ERROR_FUNCTION_NOT_FOUND = 13

    class NVMLError(Exception):
        def __init__(self, value: int) -> None:
            super().__init__(value)
            self.value = value

    def __init__(self, procs: list[tuple[int, int]], samples: Any) -> None:
        self.procs = procs
        self.samples = samples  # list of (pid, stamp, sm), or an error code
        self.asked: list[int] = []

    def nvmlInit(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return 1
    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i
    def nvmlDeviceGetName(self, h: int) -> str:
        return "H100"
    def nvmlDeviceGetUUID(self, h: int) -> str:
        return "GPU-0"
    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return [SimpleNamespace(pid=p, usedGpuMemory=m << 20) for p, m in self.procs]
    def nvmlDeviceGetGraphicsRunningProcesses(self, h: int) -> list[Any]:
        return []

    def nvmlDeviceGetProcessUtilization(self, h: int, seen: int) -> list[Any]:
        self.asked.append(seen)
        if isinstance(self.samples, int):
            raise self.NVMLError(self.samples)
        return [SimpleNamespace(pid=p, timeStamp=t, smUtil=s) for p, t, s in self.samples]


def test_reader_takes_the_most_of_each_pids_samples_of_the_last_second() -> None:
    now = int(time.time() * 1e6)
    nvml = FakeNvml([(10, 100), (11, 100), (12, 100)],
                    [(10, now - 200_000, 30), (10, now - 100_000, 80), (11, now - 150_000, 20),
                     (12, now - 5_000_000, 90)])  # a driver that repeats an old sample
    reader = NvmlReader(nvml)
    reader.read()
    assert reader.sm_util == {10: 80, 11: 20, 12: 0}
    assert abs(nvml.asked[0] - (now - UTIL_WINDOW_US)) < 500_000  # the window
    # A read between two of the driver's samples (it samples a few times a second) still
    # sees the busy worker busy: it read 0 there when it asked only for what was newer.
    reader.read()
    assert reader.sm_util == {10: 80, 11: 20, 12: 0}
    nvml.samples = FakeNvml.NVML_ERROR_NOT_FOUND  # nothing busy in the last second
    reader.read()
    assert reader.sm_util == {10: 0, 11: 0, 12: 0}


@pytest.mark.parametrize("code", [FakeNvml.NVML_ERROR_NOT_SUPPORTED,
                                  FakeNvml.NVML_ERROR_FUNCTION_NOT_FOUND])
def test_an_older_driver_leaves_the_field_out_and_is_not_asked_again(code: int) -> None:
    nvml = FakeNvml([(10, 100)], code)
    reader = NvmlReader(nvml)
    gpus, holders, errors = reader.read()
    assert reader.sm_util == {} and holders == {10: {0: 100}} and errors == []
    reader.read()
    assert len(nvml.asked) == 1


def test_a_binding_without_the_function_leaves_the_field_out() -> None:
    nvml = FakeNvml([(10, 100)], [])
    del FakeNvml.nvmlDeviceGetProcessUtilization  # an old pynvml
    try:
        reader = NvmlReader(nvml)
        _gpus, holders, _errors = reader.read()
    finally:
        FakeNvml.nvmlDeviceGetProcessUtilization = _sampler  # type: ignore[attr-defined]
    assert reader.sm_util == {} and holders == {10: {0: 100}}


_sampler = FakeNvml.nvmlDeviceGetProcessUtilization


# ------------------------------------------------------------------ garbage from a host


def _state(sm: object) -> dict[str, Any]:
    return {
        "v": PROTOCOL, "host": "h", "taken_at": 1.7e9, "source": "nvml",
        "errors": [], "can_act": True, "gpus": {},
        "procs": {"100": {"pid": 100, "name": "w", "gpu_memory_mib": {"0": 10},
                          "sm_util_pct": sm}},
        "units": {},
    }


def _decode(sm: object) -> Any:
    return SnapshotDecoder("h").feed(json.dumps({"k": "full", "s": _state(sm)}).encode())


def test_sm_utilisation_within_bounds_is_kept() -> None:
    assert _decode(55).process(100).sm_util_pct == 55
    assert _decode(None).process(100).sm_util_pct is None


@pytest.mark.parametrize("sm", [150, -1, 10**30])
def test_sm_utilisation_out_of_bounds_is_na_with_a_reason(sm: int) -> None:
    snap = _decode(sm)
    assert snap.process(100).sm_util_pct is None
    assert any("sm_util_pct" in e for e in snap.errors)


@pytest.mark.parametrize("sm", ["x", 55.5, True, [1]])
def test_sm_utilisation_of_the_wrong_kind_is_a_clear_protocol_error(sm: object) -> None:
    with pytest.raises(ProtocolError, match="sm_util_pct"):
        _decode(sm)
