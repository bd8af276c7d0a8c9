"""GPU facts and their holders: NVML (the ``pynvml`` sent along), else ``nvidia-smi``, else
a reader that says why neither is there."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

from .parsing import parse_smi_apps, parse_smi_gpus
from .protocol import MAX_GPUS, MIB, SMI_APP_FIELDS, SMI_GPU_FIELDS, TEXT_MAX, UTIL_WINDOW_US
from .text import cap_text

MODES_EVERY_S = 30.0  # MIG, display and persistence mode are read again this often

if TYPE_CHECKING:
    from .protocol import Json


class NvmlReader:
    """GPUs and their holders through NVML; static facts are read once."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        nvml.nvmlInit()
        self.static: list[Json] = []
        self.handles: list[Any] = []
        self.unsupported: set[tuple[int, str]] = set()
        self.info_type: Any = None
        self.fast_lists = self._fast_process_lists()
        self.buffer: Any = None
        self.capacity = 0
        self.raw: dict[tuple[str, int], tuple[bytes, list[tuple[int, int]]]] = {}
        self.last_lists: list[list[tuple[int, int]]] = []
        self.last_holders: dict[int, dict[int, int]] = {}
        # per GPU: the newest utilisation sample read (the driver's CPU time, us)
        self.sm_util: dict[int, int] = {}  # {pid: SM %} of the last read
        # (GPU, function) -> why its last call failed: "denied", "unsupported", "error"
        self.failed: dict[tuple[int, str], str] = {}
        self.modes: list[Json] = []  # per GPU: MIG, display and persistence mode
        self.modes_at = -MODES_EVERY_S
        count = nvml.nvmlDeviceGetCount()
        self.unlisted = max(0, count - MAX_GPUS)
        for index in range(count - self.unlisted):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            self.handles.append(handle)
            facts: Json = {"index": index}
            for key, fn in (("name", "nvmlDeviceGetName"), ("uuid", "nvmlDeviceGetUUID")):
                value = self._call(index, fn, handle)
                if isinstance(value, bytes):
                    value = value.decode("utf-8", "replace")
                if value is not None:
                    facts[key] = cap_text(str(value), TEXT_MAX)
            self.static.append(facts)

    def _call(self, index: int, fn: str, *args: Any, impl: Any = None) -> Any:
        """One NVML query (``impl`` or pynvml's ``fn``); None where the driver cannot tell
        (and never ask again)."""
        if (index, fn) in self.unsupported:
            return None
        try:
            value = (impl or getattr(self.nvml, fn))(*args)
        except self.nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code == self.nvml.NVML_ERROR_GPU_IS_LOST:
                raise
            self.failed[(index, fn)] = "error"
            if code == self.nvml.NVML_ERROR_NO_PERMISSION:
                self.failed[(index, fn)] = "denied"
            if code in (
                self.nvml.NVML_ERROR_NOT_SUPPORTED,
                self.nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
            ):
                self.unsupported.add((index, fn))
                self.failed[(index, fn)] = "unsupported"
            return None
        except AttributeError:
            self.unsupported.add((index, fn))
            self.failed[(index, fn)] = "unsupported"
            return None
        self.failed.pop((index, fn), None)
        return value

    def _modes(self, index: int, handle: Any) -> Json:
        """What a GPU reset asks of the GPU: MIG mode, a display on it, persistence mode
        ("on"/"off"; left out where the driver cannot tell)."""
        out: Json = {}
        try:
            mig = self._call(index, "nvmlDeviceGetMigMode", handle)
        except self.nvml.NVMLError:  # lost: the sample says so
            return out
        if mig is not None:
            out["mig_mode"] = "on" if int(mig[0]) else "off"
        for key, fn in (("display_active", "nvmlDeviceGetDisplayActive"),
                        ("persistence_mode", "nvmlDeviceGetPersistenceMode")):
            try:
                value = self._call(index, fn, handle)
            except self.nvml.NVMLError:
                return out
            if value is not None:
                out[key] = "on" if int(value) else "off"
        return out

    def _fast_process_lists(self) -> dict[str, Any]:
        """The C entry points pynvml itself calls for process lists, with pynvml's struct.

        pynvml builds a Python object per process (most of a sample's NVML cost with
        hundreds of holders); calling the same function with the same struct into one
        reusable array reads the same values. Empty (use pynvml) where pynvml differs.
        """
        import ctypes

        nvml = self.nvml
        struct = getattr(nvml, "c_nvmlProcessInfo_v3_t", None)
        pointer = getattr(nvml, "_nvmlGetFunctionPointer", None)
        if struct is None or pointer is None:
            return {}
        # pynvml's layout in a plain Structure: its own class formats every field access
        self.info_type = type("ProcessInfo", (ctypes.Structure,), {"_fields_": struct._fields_})
        if ctypes.sizeof(self.info_type) != ctypes.sizeof(struct):
            return {}
        fns = {}
        for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            try:
                fns[fn] = pointer(fn + "_v3")
            except Exception:  # noqa: BLE001 - not exported by this driver: pynvml decides
                continue
        return fns

    def _process_list(self, fn: str, handle: Any, index: int) -> list[tuple[int, int]]:
        """[(pid, used bytes or -1)] through the C entry point, as pynvml would (see above).

        The same list object as last time when the driver wrote the same bytes."""
        import ctypes

        nvml = self.nvml
        count = ctypes.c_uint(0)
        for _ in range(4):
            if self.buffer is None:
                self.capacity = max(self.capacity, 64)
                self.buffer = (self.info_type * self.capacity)()
            count.value = self.capacity
            ret = self.fast_lists[fn](handle, ctypes.byref(count), self.buffer)
            if ret == nvml.NVML_SUCCESS:
                n = min(count.value, self.capacity)
                raw = ctypes.string_at(self.buffer, n * ctypes.sizeof(self.info_type))
                last = self.raw.get((fn, index))
                if last is not None and last[0] == raw:
                    return last[1]
                na = 2**64 - 1
                parsed = [
                    (p.pid, -1 if p.usedGpuMemory == na else p.usedGpuMemory)
                    for p in self.buffer[:n]
                ]
                self.raw[(fn, index)] = (raw, parsed)
                return parsed
            if ret != nvml.NVML_ERROR_INSUFFICIENT_SIZE:
                raise nvml.NVMLError(ret)
            self.capacity = count.value * 2 + 5
            self.buffer = None
        raise nvml.NVMLError(nvml.NVML_ERROR_INSUFFICIENT_SIZE)

    def _processes(self, index: int, fn: str, handle: Any) -> list[tuple[int, int]]:
        if fn not in self.fast_lists:
            procs = self._call(index, fn, handle) or ()
            return [
                (int(p.pid), -1 if getattr(p, "usedGpuMemory", None) is None else p.usedGpuMemory)
                for p in procs
            ]
        procs = self._call(index, fn, fn, handle, index, impl=self._process_list)
        return [] if procs is None else procs  # an empty list too is the same object

    def _process_util(self, index: int, handle: Any) -> dict[int, int] | None:
        """{pid: SM %} on GPU ``index``: the most of each pid's samples of the last
        ``UTIL_WINDOW_US``; a listed process without one was idle (the driver samples only
        busy ones). None where the driver cannot tell (never asked again: an older driver
        or GPU).

        A window, not "since the last read": the driver samples a few times a second, and
        a read that came between two of its samples said a busy worker was idle."""
        fn = "nvmlDeviceGetProcessUtilization"
        if (index, fn) in self.unsupported:
            return None
        nvml = self.nvml
        since = max(0, int(time.time() * 1e6) - UTIL_WINDOW_US)  # the driver's clock: CPU us
        try:
            samples = getattr(nvml, fn)(handle, since)
        except nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code == nvml.NVML_ERROR_GPU_IS_LOST:
                raise
            if code == nvml.NVML_ERROR_NOT_FOUND:
                return {}  # no sample since the last read: nothing was busy
            if code in (
                nvml.NVML_ERROR_NOT_SUPPORTED,
                nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
            ):
                self.unsupported.add((index, fn))
            return None
        except AttributeError:
            self.unsupported.add((index, fn))
            return None
        out: dict[int, int] = {}
        for sample in samples:
            if int(sample.timeStamp) <= since:  # older than the window: not asked for
                continue
            pid, sm = int(sample.pid), int(sample.smUtil)
            if out.get(pid, -1) < sm:
                out[pid] = sm
        return out

    def read(self) -> tuple[list[Json], dict[int, dict[int, int]], list[str]]:
        """GPUs, {pid: {gpu: MiB or -1}} (the same dict as last time while the driver's
        process lists are byte for byte the same: never mutate it), errors; the SM
        utilisation of the listed processes in ``self.sm_util``."""
        nvml = self.nvml
        gpus: list[Json] = []
        lists: list[tuple[int, list[tuple[int, int]]]] = []
        utils: list[tuple[list[tuple[int, int]], dict[int, int]]] = []
        errors: list[str] = []
        if self.unlisted:
            errors.append(f"{self.unlisted} GPUs beyond the first {MAX_GPUS} not listed")
        now = time.monotonic()
        if now - self.modes_at >= MODES_EVERY_S:  # rarely changed: not every sample's cost
            self.modes_at = now
            self.modes = [self._modes(i, h) for i, h in enumerate(self.handles)]
        for index, handle in enumerate(self.handles):
            gpu = dict(self.static[index])
            try:
                gpu.update(self.modes[index])
                mem = self._call(index, "nvmlDeviceGetMemoryInfo", handle)
                if mem is not None:
                    gpu["memory_total_mib"] = int(mem.total) // MIB
                    gpu["memory_used_mib"] = int(mem.used) // MIB
                util = self._call(index, "nvmlDeviceGetUtilizationRates", handle)
                if util is not None:
                    gpu["utilization_pct"] = int(util.gpu)
                temp = self._call(index, "nvmlDeviceGetTemperature", handle, 0)
                if temp is not None:
                    gpu["temperature_c"] = int(temp)
                power = self._call(index, "nvmlDeviceGetPowerUsage", handle)
                if power is not None:
                    gpu["power_w"] = round(power / 1000.0, 1)
                limit = self._call(index, "nvmlDeviceGetEnforcedPowerLimit", handle)
                if limit is not None:
                    gpu["power_limit_w"] = round(limit / 1000.0, 1)
                for fn in (
                    "nvmlDeviceGetComputeRunningProcesses",
                    "nvmlDeviceGetGraphicsRunningProcesses",
                ):
                    lists.append((index, self._processes(index, fn, handle)))
                # whether NVML's list of its compute processes could be read: an empty
                # list that could not be read proves nobody holds it
                gpu["process_list"] = self.failed.get(
                    (index, "nvmlDeviceGetComputeRunningProcesses"), "read")
                util_of = self._process_util(index, handle)
                if util_of is not None:
                    utils.append((lists[-2][1] + lists[-1][1], util_of))
            except nvml.NVMLError:
                gpu = dict(self.static[index])
                gpu["error"] = "GPU is lost"
                errors.append(f"GPU {index} is lost")
            gpus.append(gpu)
        same = len(lists) == len(self.last_lists) and all(
            lists[i][1] is self.last_lists[i] for i in range(len(lists))
        )
        if not same:
            holders: dict[int, dict[int, int]] = {}
            for index, procs in lists:
                for pid, used in procs:
                    mib = -1 if used < 0 else int(used) // MIB
                    slot = holders.get(pid)
                    if slot is None:
                        holders[pid] = {index: mib}
                    elif slot.get(index, -2) < mib:
                        slot[index] = mib
            self.last_lists = [procs for _index, procs in lists]
            self.last_holders = holders
        sm_util: dict[int, int] = {}
        for procs, util_of in utils:
            for pid, _used in procs:
                sm = util_of.get(pid, 0)
                if sm_util.get(pid, -1) < sm:
                    sm_util[pid] = sm
        self.sm_util = sm_util
        return gpus, self.last_holders, errors


