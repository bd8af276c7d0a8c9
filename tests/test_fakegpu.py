"""Fidelity tests for the stand-in NVIDIA driver in tests/fakegpu.

Real tools (pynvml, gpustat, nvitop) run in subprocesses so that each loads
libnvidia-ml.so.1 fresh from LD_LIBRARY_PATH.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from fakegpu.fixtures import fakegpu_build, fakegpu_state  # noqa: F401  (fixtures)

MIB = 1024 * 1024

# Reference lines captured from real nvidia-smi (driver 5xx) for structure comparison.
REAL_QUERY_GPU_HEADER = "index, name, memory.used [MiB], memory.total [MiB], utilization.gpu [%], temperature.gpu, power.draw [W]"
REAL_QUERY_GPU_ROW = "0, NVIDIA H100 80GB HBM3, 71234 MiB, 81559 MiB, 97 %, 64, 512.34 W"
REAL_APPS_HEADER = "pid, process_name, used_gpu_memory [MiB]"
REAL_APPS_ROW = "2143, /usr/bin/python3, 71200 MiB"
REAL_L_LINE = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-67a571b1-79ee-1016-8ea3-c1fff3f1c1d2)"


def shape(line: str) -> list[str]:
    """Structural signature of a CSV line: per cell a token class with its unit."""
    out = []
    for cell in line.split(", "):
        if re.fullmatch(r"\d+", cell):
            out.append("int")
        elif m := re.fullmatch(r"\d+ (MiB|%)", cell):
            out.append("int " + m.group(1))
        elif re.fullmatch(r"\d+\.\d\d W", cell):
            out.append("float2 W")
        elif re.fullmatch(r"\[[A-Za-z/ ]+\]", cell):
            out.append("bracket")
        else:
            out.append("text")
    return out


def pyrun(st, code: str, timeout: float = 20) -> dict:
    """Run python code with the stand-in env; it must print one JSON document."""
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=st.env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def smi(st, *args: str) -> subprocess.CompletedProcess:
    return st.run(os.path.join(st.out, "nvidia-smi"), *args, timeout=20)


def used_mib(st, gpu: int) -> int:
    r = smi(st, "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", str(gpu))
    assert r.returncode == 0, r.stdout
    return int(r.stdout.strip())


def app_pids(st, gpu: int | None = None) -> list[int]:
    args = ["--query-compute-apps=pid", "--format=csv,noheader"]
    if gpu is not None:
        args += ["-i", str(gpu)]
    r = smi(st, *args)
    assert r.returncode == 0, r.stdout
    return [int(x) for x in r.stdout.split()]


PYNVML_DUMP = """
    import json, pynvml as N
    N.nvmlInit()
    out = {"count": N.nvmlDeviceGetCount(), "driver": N.nvmlSystemGetDriverVersion(), "gpus": []}
    for i in range(out["count"]):
        h = N.nvmlDeviceGetHandleByIndex(i)
        m2 = N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)
        m1 = N.nvmlDeviceGetMemoryInfo(h)
        uuid = N.nvmlDeviceGetUUID(h)
        bus = N.nvmlDeviceGetPciInfo(h).busId
        assert N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByUUID(uuid)) == i
        assert N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByPciBusId(bus)) == i
        out["gpus"].append(dict(
            name=N.nvmlDeviceGetName(h), uuid=uuid, bus=bus,
            total=m2.total, used=m2.used, free=m2.free, reserved=m2.reserved,
            v1_used=m1.used, v1_free=m1.free,
            temp=N.nvmlDeviceGetTemperature(h, N.NVML_TEMPERATURE_GPU),
            tempV=N.nvmlDeviceGetTemperatureV(h, N.NVML_TEMPERATURE_GPU),
            util=N.nvmlDeviceGetUtilizationRates(h).gpu,
            power=N.nvmlDeviceGetPowerUsage(h), limit=N.nvmlDeviceGetEnforcedPowerLimit(h),
            mig=list(N.nvmlDeviceGetMigMode(h)),
            procs=sorted((p.pid, p.usedGpuMemory) for p in N.nvmlDeviceGetComputeRunningProcesses(h)),
            procs_v2=sorted((p.pid, p.usedGpuMemory) for p in N.nvmlDeviceGetComputeRunningProcesses_v2(h)),
            gfx=len(N.nvmlDeviceGetGraphicsRunningProcesses(h)),
        ))
    N.nvmlShutdown()
    print(json.dumps(out))