class SmiReader:
    """GPUs and holders through ``nvidia-smi`` CSV: two short commands per sample."""

    def __init__(self, smi: str) -> None:
        self.smi = smi
        self.sm_util: dict[int, int] = {}  # nvidia-smi does not say it per process

    def _run(self, query: str) -> tuple[str, str | None]:
        try:
            done = subprocess.run(
                [self.smi, query, "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                encoding="utf-8",
                errors="replace",
                timeout=10,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return "", f"nvidia-smi failed: {exc}"
        out = done.stdout
        if "No devices were found" in out or "No devices were found" in done.stderr:
            return "", "nvidia-smi: No devices were found"
        if done.returncode != 0 and not out.strip():
            return "", "nvidia-smi: " + (done.stderr.strip() or out.strip())[:200]
        return out, None

    def read(self) -> tuple[list[Json], dict[int, dict[int, int]], list[str]]:
        errors: list[str] = []
        out, err = self._run("--query-gpu=" + SMI_GPU_FIELDS)
        if err:
            return [], {}, [err]
        gpus, errs = parse_smi_gpus(out)
        errors += errs
        index_of = {g["uuid"]: g["index"] for g in gpus if "uuid" in g}
        out, err = self._run("--query-compute-apps=" + SMI_APP_FIELDS)
        if err:
            errors.append(err)
            return gpus, {}, errors
        holders, errs = parse_smi_apps(out, index_of)
        for gpu in gpus:
            gpu["process_list"] = "read"
        return gpus, holders, errors + errs


class NoGpuReader:
    """A host with neither NVML nor nvidia-smi: no GPU facts, and every snapshot says why."""

    def __init__(self, why: str) -> None:
        self.why = why
        self.sm_util: dict[int, int] = {}

    def read(self) -> tuple[list[Json], dict[int, dict[int, int]], list[str]]:
        return [], {}, [self.why]


def gpu_reader(nvml_source: str | None) -> tuple[Any, str]:
    """NVML where libnvidia-ml loads, else nvidia-smi, else a reader that reports why not."""
    why = "no NVIDIA driver: libnvidia-ml not loadable and nvidia-smi not found"
    try:
        nvml = load_pynvml(nvml_source)
        return NvmlReader(nvml), "nvml"
    except Exception as exc:  # noqa: BLE001 - any failure to load NVML means "fall back"
        why = "NVML unavailable (%s); nvidia-smi not found" % (str(exc)[:120] or type(exc).__name__)
    smi = shutil.which("nvidia-smi")
    if smi:
        return SmiReader(smi), "nvidia-smi"
    return NoGpuReader(why), "none"


def load_pynvml(source: str | None) -> Any:
    """The ``pynvml`` module: the copy sent along with the collector, else the host's."""
    if source is not None and "pynvml" not in sys.modules:
        import types

        module = types.ModuleType("pynvml")
        module.__file__ = "pynvml.py"
        sys.modules["pynvml"] = module
        exec(compile(source, "pynvml.py", "exec"), module.__dict__)
    import pynvml

    return pynvml