"""


def test_pynvml_reads_state(fakegpu_state):
    st = fakegpu_state.init(
        gpus=3,
        name="NVIDIA RTX PRO 6000 Blackwell",
        total_mib=97887,
        reserved_mib=512,
        baseline_mib=100,
    )
    st.cli("set", "--gpu", "1", "util_gpu=85", "temp=71", "power_mw=412345")
    a = st.hold(0, 96000 - 512 - 100, name="VLLM::Worker_TP0")
    b = st.hold([1, 2], 2000)
    status = json.loads(st.cli("status", "--json").stdout)
    d = pyrun(st, PYNVML_DUMP)
    assert d["count"] == 3 and d["driver"] == status["driver_version"]
    for i, g in enumerate(d["gpus"]):
        s = status["gpus"][i]
        assert g["name"] == "NVIDIA RTX PRO 6000 Blackwell"
        assert g["uuid"] == s["uuid"] and re.fullmatch(
            r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", g["uuid"]
        )
        assert g["bus"] == s["pci_bus_id"]
        assert g["total"] == 97887 * MIB and g["reserved"] == 512 * MIB
        assert g["used"] + g["free"] + g["reserved"] == g["total"]
        assert g["v1_used"] == g["used"] + g["reserved"] and g["v1_free"] == g["free"]
        assert g["mig"] == [0, 0] and g["gfx"] == 0
        assert g["temp"] == g["tempV"]
    assert len({g["uuid"] for g in d["gpus"]}) == 3
    assert d["gpus"][0]["used"] == (96000 - 512) * MIB
    assert d["gpus"][0]["procs"] == [[a.pid, (96000 - 612) * MIB]]
    assert d["gpus"][1]["procs"] == d["gpus"][2]["procs"] == [[b.pid, 2000 * MIB]]
    assert d["gpus"][1]["procs_v2"] == d["gpus"][1]["procs"]
    assert d["gpus"][1]["used"] == 2100 * MIB
    assert (d["gpus"][1]["util"], d["gpus"][1]["temp"], d["gpus"][1]["power"]) == (85, 71, 412345)


def test_v1_process_api_and_insufficient_size_protocol(fakegpu_state):
    st = fakegpu_state.init(gpus=1)
    holders = [st.hold(0, 100 + i) for i in range(3)]
    d = pyrun(
        st,
        """
        import ctypes, json, pynvml as N
        N.nvmlInit(); h = N.nvmlDeviceGetHandleByIndex(0)
        lib = N.nvmlLib
        class P1(ctypes.Structure):
            _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]
        res = {}
        for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v3"):
            c = ctypes.c_uint(0)
            r0 = getattr(lib, fn)(h, ctypes.byref(c), None)
            need = c.value
            c2 = ctypes.c_uint(1)
            arr = (N.c_nvmlProcessInfo_v3_t * 1)()
            r1 = getattr(lib, fn)(h, ctypes.byref(c2), arr)
            res[fn] = [r0, need, r1, c2.value]
        c = ctypes.c_uint(8); arr = (P1 * 8)()
        assert lib.nvmlDeviceGetComputeRunningProcesses(h, ctypes.byref(c), arr) == 0
        res["v1"] = sorted([arr[i].pid, arr[i].usedGpuMemory] for i in range(c.value))
        print(json.dumps(res))
    """,
    )
    for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v3"):
        assert d[fn] == [7, 3, 7, 3]  # NVML_ERROR_INSUFFICIENT_SIZE == 7
    assert d["v1"] == sorted([p.pid, (100 + i) * MIB] for i, p in enumerate(holders))


def test_gpustat_and_nvitop_agree(fakegpu_state):
    st = fakegpu_state.init(gpus=2, total_mib=81559)
    st.cli("set", "--gpu", "0", "util_gpu=42", "temp=55")
    a = st.hold(0, 30000)
    b = st.hold(1, 1234)
    r = st.run(sys.executable, "-m", "gpustat", "--json", timeout=30)
    assert r.returncode == 0, r.stderr
    gs = json.loads(r.stdout)
    assert [g["memory.used"] for g in gs["gpus"]] == [30000, 1234]
    assert [g["memory.total"] for g in gs["gpus"]] == [81559, 81559]
    assert gs["gpus"][0]["utilization.gpu"] == 42 and gs["gpus"][0]["temperature.gpu"] == 55
    assert [[p["pid"], p["gpu_memory_usage"]] for p in gs["gpus"][0]["processes"]] == [
        [a.pid, 30000]
    ]
    assert gs["gpus"][1]["processes"][0]["pid"] == b.pid
    nv = pyrun(
        st,
        """
        import json
        from nvitop import Device
        out = []
        for d in Device.all():
            out.append(dict(used=d.memory_used(), total=d.memory_total(), util=d.gpu_utilization(),
                            temp=d.temperature(), bus=d.bus_id(), uuid=d.uuid(),
                            procs=sorted([pid, p.gpu_memory()] for pid, p in d.processes().items())))
        print(json.dumps(out))
    """,
        timeout=30,
    )
    assert [d["used"] for d in nv] == [30000 * MIB, 1234 * MIB]
    assert nv[0]["procs"] == [[a.pid, 30000 * MIB]] and nv[1]["procs"] == [[b.pid, 1234 * MIB]]
    assert (nv[0]["util"], nv[0]["temp"]) == (42, 55)
    assert [d["uuid"] for d in nv] == [g["uuid"] for g in gs["gpus"]]


def test_nvidia_smi_formats(fakegpu_state):
    st = fakegpu_state.init(gpus=2, name="NVIDIA RTX PRO 6000 Blackwell", total_mib=97887)
    a = st.hold(0, 96801, name="VLLM::Worker_TP0")
    fields = "index,uuid,name,memory.total,memory.used,memory.free,memory.reserved,utilization.gpu,temperature.gpu,power.draw,power.limit,pci.bus_id,driver_version"
    r = smi(st, f"--query-gpu={fields}", "--format=csv")
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert lines[0] == (
        "index, uuid, name, memory.total [MiB], memory.used [MiB], memory.free [MiB], "
        "memory.reserved [MiB], utilization.gpu [%], temperature.gpu, power.draw [W], "
        "power.limit [W], pci.bus_id, driver_version"
    )
    assert len(lines) == 3
    row = lines[1].split(", ")
    assert row[0] == "0" and row[2] == "NVIDIA RTX PRO 6000 Blackwell"
    assert row[3:7] == ["97887 MiB", "96801 MiB", "1086 MiB", "0 MiB"]
    assert re.fullmatch(r"\d+\.\d\d W", row[9]) and row[10] == "700.00 W"
    assert re.fullmatch(r"[0-9A-F]{8}:[0-9A-F]{2}:00\.0", row[11])
    # same structure as a real capture for the same field list
    sub = "index,name,memory.used,memory.total,utilization.gpu,temperature.gpu,power.draw"
    r = smi(st, f"--query-gpu={sub}", "--format=csv")
    got_h, got_r = r.stdout.splitlines()[:2]
    assert got_h == REAL_QUERY_GPU_HEADER
    assert shape(got_r) == shape(REAL_QUERY_GPU_ROW)
    # nounits / noheader
    r = smi(
        st, "--query-gpu=memory.used,utilization.gpu,power.draw", "--format=csv,noheader,nounits"
    )
    assert re.fullmatch(r"96801, 0, \d+\.\d\d", r.stdout.splitlines()[0])
    # compute apps
    r = smi(
        st, "--query-compute-apps=pid,process_name,used_memory,gpu_uuid,gpu_bus_id", "--format=csv"
    )
    h, *rows = r.stdout.splitlines()
    assert h == "pid, process_name, used_gpu_memory [MiB], gpu_uuid, gpu_bus_id"
    assert rows == [f"{a.pid}, VLLM::Worker_TP0, 96801 MiB, {row[1]}, {row[11]}"]
    r = smi(st, "--query-compute-apps=pid,process_name,used_memory", "--format=csv")
    assert r.stdout.splitlines()[0] == REAL_APPS_HEADER
    assert shape(r.stdout.splitlines()[1])[::2] == shape(REAL_APPS_ROW)[::2]
    # -L
    r = smi(st, "-L")
    assert re.fullmatch(r"GPU (\d+): (.+) \(UUID: (GPU-[0-9a-f-]{36})\)", r.stdout.splitlines()[0])
    assert r.stdout.splitlines()[1].startswith("GPU 1: NVIDIA RTX PRO 6000 Blackwell (UUID: GPU-")
    assert re.fullmatch(r"GPU (\d+): (.+) \(UUID: (GPU-[0-9a-f-]{36})\)", REAL_L_LINE)
    # bad field
    r = smi(st, "--query-gpu=bogus", "--format=csv")
    assert r.returncode == 2 and 'Field "bogus" is not a valid field to query.' in r.stdout
    # plain table mentions the process
    r = smi(st)
    assert (
        r.returncode == 0 and "VLLM::Worker_TP0" in r.stdout and "96801MiB / 97887MiB" in r.stdout
    )


def test_nvidia_smi_loop(fakegpu_state):
    st = fakegpu_state.init(gpus=1)
    p = subprocess.Popen(
        [
            os.path.join(st.out, "nvidia-smi"),
            "--query-gpu=index,memory.used",
            "--format=csv",
            "-lms",
            "100",
        ],
        env=st.env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None
    # read as it prints (it flushes every round): three rounds, however slow the machine
    lines = [p.stdout.readline().rstrip("\n") for _ in range(4)]
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=5)
    lines += out.splitlines()
    assert p.returncode == -signal.SIGINT  # ended by the interrupt, not by itself
    assert lines[0] == "index, memory.used [MiB]"
    assert lines.count("0, 0 MiB") >= 3 and lines.count(lines[0]) == 1


def test_killed_holder_releases_after_teardown_not_before(fakegpu_state):
    st = fakegpu_state.init(gpus=1, teardown_ms=1000)
    keep = st.hold(0, 100)
    p = st.hold(0, 5000)
    assert used_mib(st, 0) == 5100
    st.kill(p, signal.SIGKILL)
    t_dead = time.monotonic()
    assert used_mib(st, 0) == 5100  # memory still held during teardown
    assert app_pids(st) == [keep.pid]  # but the dead process is no longer listed
    time.sleep(0.6)
    assert time.monotonic() - t_dead < 0.95
    assert used_mib(st, 0) == 5100
    time.sleep(0.6)
    assert used_mib(st, 0) == 100


def test_death_time_recorded_without_queries(fakegpu_state):
    """Nobody queries while the holder lives and dies; the release still happens on time."""
    st = fakegpu_state.init(gpus=1, teardown_ms=300)
    p = st.hold(0, 700)
    st.kill(p)
    time.sleep(0.6)
    assert used_mib(st, 0) == 0


def test_concurrent_holders_add_up(fakegpu_state):
    st = fakegpu_state.init(gpus=2, teardown_ms=200)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as ex:
        hs = list(ex.map(lambda i: st.hold(i % 2, 10 + i), range(24)))
    assert used_mib(st, 0) == sum(10 + i for i in range(0, 24, 2))
    assert used_mib(st, 1) == sum(10 + i for i in range(1, 24, 2))
    assert sorted(app_pids(st, 0)) == sorted(h.pid for h in hs[0::2])
    for h in hs[:12]:
        st.kill(h)
    time.sleep(0.5)
    assert used_mib(st, 0) + used_mib(st, 1) == sum(10 + i for i in range(12, 24))


def test_recycled_pid_does_not_inherit(fakegpu_state):
    st = fakegpu_state.init(gpus=1, teardown_ms=0)
    # a live process whose pid matches a stale registration with another start time
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        stale = f"h.{sleeper.pid}.1.0.0.0:4321"
        open(st.dir / "holders" / stale, "w").close()
        assert sleeper.pid not in app_pids(st)
        assert used_mib(st, 0) == 0
        assert not (st.dir / "holders" / stale).exists()  # recorded as dead
    finally:
        sleeper.kill()
        sleeper.wait()


def test_zombie_is_dead_and_stopped_keeps_holding(fakegpu_state):
    st = fakegpu_state.init(gpus=1, teardown_ms=100)
    z = st.hold(0, 300)
    s = st.hold(0, 200)
    os.kill(z.pid, signal.SIGKILL)  # not reaped: stays a zombie (state Z)
    time.sleep(0.05)
    with open(f"/proc/{z.pid}/stat") as f:
        assert f.read().rsplit(")", 1)[1].split()[0] == "Z"
    os.kill(s.pid, signal.SIGSTOP)
    time.sleep(0.4)
    try:
        assert used_mib(st, 0) == 200
        assert app_pids(st) == [s.pid]
    finally:
        os.kill(s.pid, signal.SIGCONT)


def test_library_hold_via_ctypes(fakegpu_state):
    st = fakegpu_state.init(gpus=2, teardown_ms=100)
    code = textwrap.dedent("""
        import ctypes, sys, time
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        lib.fakegpu_hold.argtypes = [ctypes.c_uint, ctypes.c_ulonglong]
        assert lib.fakegpu_hold(1, 4242) == 0
        print("ready", flush=True)
        time.sleep(60)
    """)
    p = subprocess.Popen(
        [sys.executable, "-c", code], env=st.env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert p.stdout.readline().strip() == "ready"
        assert used_mib(st, 1) == 4242 and app_pids(st, 1) == [p.pid]
    finally:
        p.kill()
        p.wait()
    time.sleep(0.4)
    assert used_mib(st, 1) == 0


# ---------------------------------- memory kept through device files by forked children


def dev_links(pid: int) -> set[str]:
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
    return out


def dev_maps(pid: int) -> set[str]:
    with open(f"/proc/{pid}/maps") as f:
        return {line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6}


def gpu_status(st, gpu: int) -> dict:
    return json.loads(st.cli("status", "--json").stdout)["gpus"][gpu]


def test_holder_opens_device_files_like_cuda(fakegpu_state):
    st = fakegpu_state.init(gpus=3, teardown_ms=100)
    p = st.hold([0, 2], 100)
    dev = st.dir / "dev"
    want = {str(dev / n) for n in ("nvidiactl", "nvidia-uvm", "nvidia0", "nvidia2")}
    assert want <= dev_links(p.pid) and want <= dev_maps(p.pid)
    assert str(dev / "nvidia1") not in dev_links(p.pid)
    assert sorted(os.listdir(dev)) == ["nvidia-uvm", "nvidia0", "nvidia1", "nvidia2", "nvidiactl"]


def test_forked_child_keeps_memory_until_it_dies_too(fakegpu_state):
    """nvitop #134: a child forked from a CUDA process inherits /dev/nvidia* and keeps the
    memory after the process NVML listed is gone; NVML never lists the child."""
    st = fakegpu_state.init(gpus=2, teardown_ms=300)
    p = st.hold(1, 5000, name="VLLM::Worker_TP1", fork_child="compile_worker")
    child = p.child_pid
    assert app_pids(st) == [p.pid]
    assert str(st.dir / "dev" / "nvidia1") in dev_links(child)
    with open(f"/proc/{child}/cmdline") as f:
        assert f.read().split("\0")[0] == "compile_worker"
    st.kill(p, signal.SIGKILL)
    time.sleep(0.6)  # twice the teardown: the holder alone would have released by now
    assert app_pids(st) == []
    assert used_mib(st, 1) == 5000
    s = gpu_status(st, 1)
    assert (s["processes"], s["detached"], s["tearing_down"]) == (0, 1, 0)
    st.kill_child(p)
    assert used_mib(st, 1) == 5000  # the teardown starts when the last copy is closed
    time.sleep(0.6)
    assert used_mib(st, 1) == 0 and gpu_status(st, 1)["detached"] == 0


FORKING_HOLDER = """
    import ctypes, os, sys, time
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    lib.fakegpu_hold.argtypes = [ctypes.c_uint, ctypes.c_ulonglong]
    assert lib.fakegpu_hold(0, 2048) == 0
    child = os.fork()  # no exec: a dataloader / compile worker
    if child == 0:
        if sys.argv[1] == "map-only":
            os.closerange(0, 65536)  # every fd closed; the driver's mappings remain
        time.sleep(120)
        os._exit(0)
    print(child, flush=True)
    time.sleep(120)
"""


@pytest.mark.parametrize("keeps", ["fds", "map-only"])
def test_child_forked_without_exec_keeps_memory_by_fd_or_mapping(fakegpu_state, keeps):
    st = fakegpu_state.init(gpus=1, teardown_ms=200)
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(FORKING_HOLDER), keeps],
        env=st.env, stdout=subprocess.PIPE, text=True,
    )
    child = int(holder.stdout.readline())
    pidfd = os.pidfd_open(child)
    try:
        time.sleep(0.1)  # the child has closed its fds (map-only)
        ctl = str(st.dir / "dev" / "nvidiactl")
        assert ctl in dev_maps(child)
        assert (ctl in dev_links(child)) == (keeps == "fds")
        assert app_pids(st) == [holder.pid]
        holder.kill()
        holder.wait()
        time.sleep(0.5)
        assert app_pids(st) == [] and used_mib(st, 0) == 2048
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        time.sleep(0.5)
        assert used_mib(st, 0) == 0
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(pidfd)


def watcher_of(holder_pid: int, within: float = 10.0) -> int:
    """The pidfd of the `fakegpu __watch` process watching this holder (proved by its
    cmdline after the pidfd is open). The holder starts it: on a loaded machine it may
    not be there yet (seen in CI), so it is looked for until ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        found = _watcher_now(holder_pid)
        if found is not None:
            return found
        assert time.monotonic() < deadline, f"no watcher for {holder_pid}"
        time.sleep(0.05)


def _watcher_now(holder_pid: int) -> int | None:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            pidfd = os.pidfd_open(int(entry))
        except OSError:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            argv = []
        if argv[1:2] == [b"__watch"] and argv[3].startswith(b"h.%d." % holder_pid):
            return pidfd
        os.close(pidfd)
    return None


def test_detached_memory_without_watcher_readers_decide(fakegpu_state):
    """The watcher was killed: readers see the holder dead, find its device file still
    locked by the child (detached), and release once the child is gone too."""
    st = fakegpu_state.init(gpus=1, teardown_ms=100)
    p = st.hold(0, 700, fork_child="dataloader")
    w = watcher_of(p.pid)
    signal.pidfd_send_signal(w, signal.SIGKILL)
    os.close(w)
    st.kill(p)
    assert app_pids(st) == [] and used_mib(st, 0) == 700
    assert [n[0] for n in os.listdir(st.dir / "holders")] == ["o"]
    st.kill_child(p)
    assert used_mib(st, 0) == 700  # "first observed dead", then the teardown
    time.sleep(0.3)
    assert used_mib(st, 0) == 0


FAULT_PROBE = """
    import json, pynvml as N
    N.nvmlInit()
    res = {}
    def probe(name, fn):
        try:
            fn(); res[name] = "ok"
        except N.NVMLError as e:
            res[name] = type(e).__name__
    probe("handle1", lambda: N.nvmlDeviceGetHandleByIndex(1))
    h = N.nvmlDeviceGetHandleByIndex(0)
    probe("procs", lambda: N.nvmlDeviceGetComputeRunningProcesses(h))
    probe("power", lambda: N.nvmlDeviceGetPowerUsage(h))
    probe("temp", lambda: N.nvmlDeviceGetTemperature(h, 0))
    probe("util", lambda: N.nvmlDeviceGetUtilizationRates(h))
    probe("mem", lambda: N.nvmlDeviceGetMemoryInfo(h))
    print(json.dumps(res))
"""


def test_faults(fakegpu_state):
    st = fakegpu_state.init(gpus=2)
    st.hold(0, 10)
    st.cli("fault", "lost", "--gpu", "1")
    st.cli("fault", "noperm", "--gpu", "0")
    st.cli("fault", "unsupported", "power,temperature", "--gpu", "0")
    res = pyrun(st, FAULT_PROBE)
    assert res == {
        "handle1": "NVMLError_GpuIsLost",
        "procs": "NVMLError_NoPermission",
        "power": "NVMLError_NotSupported",
        "temp": "NVMLError_NotSupported",
        "util": "ok",
        "mem": "ok",
    }
    r = smi(st, "--query-gpu=index,memory.used", "--format=csv")
    bus = json.loads(st.cli("status", "--json").stdout)["gpus"][1]["pci_bus_id"][4:]
    assert r.returncode == 15
    assert r.stdout.strip() == (
        f"Unable to determine the device handle for GPU {bus}: GPU is lost.  "
        "Reboot the system to recover this GPU"
    )
    assert re.fullmatch(
        r"Unable to determine the device handle for GPU 0000:[0-9A-F]{2}:00\.0: GPU is lost\.\s+Reboot the system to recover this GPU",
        r.stdout.strip(),
    )
    st.cli("fault", "clear")
    st.cli("fault", "unsupported", "power,temperature")
    r = smi(st, "--query-gpu=power.draw,temperature.gpu,memory.used", "--format=csv,noheader")
    assert r.returncode == 0 and r.stdout.splitlines() == [
        "[N/A], [N/A], 10 MiB",
        "[N/A], [N/A], 0 MiB",
    ]
    st.cli("fault", "procmem-na", "--gpu", "0")
    r = smi(st, "--query-compute-apps=used_memory", "--format=csv,noheader")
    assert r.stdout.strip() == "[N/A]"
    st.cli("fault", "clear")
    assert pyrun(st, FAULT_PROBE) == dict.fromkeys(
        ["handle1", "procs", "power", "temp", "util", "mem"], "ok"
    )


def test_slow_fault_and_no_devices(fakegpu_state):
    st = fakegpu_state.init(gpus=1)
    st.cli("fault", "slow", "--ms", "200")
    d = pyrun(
        st,
        """
        import json, time, pynvml as N
        N.nvmlInit(); h = N.nvmlDeviceGetHandleByIndex(0)
        t = time.monotonic(); N.nvmlDeviceGetMemoryInfo(h)
        print(json.dumps({"dt": time.monotonic() - t}))
    """,
    )
    assert 0.2 <= d["dt"] < 1.5
    st.init(gpus=0)
    r = smi(st, "-L")
    assert (r.returncode, r.stdout) == (6, "No devices were found\n")
    env = dict(st.env, FAKEGPU_STATE=str(st.dir / "missing"))
    r = subprocess.run(
        [os.path.join(st.out, "nvidia-smi")], env=env, capture_output=True, text=True
    )
    assert r.returncode == 9 and "couldn't communicate with the NVIDIA driver" in r.stdout


PROCESS_UTIL = """
    import json, time, pynvml as N
    N.nvmlInit(); h = N.nvmlDeviceGetHandleByIndex(0)
    def read(ts):
        try:
            return "ok", {s.pid: [s.smUtil, s.memUtil, s.timeStamp] for s in
                          N.nvmlDeviceGetProcessUtilization(h, ts)}
        except N.NVMLError as e:
            return type(e).__name__, {}
    out = {}
    kind, first = read(0)
    out["first"] = [kind, {str(k): v[:2] for k, v in first.items()}]
    last = max(v[2] for v in first.values())
    out["ts_us"] = last
    out["again"] = read(last)[0]  # nothing newer than what was just read
    time.sleep(0.25)
    kind, later = read(last)
    out["later"] = [kind, sorted(later), min(v[2] for v in later.values()) > last]
    print(json.dumps(out))
"""


def test_process_utilization_per_holder_and_last_seen_timestamp(fakegpu_state):
    """nvmlDeviceGetProcessUtilization through pynvml: one sample per busy holder with its
    own figures, only samples newer than lastSeenTimeStamp, NOT_FOUND when none are."""
    st = fakegpu_state.init(gpus=2)
    busy = st.hold(0, 1000, name="VLLM::Worker_TP0", sm_util=87)
    other = st.hold(0, 500)
    idle = st.hold(0, 500)  # no utilisation set: idle, so no sample
    st.cli("set", "--pid", str(other.pid), "sm_util=12", "mem_util=30")
    before = time.time() * 1e6
    d = pyrun(st, PROCESS_UTIL)
    assert d["first"] == ["ok", {str(busy.pid): [87, 0], str(other.pid): [12, 30]}]
    assert str(idle.pid) not in d["first"][1]
    assert before - 200_000 < d["ts_us"] <= time.time() * 1e6  # CPU time in microseconds
    assert d["again"] == "NVMLError_NotFound"
    assert d["later"] == ["ok", sorted([busy.pid, other.pid]), True]


def test_process_utilization_not_found_unsupported_and_bad_values(fakegpu_state):
    st = fakegpu_state.init(gpus=2)
    p = st.hold(1, 100, sm_util=50)
    code = """
        import json, pynvml as N
        N.nvmlInit()
        out = []
        for i in (0, 1):
            try:
                out.append([s.smUtil for s in N.nvmlDeviceGetProcessUtilization(
                    N.nvmlDeviceGetHandleByIndex(i), 0)])
            except N.NVMLError as e:
                out.append(type(e).__name__)
        print(json.dumps(out))
    """
    assert pyrun(st, code) == ["NVMLError_NotFound", [50]]  # GPU 0 has no process at all
    st.cli("fault", "unsupported", "process_util", "--gpu", "1")
    assert pyrun(st, code) == ["NVMLError_NotFound", "NVMLError_NotSupported"]
    st.cli("fault", "clear")
    st.cli("set", "--pid", str(p.pid), "sm_util=0")  # idle again: no sample
    assert pyrun(st, code) == ["NVMLError_NotFound", "NVMLError_NotFound"]
    assert st.cli("set", "--pid", str(p.pid), "sm_util=150", check=False).returncode == 2
    assert st.cli("set", "--pid", "999999999", "sm_util=5", check=False).returncode == 2
