"""The collector that runs on the GPU host and writes snapshots as JSON lines.

This one file is what gpudash sends to a remote host and runs with the host's
``python3`` (3.7 or later), isolated (``-I``): it imports only the standard library,
plus ``pynvml`` (sent along with it) and the host's own ``psutil`` when present (for the
host's CPU and RAM only; ``/proc`` serves the same numbers without it). It must never
import gpudash. Locally the same file runs as a subprocess, so both paths share one code
path. CI checks it with ``vermin -t=3.7-`` and runs it on a real Python 3.7.

A snapshot on the wire is a dict with ``None`` values left out (so a JSON merge patch,
RFC 7386, can describe every change: ``null`` means "now unknown"); a process's GPU
memory of unknown size is written ``-1`` for the same reason. Lines are UTF-8 as is.
Every text from the host is cut to a limit and counts are capped (see "Limits" below),
so no process a GPU user starts can make a snapshot larger than ``snapshot_bound()``.

What a snapshot promises about processes (stream mode; see ``ProcReader``): GPU memory
per process is read from the driver every sample. With pidfds (Python >= 3.9, Linux >=
5.3) a process that exited (gone or a zombie) or whose parent exited (new ``ppid``) is
shown so in the very next sample; ``state`` and ``name`` of any other process are at
most ``STAT_EVERY - 1`` samples old, and processes last seen in D/Z/T/t/X or signalled
in the last ``SIGNAL_WATCH`` samples are re-read every sample; ``cmdline``/``cgroup``/
``unit`` are at most ``CMDLINE_TTL_S`` seconds old (and re-read when comm changes). Any
request from gpudash makes the next sample re-read everything. Without pidfds, or
beyond the fd budget, every process is re-read every sample.
"""

from __future__ import annotations

import json
import os
import pwd
import queue
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

# ------------------------------------------------------------------------ the protocol
# The one definition of what travels between gpudash and this collector. gpudash's
# decoder (gpudash/protocol/wire.py) imports these names, and a test holds the key lists
# equal to the fields of gpudash's model (Gpu, Process, Unit, HostSnapshot).

PROTOCOL = 7  # 2: boot_id, CPU and memory of the host and of each process, source "none"
# 3: "containers" (docker/podman inspect of the containers their cgroups name) and "pods"
# 4: a process's process group and what its cgroup says (container, pod, a user's own
#    systemd), why a listed process could not be read; the parents and group leaders
#    of GPU holders are listed
# 5: a unit's stop timeout, restart delay, start limits, and its first ExecStart's argv
#    (what the unit lint and the fit estimate read)
# 6: a GPU process's SM utilisation (nvmlDeviceGetProcessUtilization), where NVML has it
# 7: a container's health check, --init and PID mode (what the container lint reads)

UTIL_WINDOW_US = 1000000  # a process's SM %: the most of its samples of the last second

# gpudash -> collector, one JSON object a line: {"op": OP_..., ...}
OP_WATCH = "watch"  # {"unit": NAME}: report this unit from now on; re-read everything
# ({"container": ID} the same for a container: a stopped one has no process to name it)
OP_REFRESH = "refresh"  # re-read everything in the next sample
OP_SAMPLE = "sample"  # serve: {"id"} -> K_FULL with a fresh snapshot and the same "id"
OP_SIGNAL = "signal"  # serve: {"id", "pid", "start", "sig", "boot"?} -> K_SIGNAL, same "id"
OP_PING = "ping"  # {"id"} -> K_PONG with the same "id" at once: the request round trip
OP_HTTP = "http"  # serve: {"id", "url", "timeout", "unit"?} -> K_HTTP: a GET on this host's
# loopback; with "unit", refused unless that unit's own process listens on the port

# collector -> gpudash, one JSON object a line (UTF-8 as is): {"k": K_..., ...}
K_READY = "ready"  # serve: the first line, {"v": PROTOCOL}
K_FULL = "full"  # {"s": snapshot}
K_PATCH = "patch"  # {"s": RFC 7386 merge patch from the previous snapshot to this one}
K_SIGNAL = "signal"  # {"outcome": one of SIGNAL_OUTCOMES}
K_ERROR = "error"  # {"msg": text}: a request that could not be read
K_PONG = "pong"  # the answer to OP_PING
K_HTTP = "http"  # {"status": int | null, "error": text | null}: the answer to OP_HTTP
SIGNAL_OUTCOMES = ("sent", "gone", "mismatch", "denied", "unknown")

# A snapshot has SNAPSHOT_KEYS; "gpus", "procs" and "units" are objects keyed by GPU index,
# pid and unit name whose values have the keys below. Keys whose value is None are left out.
SNAPSHOT_KEYS = (
    "v", "host", "taken_at", "boot_id", "source", "degraded", "errors", "can_act",
    "cannot_act_reason", "cpu_pct", "mem_used_mib", "mem_total_mib", "collector_cpu_s",
    "gpus", "procs", "units", "containers", "pods",
)
GPU_KEYS = (
    "index", "uuid", "name", "memory_total_mib", "memory_used_mib", "memory_reserved_mib",
    "utilization_pct", "temperature_c", "power_w", "power_limit_w", "error",
)
PROC_KEYS = (  # gpu_memory_mib: {"INDEX": MiB, or -1 where the driver cannot tell}
    "pid", "ppid", "start_ticks", "started_at", "state", "user", "name", "cmdline", "cgroup",
    "unit", "gpu_memory_mib", "cpu_pct", "rss_mib",
    # % of the SM time it used since the last sample, the most on any of its GPUs; absent
    # where the driver cannot tell (nvidia-smi, an older driver or GPU)
    "sm_util_pct",
    "device_gpus",  # [INDEX]: holds these GPUs' /dev/nvidia* although the driver lists it not
    "pgid",  # its process group
    # from its cgroup: the container (runtime, id), the pod, and under user@UID.service
    # that user's uid and the unit there
    "container_runtime", "container_id", "pod_uid", "user_uid", "user_unit",
    "unreadable",  # listed by the driver, not readable here: one of UNREADABLE_REASONS
)
UNREADABLE_REASONS = ("gone", "hidden", "denied", "namespace")
UNIT_KEYS = (
    "name", "active_state", "sub_state", "unit_file_state", "restart", "kill_mode",
    "n_restarts", "main_pid", "control_group", "description",
    # seconds, as systemctl show says them (None: infinity or not said)
    "timeout_stop_s", "restart_s", "start_limit_interval_s", "start_limit_burst",
    "exec_start",  # the first ExecStart's argv, joined by spaces (EXEC_MAX)
    "cuda_visible_devices",  # its Environment's CUDA_VISIBLE_DEVICES, if GPU indices
    "send_sigkill",  # yes/no: what outlives TimeoutStopSec is SIGKILLed
)
# "containers" is keyed by the container id its processes' cgroups name, "pods" by pod UID.
CONTAINER_KEYS = (  # state "removed": the runtime answered that no such container exists
    "id", "runtime", "name", "image", "state", "restart_policy", "restart_count", "main_pid",
    # the container lint's: "none" (no health check) or its status ("healthy", ...; a
    # configured one not yet run: "configured"); "yes"/"no" (--init: a PID 1 that reaps);
    # the PID namespace ("host": --pid host; "private"; "container:ID")
    "health", "init", "pid_mode",
    "port",  # the host TCP port it publishes (its lowest TCP port's): its ready URL's
)
POD_KEYS = ("uid", "namespace", "name")
CONTAINER_RUNTIMES = ("docker", "podman", "cri")  # cri: a Kubernetes pod's (crictl)
REMOVED = "removed"
SOURCES = ("nvml", "nvidia-smi", "none")  # "none": no GPU facts at all (degraded)

# Limits. A host's text is anybody's (a GPU user picks their cmdline): this collector
# never writes more than these, and gpudash refuses larger counts and cuts longer text.
MAX_GPUS = 64
MAX_PROCS = 2048  # GPU holders first, then the other processes of their units
MAX_UNITS = 256
MAX_CONTAINERS = 32  # and as many pods: those whose processes a snapshot lists
ANCESTRY_DEPTH = 8  # parents of a GPU holder listed, at most this many levels up
MAX_ERRORS = 32
TRUNCATED = "\u2026[truncated]"  # ends every text that was cut
CMDLINE_MAX = 4096  # bytes of one cmdline as JSON text (escapes counted), mark included
CMDLINE_SHORT = 256  # the same, once CMDLINE_BUDGET is spent
CMDLINE_BUDGET = 1 << 20  # bytes of all cmdlines longer than CMDLINE_SHORT in a snapshot
CGROUP_MAX = 512
TEXT_MAX = 256  # every other text: names, states, users, units, descriptions, GPU names
ERROR_MAX = 512
WORD_MAX = 32  # a container's state and restart policy: one word

MIB = 1024 * 1024
UNIT_COMPONENT = re.compile(r"[A-Za-z0-9:_.\\@-]{1,240}\.(service|scope)")  # fullmatch
BOOT_ID = re.compile(r"[0-9a-fA-F-]{1,64}")  # fullmatch
CONTAINER_ID = re.compile(r"[0-9a-f]{12,64}")  # fullmatch
POD_UID = re.compile(r"[0-9a-f-]{8,64}")  # fullmatch
# docker-<id>.scope (systemd driver), libpod-<id>.scope (podman), cri-containerd-/crio-
_CONTAINER_PART = re.compile(r"(docker|libpod|cri-containerd|crio|containerd)-([0-9a-f]{12,64})"
                             r"(?:\.scope)?")
# kubepods-besteffort-pod<uid, _ for ->.slice (systemd driver), pod<uid> (cgroupfs)
_POD_PART = re.compile(r"(?:kubepods(?:-[a-z]+)?-)?pod([0-9a-f_-]{8,64})(?:\.slice)?")
CONTAINER_CLI_TIMEOUT_S = 5.0
UNIT_PROPERTIES = (
    "Id,ActiveState,SubState,UnitFileState,Restart,KillMode,NRestarts,MainPID,"
    "ControlGroup,Description,TimeoutStopUSec,RestartUSec,StartLimitIntervalUSec,"
    "StartLimitBurst,ExecStart,Environment,SendSIGKILL"
)
EXEC_MAX = 1024  # bytes of a unit's ExecStart argv as JSON text
# systemd's time spans as systemctl show prints them: "1min 30s", "100ms", "infinity"
_TIMESPAN_UNITS = {
    "us": 1e-6, "usec": 1e-6, "ms": 1e-3, "msec": 1e-3, "s": 1.0, "sec": 1.0,
    "min": 60.0, "m": 60.0, "h": 3600.0, "hr": 3600.0, "d": 86400.0, "w": 604800.0,
    "M": 2629800.0, "y": 31557600.0,
}
_TIMESPAN_PART = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)")
_EXEC_ARGV = re.compile(r"argv\[\]=(.*?) ; ignore_errors=")
# only this one variable of a unit's Environment travels (the rest may hold secrets)
_CUDA_DEVICES = re.compile(r"(?:^|\s)\"?CUDA_VISIBLE_DEVICES=([0-9]{1,2}(?:,[0-9]{1,2}){0,63})"
                           r"(?=[\s\"]|$)")


def parse_timespan(text: str) -> float | None:
    """``1min 30s`` -> 90.0 seconds; None for ``infinity`` or anything not a time span."""
    text = text.strip()
    if not text or text == "infinity":
        return None
    total, at = 0.0, 0
    while at < len(text):
        m = _TIMESPAN_PART.match(text, at)
        if m is None or m.end() == at:
            return None
        unit = m.group(2) or "s"
        if unit not in _TIMESPAN_UNITS:
            return None
        total += float(m.group(1)) * _TIMESPAN_UNITS[unit]
        at = m.end()
        while at < len(text) and text[at] == " ":
            at += 1
    return total


def exec_argv(text: str) -> str | None:
    """The argv of the first command in systemctl show's ``ExecStart={ path=… ; argv[]=… ;
    ignore_errors=… }``."""
    m = _EXEC_ARGV.search(text)
    return m.group(1) if m else None
UNIT_TTL_S = 5.0  # unit properties are re-read at least this often, and on any change
CMDLINE_TTL_S = 30.0  # a known process's cmdline and cgroup are at most this old (seconds)
STAT_EVERY = 4  # an unchanged, watched process's stat is re-read at least every N samples
SIGNAL_WATCH = 2 * STAT_EVERY  # samples a signalled process's stat is re-read every sample
HOT_STATES = (b"D", b"Z", b"T", b"t", b"X")  # states whose process is re-read every sample
FD_CACHE_MAX = 4096  # most /proc/PID/stat fds kept open (also <= half of RLIMIT_NOFILE)
STAT_BYTES = 4096  # /proc/PID/stat is one line of at most ~1 KB
HOST_STATS_S = 1.0  # the host's CPU % and RAM are re-read at most this often (seconds)
OWN_CPU_S = 10.0  # the collector's own CPU time, this often: a changed field costs wire bytes
NA_MARKERS = ("[N/A]", "[Not Supported]", "[Insufficient Permissions]", "N/A", "[Unknown Error]")
SMI_GPU_FIELDS = (
    "index,uuid,name,memory.total,memory.used,utilization.gpu,temperature.gpu,"
    "power.draw,power.limit"
)
SMI_APP_FIELDS = "gpu_uuid,pid,used_memory"

if TYPE_CHECKING:  # the host may run Python 3.7: no runtime generic aliases
    from typing import TypeAlias  # novermin: type checking only

    Json: TypeAlias = dict[str, Any]


# ------------------------------------------------------------------------ host text


def text_cost(text: str) -> int:
    """Bytes ``text`` takes in a JSON line: UTF-8 as is, control characters escaped."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", "replace")) - 2


def cap_text(text: str, limit: int) -> str:
    """``text`` within ``limit`` bytes of JSON, ending in ``TRUNCATED`` if it was cut."""
    if len(text) * 6 <= limit:  # even if every character were a \u escape
        return text
    if len(text) <= limit and text_cost(text) <= limit:
        return text
    room = limit - text_cost(TRUNCATED)
    low, high = 0, min(len(text), room)  # every character costs at least one byte
    while low < high:  # the longest prefix that fits: a dozen json.dumps at most
        mid = (low + high + 1) // 2
        if text_cost(text[:mid]) <= room:
            low = mid
        else:
            high = mid - 1
    return text[:low] + TRUNCATED


def snapshot_bound() -> int:
    """Bytes of the largest full-snapshot line this collector writes, given the limits."""
    number = 26  # a key with a number or a boolean: '"memory_total_mib":16777215,'
    gpu = len(GPU_KEYS) * number + 2 * TEXT_MAX + ERROR_MAX
    proc = (
        len(PROC_KEYS) * number
        + CMDLINE_SHORT  # longer ones share CMDLINE_BUDGET
        + CGROUP_MAX
        + 5 * TEXT_MAX  # state, user, name, unit, user_unit
        + 2 * 64  # container_id, pod_uid
        + MAX_GPUS * 16  # gpu_memory_mib: '"63":16777215,'
    )
    unit = len(UNIT_KEYS) * number + CGROUP_MAX + 8 * TEXT_MAX + EXEC_MAX
    container = len(CONTAINER_KEYS) * number + 64 + 8 + 2 * TEXT_MAX + 2 * WORD_MAX
    pod = len(POD_KEYS) * number + 64 + 2 * TEXT_MAX
    top = len(SNAPSHOT_KEYS) * number + 3 * TEXT_MAX + ERROR_MAX + MAX_ERRORS * (ERROR_MAX + 3)
    return (
        top + MAX_GPUS * gpu + MAX_PROCS * proc + CMDLINE_BUDGET + CMDLINE_MAX + MAX_UNITS * unit
        + MAX_CONTAINERS * (container + pod)
    )


# ---------------------------------------------------------------------------- parsing


def parse_stat(text: str) -> tuple[str, str, int, int] | None:
    """``/proc/PID/stat`` -> (comm, state, ppid, start_ticks), or None if malformed.

    comm may hold spaces and parentheses, so it ends at the *last* ')'.
    """
    open_at = text.find("(")
    close_at = text.rfind(")")
    if open_at < 0 or close_at < open_at:
        return None
    rest = text[close_at + 1 :].split()
    # rest[0] is field 3 (state); field 22 (starttime) is rest[19]
    if len(rest) < 20:
        return None
    try:
        return text[open_at + 1 : close_at], rest[0], int(rest[1]), int(rest[19])
    except ValueError:
        return None


def cgroup_path(text: str) -> str | None:
    """The systemd cgroup path from ``/proc/PID/cgroup`` (v2 ``0::``, or v1 name=systemd)."""
    v1 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            return parts[2]
        if "name=systemd" in parts[1].split(","):
            v1 = parts[2]
    return v1


def unit_of_cgroup(path: str | None) -> str | None:
    """The system-manager unit owning a cgroup: its outermost ``.service``/``.scope``.

    ``/user.slice/user-1000.slice/user@1000.service/app.slice/x.service`` belongs to
    ``user@1000.service`` (the one ``systemctl`` can stop), ``/`` to no unit.
    """
    if not path:
        return None
    for part in path.split("/"):
        if UNIT_COMPONENT.fullmatch(part):
            return part
    return None


def container_of_cgroup(path: str | None) -> tuple[str, str | None, str | None] | None:
    """``(runtime, container id, pod UID)`` of the container a cgroup belongs to, or None.

    Docker ``/system.slice/docker-<id>.scope`` or ``/docker/<id>``; Podman
    ``/machine.slice/libpod-<id>.scope`` (``libpod-conmon-`` is its monitor, not it);
    Kubernetes ``/kubepods.slice/.../kubepods-<qos>-pod<uid>.slice/cri-containerd-<id>.scope``
    or ``/kubepods/<qos>/pod<uid>/<id>``: the runtime is then ``cri`` (the kubelet owns it)
    and the id may be None (the pod's own cgroup).
    """
    if not path:
        return None
    parts = path.split("/")
    pod = None
    if "kubepods" in path:
        for part in parts:
            m = _POD_PART.fullmatch(part)
            if m:
                pod = m.group(1).replace("_", "-")
    for i, part in enumerate(parts):
        m = _CONTAINER_PART.fullmatch(part)
        if m:
            runtime = "podman" if m.group(1) == "libpod" else "docker"
            return ("cri" if pod else runtime), m.group(2), pod
        if part in ("docker", "libpod_parent") and i + 1 < len(parts):
            below = parts[i + 1]
            if CONTAINER_ID.fullmatch(below):
                return ("cri" if pod else "docker"), below, pod
        if pod and CONTAINER_ID.fullmatch(part):
            return "cri", part, pod
    return ("cri", None, pod) if pod else None


_USER_MANAGER = re.compile(r"user@(\d{1,10})\.service")  # fullmatch


def user_of_cgroup(path: str | None) -> tuple[int, str | None] | None:
    """``(uid, unit)`` when the cgroup is under a user's own systemd (``user@UID.service``):
    that user's uid and the innermost unit there (their service, or a rootless
    container's scope), else None."""
    if not path:
        return None
    parts = path.split("/")
    for i, part in enumerate(parts):
        m = _USER_MANAGER.fullmatch(part)
        if m:
            inner = [q for q in parts[i + 1:] if UNIT_COMPONENT.fullmatch(q)]
            return int(m.group(1)), (inner[-1] if inner else None)
    return None


def cgroup_facts(path: str | None) -> Json:
    """What a process's cgroup says of its owner, as the wire's process keys."""
    out: Json = {}
    ref = container_of_cgroup(path)
    if ref is not None:
        out["container_runtime"], out["container_id"], out["pod_uid"] = ref
    user = user_of_cgroup(path)
    if user is not None:
        out["user_uid"], out["user_unit"] = user
    return {k: v for k, v in out.items() if v is not None}


def unit_cgroup(path: str, unit: str) -> str:
    """The cgroup of ``unit`` itself, given the cgroup of one of its processes."""
    parts = path.split("/")
    return "/".join(parts[: parts.index(unit) + 1]) if unit in parts else path


def parse_systemctl_show(text: str) -> list[Json]:
    """``systemctl show -p ... A B`` output (blank-line separated blocks) -> unit dicts."""
    units: list[Json] = []
    for block in text.split("\n\n"):
        props: dict[str, str] = {}
        for line in block.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                props[key] = value
        name = props.get("Id")
        if not name or len(name) > TEXT_MAX:  # systemd's own limit is 255
            continue
        unit: Json = {"name": name}
        for key, field, limit in (
            ("ActiveState", "active_state", TEXT_MAX),
            ("SubState", "sub_state", TEXT_MAX),
            ("UnitFileState", "unit_file_state", TEXT_MAX),
            ("Restart", "restart", TEXT_MAX),
            ("KillMode", "kill_mode", TEXT_MAX),
            ("ControlGroup", "control_group", CGROUP_MAX),
            ("Description", "description", TEXT_MAX),
            ("SendSIGKILL", "send_sigkill", TEXT_MAX),
        ):
            if props.get(key):
                unit[field] = cap_text(props[key], limit)
        for key, field in (("NRestarts", "n_restarts"), ("MainPID", "main_pid"),
                           ("StartLimitBurst", "start_limit_burst")):
            try:
                number = int(props.get(key, ""))
            except ValueError:
                continue
            if field == "main_pid" and number == 0:
                continue
            unit[field] = number
        for key, field in (("TimeoutStopUSec", "timeout_stop_s"), ("RestartUSec", "restart_s"),
                           ("StartLimitIntervalUSec", "start_limit_interval_s")):
            seconds = parse_timespan(props.get(key, ""))
            if seconds is not None:
                unit[field] = round(seconds, 3)
        argv = exec_argv(props.get("ExecStart", ""))
        if argv:
            unit["exec_start"] = cap_text(argv, EXEC_MAX)
        devices = _CUDA_DEVICES.search(props.get("Environment", ""))
        if devices:
            unit["cuda_visible_devices"] = devices.group(1)
        units.append(unit)
    return units


def _smi_value(text: str) -> str | None:
    text = text.strip()
    if not text or text in NA_MARKERS or text.startswith("[") or text.startswith("ERR"):
        return None
    return text


def _smi_int(text: str) -> int | None:
    value = _smi_value(text)
    try:
        return None if value is None else int(float(value))
    except ValueError:
        return None


def _smi_float(text: str) -> float | None:
    value = _smi_value(text)
    try:
        return None if value is None else round(float(value), 1)
    except ValueError:
        return None


def parse_smi_gpus(text: str) -> tuple[list[Json], list[str]]:
    """``nvidia-smi --query-gpu=SMI_GPU_FIELDS --format=csv,noheader,nounits``."""
    gpus: list[Json] = []
    errors: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        index = _smi_int(cells[0]) if len(cells) == 9 else None
        if index is None or not 0 <= index < MAX_GPUS:
            errors.append("nvidia-smi: " + line.strip()[:200])
            continue
        gpu: Json = {
            "index": index,
            "uuid": cap_text(_smi_value(cells[1]) or "", TEXT_MAX) or None,
            "name": cap_text(_smi_value(cells[2]) or "", TEXT_MAX) or None,
            "memory_total_mib": _smi_int(cells[3]),
            "memory_used_mib": _smi_int(cells[4]),
            "utilization_pct": _smi_int(cells[5]),
            "temperature_c": _smi_int(cells[6]),
            "power_w": _smi_float(cells[7]),
            "power_limit_w": _smi_float(cells[8]),
        }
        lost = [c for c in cells if "GPU is lost" in c or "requires reset" in c.lower()]
        if lost:
            gpu["error"] = "GPU is lost"
        gpus.append({k: v for k, v in gpu.items() if v is not None})
    return gpus, errors


def parse_smi_apps(
    text: str, index_of_uuid: dict[str, int]
) -> tuple[dict[int, dict[int, int]], list[str]]:
    """``nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory`` -> {pid: {gpu: MiB|-1}}."""
    holders: dict[int, dict[int, int]] = {}
    errors: list[str] = []
    for line in text.splitlines():
        if not line.strip() or "No running" in line:
            continue
        cells = [c.strip() for c in line.split(",")]
        pid = _smi_int(cells[1]) if len(cells) == 3 else None
        if pid is None or pid <= 0 or cells[0] not in index_of_uuid:
            errors.append("nvidia-smi: " + line.strip()[:200])
            continue
        used = _smi_int(cells[2])
        gpu = index_of_uuid[cells[0]]
        slot = holders.setdefault(pid, {})
        slot[gpu] = max(slot.get(gpu, -1), -1 if used is None else used)
    return holders, errors


# ------------------------------------------------------------------------------- GPUs


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
            return (impl or getattr(self.nvml, fn))(*args)
        except self.nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code == self.nvml.NVML_ERROR_GPU_IS_LOST:
                raise
            if code in (
                self.nvml.NVML_ERROR_NOT_SUPPORTED,
                self.nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
            ):
                self.unsupported.add((index, fn))
            return None
        except AttributeError:
            self.unsupported.add((index, fn))
            return None

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
        for index, handle in enumerate(self.handles):
            gpu = dict(self.static[index])
            try:
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


# -------------------------------------------------------------------------- processes


def proc_hides_pids(proc: str = "/proc") -> bool:
    """Whether ``proc`` is mounted with hidepid (other users' processes are invisible)."""
    for line in (_read(proc + "/self/mountinfo") or "").splitlines():
        left, _, right = line.partition(" - ")
        fields, super_fields = left.split(), right.split()
        if len(fields) > 4 and fields[4] == "/proc" and super_fields[:1] == ["proc"]:
            options = super_fields[2].split(",") if len(super_fields) > 2 else []
            return any(o.startswith("hidepid=") and o not in ("hidepid=0", "hidepid=off")
                       for o in options)
    return False


def in_child_pid_namespace(proc: str = "/proc") -> bool:
    """Whether this process's PID namespace is not the host's (``NSpid`` lists more than
    one pid: the driver's pids are the outermost ones)."""
    for line in (_read(proc + "/self/status") or "").splitlines():
        if line.startswith("NSpid:"):
            return len(line.split()) > 2
    return False


def _read(path: str, size: int = 65536) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, size).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


class _Known:
    """A process seen before: one (pid, start_ticks), its pinned ``stat`` fd and pidfd if any."""

    __slots__ = (
        "pid", "start", "fd", "pidfd", "parent", "static", "sig", "out", "seen", "stale",
        "dirty", "hot", "quiet", "due", "ticks", "ticks_at", "cpu", "cost", "squeezed",
        "data",
    )

    def __init__(self, pid: int, start: int, fd: int | None) -> None:
        self.pid = pid
        self.start = start
        self.fd = fd
        self.pidfd: int | None = None  # readable once this process has exited
        self.parent: int | None = None  # the ppid whose pidfd is watched for it, if any
        self.static: Json = {}
        self.sig: tuple[bytes, bytes, bytes, int | None, int | None, bytes] | None = None
        self.out: Json = {}
        self.seen = True
        self.stale = True
        self.dirty = False  # its pidfd or its parent's fired: re-read this sample
        self.hot = False  # D, Z, T: re-read every sample
        self.quiet = False  # its stat may be skipped until its rotation turn (see ProcReader)
        self.due = 0.0  # monotonic time its cmdline and cgroup are next re-read
        self.ticks = -1  # utime + stime when last read (-1: never), and when that was
        self.ticks_at = 0.0
        self.cpu: int | None = None  # % of one CPU between the last two reads
        self.cost = 0  # JSON bytes of its cmdline if longer than CMDLINE_SHORT, else 0
        self.squeezed = False  # its cmdline was cut to CMDLINE_SHORT: the budget was spent
        self.data = b""  # its stat as last parsed


class _Parent:
    """A pidfd on the parent of known processes: readable once it exits (they are re-parented)."""

    __slots__ = ("pid", "fd", "children")

    def __init__(self, pid: int, fd: int) -> None:
        self.pid = pid
        self.fd = fd
        self.children: set[int] = set()


def fd_budget(limit: int = FD_CACHE_MAX) -> int:
    """How many ``stat`` fds to keep open: at most ``limit``, half of RLIMIT_NOFILE."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return 0
    if soft < 0 or soft == resource.RLIM_INFINITY:
        return limit
    # Many hosts start sessions with a soft limit of 1024: raise it (within the hard
    # limit, which needs no privilege) so every holder can be pinned, not just ~450.
    want = 4 * limit + 256  # stat fd + pidfd per process, parents, headroom
    if soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(hard, want)
        if new > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
                soft = new
            except (OSError, ValueError):
                pass  # keep the smaller budget: those beyond it are re-read every sample
    return max(0, min(limit, soft // 2 - 64))


class ProcReader:
    """Processes from ``/proc``; what cannot change for one (pid, start) is read once.

    On a real procfs each known process keeps its ``/proc/PID/stat`` open and it is
    re-read with ``pread`` at offset 0 (procfs regenerates it on every read). The fd names
    the process it was opened on, not the pid: once that process is gone the read fails
    (or is empty), even if the pid now belongs to another process, so a pinned fd also
    proves identity. Beyond ``fd_limit`` processes fall back to open/read/close plus a
    start-time check. cmdline and cgroup are re-read every 15-30 s (``CMDLINE_TTL_S``, a
    fixed fraction per pid so that processes started together spread out), when comm
    changes, and after ``stale_all``.

    Where the kernel has pidfds (``os.pidfd_open``: Python >= 3.9, Linux >= 5.3) a pinned
    process also keeps a pidfd, and so does each distinct parent of one; ``begin_sample``
    polls them all once (epoll, timeout 0). Between ``begin_sample`` and ``forget_unseen``
    (one sample) ``read`` re-reads a process's stat only if it is new, its pidfd fired
    (it exited: gone or a zombie), its parent's fired (it was re-parented), it showed D,
    Z, T, t or X, it was signalled (``watch``) in the last ``SIGNAL_WATCH`` samples, its
    cmdline is due, ``stale_all`` was called, its parent could not be watched, or its turn
    in the rotation came (every ``stat_every`` samples, phase spread by pid). Otherwise it
    returns the cached dict untouched: ``state`` and ``name`` of a running or sleeping
    process may be up to ``stat_every - 1`` samples old; exits and ``ppid`` never are.
    Without pidfds, beyond the fd budget, or outside a sample, every read re-reads.
    """

    def __init__(
        self,
        proc: str = "/proc",
        cgroup_root: str = "/sys/fs/cgroup",
        fd_limit: int | None = None,
        stat_every: int = STAT_EVERY,
    ) -> None:
        self.proc = proc
        self.cgroup_root = cgroup_root
        self.known: dict[int, _Known] = {}
        self.users: dict[int, str] = {}
        self.clk_tck = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.page_size = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self.long_cmdlines = 0  # JSON bytes of known cmdlines longer than CMDLINE_SHORT
        self.squeezed = 0  # known processes whose cmdline was cut to CMDLINE_SHORT
        self.boot_time = 0.0
        for line in (_read(proc + "/stat") or "").splitlines():
            if line.startswith("btime "):
                self.boot_time = float(line.split()[1])
        v1 = os.path.isdir(cgroup_root + "/systemd") and not os.path.exists(
            cgroup_root + "/cgroup.controllers"
        )
        self.cgroup_fs = cgroup_root + "/systemd" if v1 else cgroup_root
        # /proc mounted with hidepid hides other users' processes; in a child PID
        # namespace the driver's (host) pids are not ours (``unreadable``)
        self.hidepid = proc_hides_pids(proc)
        self.nested = in_child_pid_namespace(proc)
        if fd_limit is None:  # pinning relies on procfs semantics: not for a stand-in dir
            real = os.path.realpath(proc) == "/proc" and os.path.exists("/proc/self/stat")
            fd_limit = fd_budget() if real else 0
        self.fd_limit = fd_limit
        self.pinned = 0
        self.stat_every = max(1, stat_every)
        self.sample_no = 0
        self.now = 0.0  # monotonic time of the current sample
        self.polled = False  # inside a sample whose pidfds were polled: reads may skip
        self.pidfds = 0  # open pidfds (known processes and parents), at most fd_limit
        self.parents: dict[int, _Parent] = {}
        self.owners: dict[int, _Known | _Parent] = {}  # pidfd -> what it watches
        self.signalled: dict[int, int] = {}  # pid -> last sample it is re-read every sample
        self.poller: Any = None
        if fd_limit > 0 and hasattr(os, "pidfd_open") and hasattr(select, "epoll"):
            try:
                probe = os.pidfd_open(os.getpid())  # novermin: hasattr above
            except OSError:  # kernel < 5.3 (ENOSYS) or seccomp: re-read every sample
                pass
            else:
                os.close(probe)
                self.poller = select.epoll()

    def unreadable(self, pid: int) -> str:
        """Why ``pid`` (listed by the driver) cannot be read: one of UNREADABLE_REASONS."""
        if self.nested:
            return "namespace"
        if os.path.exists(f"{self.proc}/{pid}"):
            return "denied"
        return "hidden" if self.hidepid else "gone"

    def start_ticks(self, pid: int) -> int | None:
        parsed = parse_stat(_read(f"{self.proc}/{pid}/stat") or "")
        return None if parsed is None else parsed[3]

    def _user(self, pid: int) -> str | None:
        try:
            uid = os.stat(f"{self.proc}/{pid}").st_uid
        except OSError:
            return None
        if uid not in self.users:
            try:
                self.users[uid] = cap_text(pwd.getpwuid(uid).pw_name, TEXT_MAX)
            except KeyError:
                self.users[uid] = str(uid)
        return self.users[uid]

    def begin_sample(self) -> None:
        """Start a sample: poll every pidfd once and mark what must be re-read."""
        self.sample_no += 1
        self.now = time.monotonic()
        if self.signalled:
            for pid in [p for p, last in self.signalled.items() if last < self.sample_no]:
                del self.signalled[pid]
        if self.poller is None:
            return
        self.polled = True
        for fd, _events in self.poller.poll(0, len(self.owners) + 1):
            owner = self.owners.get(fd)
            if isinstance(owner, _Known):  # exited: gone, or a zombie
                owner.dirty, owner.quiet = True, False
            elif owner is not None:  # a parent exited: its children were re-parented
                for pid in owner.children:
                    child = self.known.get(pid)
                    if child is not None:
                        child.dirty, child.quiet, child.parent = True, False, None
                owner.children.clear()
                self._close_parent(owner)

    def watch(self, pid: int) -> None:
        """Re-read ``pid`` every sample for the next ``SIGNAL_WATCH`` samples (signalled)."""
        self.signalled[pid] = self.sample_no + SIGNAL_WATCH
        known = self.known.get(pid)
        if known is not None:
            known.quiet = False

    def read(self, pid: int) -> Json | None:
        """One process as a wire dict, or None if it is gone.

        The dict is shared with later calls while nothing in it changes: never mutate it.
        """
        known = self.known.get(pid)
        if known is not None and known.fd is not None:
            if (
                self.polled
                and known.quiet
                and (self.sample_no + pid) % self.stat_every
                and known.due > self.now
            ):
                known.seen = True  # its pidfd and its parent's are quiet: nothing to re-read
                return known.out
            try:
                data = os.pread(known.fd, STAT_BYTES, 0)
            except OSError:  # ESRCH: the process this fd was opened on is gone
                data = b""
            if data:
                return self._update(known, data)
            self._drop(known)  # the pid may already name another process: look afresh
            known = None
        keep = known is None and self.pinned < self.fd_limit
        pidfd = None
        if keep and self.poller is not None and self.pidfds < self.fd_limit:
            try:  # before the stat fd: if the pid is recycled in between, the pidfd fires
                pidfd = os.pidfd_open(pid)  # novermin: only with self.poller (3.9+)
            except OSError:
                pidfd = None
        try:
            fd = os.open(f"{self.proc}/{pid}/stat", os.O_RDONLY)
        except OSError:
            if known is not None:
                self._drop(known)
            if pidfd is not None:
                os.close(pidfd)
            return None
        try:
            data = os.read(fd, STAT_BYTES)
            parsed = parse_stat(data.decode("utf-8", "replace"))
            if parsed is None or (known is not None and known.start != parsed[3]):
                if known is not None:  # gone, or the pid was recycled
                    self._drop(known)
                if parsed is None:
                    return None
                known = None
            if known is None:
                known = _Known(pid, parsed[3], fd if keep else None)
                self.pinned += keep
                self.known[pid] = known
                known.static["user"] = self._user(pid)
                if keep and pidfd is not None:
                    known.pidfd, pidfd = pidfd, None
                    self.pidfds += 1
                    self.owners[known.pidfd] = known
                    self.poller.register(known.pidfd, select.EPOLLIN)
            return self._update(known, data)
        except OSError:
            return None
        finally:
            if not keep:
                os.close(fd)
            if pidfd is not None:
                os.close(pidfd)

    def _update(self, known: _Known, data: bytes) -> Json | None:
        """``known``'s wire dict after reading ``data`` from its stat (same dict if unchanged)."""
        if data == known.data and known.cpu == 0 and not known.stale and known.due > self.now:
            # an idle process's stat is the same bytes: no CPU spent, nothing to parse
            known.ticks_at = time.monotonic()
            known.seen = True
            known.dirty = False
        else:
            out = self._parse(known, data)
            if out is None:
                return None
        if known.pidfd is not None and known.parent != known.out["ppid"]:
            self._watch_parent(known)
        known.quiet = (
            known.parent is not None and not known.hot and known.pid not in self.signalled
        )
        return known.out

    def _parse(self, known: _Known, data: bytes) -> Json | None:
        open_at = data.find(b"(")
        close_at = data.rfind(b")")
        # fields after comm: state ppid ... utime stime (14, 15) ... rss (24): rest[0, 1,
        # 11, 12, 21]. The numbers shown are compared, not the ticks: an idle process's
        # dict stays the same object (nothing to send), a busy one's changes.
        rest = data[close_at + 2 :].split(b" ", 22)
        if open_at < 0 or close_at < open_at or len(rest) < 3:
            return None
        cpu = rss = None
        if len(rest) > 21:
            try:
                ticks = int(rest[11]) + int(rest[12])
                rss = int(rest[21]) * self.page_size >> 20
            except ValueError:
                ticks = -1
            if ticks >= 0:
                cpu = self._cpu(known, ticks)
        sig = (data[open_at + 1 : close_at], rest[0], rest[1], cpu, rss, rest[2])
        known.seen = True
        known.dirty = False
        if (
            known.stale
            or known.due <= self.now
            or (known.sig is not None and sig[0] != known.sig[0])
        ):
            self._refresh(known)
        if sig != known.sig:
            try:
                ppid = int(sig[2])
            except ValueError:
                return None
            out = dict(known.static)
            out["name"] = cap_text(sig[0].decode("utf-8", "replace"), TEXT_MAX)
            out["state"] = cap_text(sig[1].decode("ascii", "replace"), TEXT_MAX)
            out["ppid"] = ppid
            try:
                out["pgid"] = int(sig[5])
            except ValueError:
                pass
            if cpu is not None:
                out["cpu_pct"] = cpu
            if rss is not None:
                out["rss_mib"] = rss
            known.out, known.sig = out, sig
            known.hot = sig[1] in HOT_STATES
        known.data = data
        return known.out

    def _watch_parent(self, known: _Known) -> None:
        """Watch ``known``'s current parent's pidfd (re-parenting shows as its exit)."""
        self._unwatch_parent(known)
        ppid = known.out["ppid"]
        if ppid <= 0:  # the namespace's init (or the kernel): never re-parented
            known.parent = ppid
            return
        parent = self.parents.get(ppid)
        if parent is None:
            if self.pidfds >= self.fd_limit:
                return  # over budget: unwatched, so re-read every sample
            try:
                fd = os.pidfd_open(ppid)  # novermin: only with self.poller (3.9+)
            except OSError:  # gone already: re-parenting is under way, re-read next sample
                return
            assert known.fd is not None
            try:  # the parent may have died and its pid been reused before pidfd_open
                data = os.pread(known.fd, STAT_BYTES, 0)
            except OSError:
                data = b""
            if data[data.rfind(b")") + 2 :].split(b" ", 2)[1:2] != [b"%d" % ppid]:
                os.close(fd)
                return
            parent = self.parents[ppid] = _Parent(ppid, fd)
            self.pidfds += 1
            self.owners[fd] = parent
            self.poller.register(fd, select.EPOLLIN)
        parent.children.add(known.pid)
        known.parent = ppid

    def _unwatch_parent(self, known: _Known) -> None:
        parent = self.parents.get(known.parent) if known.parent is not None else None
        known.parent = None
        if parent is not None:
            parent.children.discard(known.pid)
            if not parent.children:
                self._close_parent(parent)

    def _close_parent(self, parent: _Parent) -> None:
        if self.parents.get(parent.pid) is parent:
            del self.parents[parent.pid]
        self._close_pidfd(parent.fd)

    def _close_pidfd(self, fd: int) -> None:
        del self.owners[fd]
        self.pidfds -= 1
        try:
            self.poller.unregister(fd)
        except OSError:
            pass
        os.close(fd)

    def _refresh(self, known: _Known) -> None:
        """Re-read what rarely changes for one process: cmdline (set-proctitle) and cgroup."""
        pid = known.pid
        raw = _read(f"{self.proc}/{pid}/cmdline") or ""
        cgroup = cgroup_path(_read(f"{self.proc}/{pid}/cgroup") or "")
        static: Json = {
            "pid": pid,
            "start_ticks": known.start,
            "started_at": round(self.boot_time + known.start / self.clk_tck, 2),
            "cmdline": self._cmdline(known, raw.replace("\0", " ").strip()),
            "user": known.static.get("user"),
            "cgroup": None if cgroup is None else cap_text(cgroup, CGROUP_MAX),
            "unit": unit_of_cgroup(cgroup),
        }
        static.update(cgroup_facts(cgroup))
        static = {k: v for k, v in static.items() if v is not None}
        if static != known.static:
            known.static, known.sig = static, None
        known.stale = False
        spread = ((pid * 2654435761) % 1024) / 2048.0  # fixed per pid, in [0, 0.5)
        known.due = self.now + CMDLINE_TTL_S * (1.0 - spread)

    def _cmdline(self, known: _Known, text: str) -> str:
        """``text`` within ``CMDLINE_MAX``, and within ``CMDLINE_SHORT`` once the cmdlines
        of the known processes spend ``CMDLINE_BUDGET``: one user's thousand processes
        with 4 KiB cmdlines cannot make a snapshot too large to travel."""
        self.long_cmdlines -= known.cost
        self.squeezed -= known.squeezed
        known.cost, known.squeezed = 0, False
        if len(text) * 6 <= CMDLINE_SHORT:
            return text
        text = cap_text(text, CMDLINE_MAX)
        cost = text_cost(text)
        if cost <= CMDLINE_SHORT:
            return text
        if self.long_cmdlines + cost > CMDLINE_BUDGET:
            known.squeezed = True
            self.squeezed += 1
            return cap_text(text, CMDLINE_SHORT)
        known.cost = cost
        self.long_cmdlines += cost
        return text

    def _uptime(self) -> float:
        """Seconds since boot, as start ticks count them (``btime`` is whole seconds)."""
        text = _read(self.proc + "/uptime", 64)
        try:
            return float((text or "").split()[0])
        except (IndexError, ValueError):
            return time.time() - self.boot_time

    def _cpu(self, known: _Known, ticks: int) -> int | None:
        """% of one CPU ``known`` used since it was last read (``ticks``: utime + stime);
        on first sight, its average over its life so far."""
        now = time.monotonic()
        if known.ticks < 0:
            alive = self._uptime() - known.start / self.clk_tck
            cpu = round(100.0 * ticks / self.clk_tck / alive) if alive >= 0.1 else None
        elif now - known.ticks_at < 0.05:  # read again within a sample: ticks are 10 ms
            return known.cpu
        else:
            spent = max(0, ticks - known.ticks) / self.clk_tck
            cpu = round(100.0 * spent / (now - known.ticks_at))
        known.ticks, known.ticks_at, known.cpu = ticks, now, cpu
        return cpu

    def _drop(self, known: _Known) -> None:
        if self.known.get(known.pid) is known:
            del self.known[known.pid]
        self.long_cmdlines -= known.cost
        self.squeezed -= known.squeezed
        known.cost, known.squeezed = 0, False
        self._unwatch_parent(known)
        if known.pidfd is not None:
            self._close_pidfd(known.pidfd)
            known.pidfd = None
        if known.fd is not None:
            os.close(known.fd)
            known.fd = None
            self.pinned -= 1

    def stale_all(self) -> None:
        """Re-read every known process's stat, cmdline and cgroup on its next read."""
        for known in self.known.values():
            known.stale, known.quiet = True, False

    def close(self) -> None:
        for known in list(self.known.values()):
            self._drop(known)
        if self.poller is not None:
            self.poller.close()
            self.poller = None
        self.polled = False

    def members(self, cgroup: str) -> set[int]:
        """Every pid in a cgroup and the cgroups below it."""
        pids: set[int] = set()
        top = self.cgroup_fs + cgroup
        for directory, _dirs, files in os.walk(top):
            if "cgroup.procs" in files:
                for line in (_read(directory + "/cgroup.procs") or "").split():
                    if line.isdigit():
                        pids.add(int(line))
        return pids

    def forget_unseen(self) -> None:
        """End a sample: forget (and unpin) every process not read since the last call."""
        self.polled = False
        gone = []
        for known in self.known.values():
            if known.seen:
                known.seen = False
            else:
                gone.append(known)
        for known in gone:
            self._drop(known)


# ---------------------------------------------------------------- device-file holders

DEV_DIR_ENV = "GPUDASH_NVIDIA_DEV_DIR"  # where the NVIDIA device files are; default /dev
DEV_SLACK_MIB = 1024  # used memory beyond the listed holders' that needs no explaining
DEV_SCAN_BUDGET_S = 0.00025  # time a sample may spend on the rotating scan
DEV_RESCAN_MIN_S = 2.0  # full scans on a changed shortfall are at least this far apart


class DeviceHolders:
    """Processes that keep GPU memory through ``/dev/nvidia*`` without NVML listing them.

    A child forked from a CUDA process (a compile worker, a dataloader) inherits its device
    files, as fds and as mappings, and keeps the memory alive after the process NVML listed
    is gone (nvitop #134: "No Such Process" holding 32 GiB; ``lsof /dev/nvidia*`` finds it).
    A process that holds ``<dev>/nvidia<minor>`` open or mapped, is not listed by NVML and is
    not this collector is such a holder of the GPU with that minor number, shown (``dev``,
    memory unknown) on those of its GPUs whose memory is unexplained: a CUDA child often
    holds every visible GPU's file. nvidiactl and nvidia-uvm name no GPU and do not count.
    Driver daemons and monitoring agents that open the per-GPU files (nvidia-persistenced,
    DCGM) are found too while a GPU is short: their units are up, so they are never orphans.

    Reading every process's fds and maps costs tens of ms, so it runs only while some
    GPU's used memory exceeds what its listed holders account for by more than
    ``DEV_SLACK_MIB`` (a GPU with a holder of unknown memory cannot tell, and never asks).
    When that shortfall changes (at most every ``DEV_RESCAN_MIN_S`` unless a request asks),
    every process's fds are read at once (~60 ms for 1,100 processes), and its maps only if
    a short GPU is still unexplained (~130 ms in all); in between, processes are re-read in
    rotation within ``DEV_SCAN_BUDGET_S`` a sample.
    """

    def __init__(self, proc: str = "/proc", dev_dir: str | None = None, gpus: Any = None) -> None:
        self.proc = proc
        dev = (dev_dir or os.environ.get(DEV_DIR_ENV) or "/dev").rstrip("/")
        self.prefix = dev + "/nvidia"  # then digits: one GPU's device file
        self.prefix_b = self.prefix.encode()
        self.maps_re = re.compile(rb" " + re.escape(self.prefix_b) + rb"(\d+)$", re.M)
        self.reader = gpus  # NVML handles map device minors to indices (else minor = index)
        self.minor_index: dict[int, int] | None = None
        self.me = os.getpid()
        self.found: dict[int, tuple[int, tuple[int, ...]]] = {}  # pid -> (start, minors)
        self.queue: list[int] = []  # pids the rotating scan has still to read
        self.scanned_for: object = None  # the shortfall the last full scan looked at
        self.full_at = -DEV_RESCAN_MIN_S
        self.denied = 0  # processes whose fds the last full scan could not read
        self.was_denied = False  # the last process read had unreadable fds
        self.memo: tuple[Any, Any, tuple[tuple[int, int], ...]] = (None, None, ())
        self.outs: dict[int, tuple[Json, Json]] = {}

    def shortfall(self, gpus: list[Json], holders: dict[int, dict[int, int]]) -> tuple[
        tuple[int, int], ...
    ]:
        """(GPU, MiB) for each GPU whose used memory its listed holders leave unexplained."""
        used = [(g["index"], g.get("memory_used_mib")) for g in gpus]
        if self.memo[0] is holders and self.memo[1] == used:
            return self.memo[2]
        listed: dict[int, int] = {}
        unknown: set[int] = set()
        for mem in holders.values():
            for gpu, mib in mem.items():
                if mib < 0:
                    unknown.add(gpu)
                else:
                    listed[gpu] = listed.get(gpu, 0) + mib
        short = tuple(
            (gpu, mib - listed.get(gpu, 0))
            for gpu, mib in used
            if mib is not None and gpu not in unknown and mib - listed.get(gpu, 0) > DEV_SLACK_MIB
        )
        self.memo = (holders, used, short)
        return short

    def sample(
        self, gpus: list[Json], holders: dict[int, dict[int, int]], read: Any, force: bool
    ) -> tuple[dict[str, Json], str | None]:
        """Wire dicts of the device holders to add to this sample (keyed by pid), and a
        problem to report. ``read`` is ``ProcReader.read``; dicts are reused while unchanged."""
        short = self.shortfall(gpus, holders)
        if not short:
            if self.found or self.queue or self.scanned_for is not None:
                self.found, self.queue, self.outs, self.scanned_for = {}, [], {}, None
                self.denied = 0
            return {}, None
        now = time.monotonic()
        short_gpus = {gpu for gpu, _mib in short}
        # a request (force) lifts the rate limit; an unchanged shortfall was scanned already
        if short != self.scanned_for and (force or now - self.full_at >= DEV_RESCAN_MIN_S):
            self._full_scan(short_gpus, holders)
            self.scanned_for, self.full_at = short, now
        else:
            self._rotate(holders)
        procs: dict[str, Json] = {}
        for pid, (start, minors) in list(self.found.items()):
            if pid in holders:
                continue  # NVML lists it now: its memory is attributed
            indices = [i for i in self._indices(minors) if i in short_gpus]
            if not indices:
                continue  # it holds no GPU whose memory needs explaining
            info = read(pid)
            if info is None or info.get("start_ticks") != start:
                del self.found[pid]  # gone, or the pid names another process now
                continue
            last = self.outs.get(pid)
            if last is None or last[0] is not info or last[1]["device_gpus"] != indices:
                out = dict(info)
                out["gpu_memory_mib"] = {str(i): -1 for i in indices}
                out["device_gpus"] = indices
                last = self.outs[pid] = (info, out)
            procs[str(pid)] = last[1]
        for pid in [p for p in self.outs if str(p) not in procs]:
            del self.outs[pid]
        problem = None
        if self.denied:
            problem = (
                f"memory on GPU {', '.join(str(g) for g in sorted(short_gpus))} has no listed "
                f"holder and the open files of {self.denied} processes are not readable "
                "without root (--sudo): some of its holders may not be shown"
            )
        return procs, problem

    def _pids(self) -> list[int]:
        try:
            return [int(e) for e in os.listdir(self.proc) if e.isdigit() and int(e) != self.me]
        except OSError:
            return []

    def _full_scan(self, short: set[int], listed: dict[int, Any]) -> None:
        """Every process NVML does not list: fds, then maps if fds leave a GPU unexplained."""
        found: dict[int, tuple[int, tuple[int, ...]]] = {}
        pids = [pid for pid in self._pids() if pid not in listed]
        denied = 0
        for pid in pids:
            self.was_denied = False
            hit = self._held(pid, maps=False)
            denied += self.was_denied
            if hit is not None:
                found[pid] = hit
        self.denied = denied
        covered = {self._index(m) for _start, minors in found.values() for m in minors}
        if not short <= covered:  # no fd explains a short GPU: look for mappings too
            for pid in pids:
                if pid not in found:
                    hit = self._held(pid, maps=True, fds=False)
                    if hit is not None:
                        found[pid] = hit
        self.found, self.queue = found, []

    def _rotate(self, listed: dict[int, Any]) -> None:
        """Re-read processes NVML does not list, the next ones in turn, within the budget."""
        if not self.queue:
            self.queue = self._pids()
        deadline = time.perf_counter() + DEV_SCAN_BUDGET_S
        first = True  # one at least, however slow the host: the rotation always moves on
        while self.queue and (first or time.perf_counter() < deadline):
            first = False
            pid = self.queue.pop()
            if pid in listed:
                continue
            hit = self._held(pid, maps=True)
            if hit is not None:
                self.found[pid] = hit
            else:
                self.found.pop(pid, None)

    def _held(self, pid: int, maps: bool, fds: bool = True) -> tuple[int, tuple[int, ...]] | None:
        """(start ticks, minors) of the per-GPU device files ``pid`` has open or mapped.

        Everything is read through one ``/proc/PID`` directory fd, which keeps naming the
        process it was opened on: if the pid is reused meanwhile the reads fail."""
        try:
            base = os.open(f"{self.proc}/{pid}", os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return None
        try:
            minors: set[int] = set()
            if fds:
                minors |= self._fd_minors(base)
            if maps and not minors:
                minors |= self._map_minors(base)
            if not minors:
                return None
            fd = os.open("stat", os.O_RDONLY, dir_fd=base)
            try:
                parsed = parse_stat(os.read(fd, STAT_BYTES).decode("utf-8", "replace"))
            finally:
                os.close(fd)
            return None if parsed is None else (parsed[3], tuple(sorted(minors)))
        except OSError:
            return None
        finally:
            os.close(base)

    def _fd_minors(self, base: int) -> set[int]:
        minors: set[int] = set()
        try:
            fd_dir = os.open("fd", os.O_RDONLY | os.O_DIRECTORY, dir_fd=base)
        except PermissionError:
            self.was_denied = True
            return minors
        try:
            prefix, cut = self.prefix, len(self.prefix)
            for name in os.listdir(fd_dir):
                try:
                    target = os.readlink(name, dir_fd=fd_dir)
                except OSError:
                    continue
                if target.startswith(prefix) and target[cut:].isdigit():
                    minors.add(int(target[cut:]))
        finally:
            os.close(fd_dir)
        return minors

    def _map_minors(self, base: int) -> set[int]:
        try:
            fd = os.open("maps", os.O_RDONLY, dir_fd=base)
        except OSError:
            return set()
        try:
            chunks = []
            while True:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(fd)
        data = b"".join(chunks)
        if self.prefix_b not in data:
            return set()
        return {int(m) for m in self.maps_re.findall(data)}

    def _index(self, minor: int) -> int:
        if self.minor_index is None:
            self.minor_index = {}
            nvml: Any = getattr(self.reader, "nvml", None)
            for index, handle in enumerate(getattr(self.reader, "handles", ())):
                try:
                    self.minor_index[int(nvml.nvmlDeviceGetMinorNumber(handle))] = index
                except Exception:  # noqa: BLE001 - no minor from the driver: minor = index
                    continue
        return self.minor_index.get(minor, minor)

    def _indices(self, minors: tuple[int, ...]) -> list[int]:
        return sorted({self._index(m) for m in minors})


# ------------------------------------------------------------------------------ units


class UnitReader:
    """Unit properties from ONE batched ``systemctl show`` when something changed."""

    def __init__(self, systemctl: str | None = None, run_dir: str = "/run/systemd/system") -> None:
        self.systemctl = systemctl or shutil.which("systemctl")
        self.booted = os.path.isdir(run_dir)
        self.last: dict[str, Json] = {}
        self.key: object = None
        self.read_at = 0.0

    @property
    def problem(self) -> str | None:
        if not self.booted:
            return "host is not running systemd: units unknown"
        if not self.systemctl:
            return "systemctl not found: units unknown"
        return None

    def read(
        self, names: set[str], key: object, force: bool = False
    ) -> tuple[list[Json], list[str]]:
        if self.problem:
            return [], [self.problem]
        if not names:
            return [], []
        now = time.monotonic()
        if not force and key == self.key and now - self.read_at < UNIT_TTL_S:
            return [self.last[n] for n in sorted(names) if n in self.last], []
        assert self.systemctl is not None
        try:
            done = subprocess.run(
                [self.systemctl, "show", "--no-pager", "-p", UNIT_PROPERTIES, "--", *sorted(names)],
                capture_output=True,
                text=True,
                encoding="utf-8",  # unit descriptions are anybody's bytes
                errors="replace",
                timeout=10,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return [], [f"systemctl show failed: {exc}"]
        self.last = {u["name"]: u for u in parse_systemctl_show(done.stdout)}
        self.key, self.read_at = key, now
        errors = []
        if done.returncode != 0 and not self.last:
            errors.append("systemctl show: " + done.stderr.strip()[:200])
        return [self.last[n] for n in sorted(names) if n in self.last], errors


# ------------------------------------------------------------------------- containers


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def parse_inspect(text: str, runtime: str) -> list[Json]:
    """``docker inspect`` / ``podman inspect`` JSON (a list) -> container dicts."""
    try:
        items = json.loads(text) if text.strip() else []
    except ValueError:
        return []
    out: list[Json] = []
    for item in items if isinstance(items, list) else []:
        cid = _get(item, "Id")
        if not isinstance(cid, str) or not CONTAINER_ID.fullmatch(cid):
            continue
        c: Json = {"id": cid, "runtime": runtime}
        name = _get(item, "Name")
        image = _get(item, "Config", "Image") or _get(item, "ImageName")
        policy = _get(item, "HostConfig", "RestartPolicy", "Name")
        for field, value, limit in (
            ("name", name.lstrip("/") if isinstance(name, str) else None, TEXT_MAX),
            ("image", image, TEXT_MAX),
            ("state", _get(item, "State", "Status"), WORD_MAX),
            ("restart_policy", policy or ("no" if policy == "" else None), WORD_MAX),
        ):
            if isinstance(value, str) and value:
                c[field] = cap_text(value, limit)
        for field, value in (("restart_count", _get(item, "RestartCount")),
                             ("main_pid", _get(item, "State", "Pid"))):
            low = 0 if field == "restart_count" else 1  # Pid 0: not running
            if type(value) is int and low <= value < 2**31:
                c[field] = value
        port = published_port(item)
        if port is not None:
            c["port"] = port
        c.update(_lint_facts(item))
        out.append(c)
    return out


PORTS_MAX = 64  # published ports of one container looked at


def published_port(item: Any) -> int | None:
    """The host TCP port a container publishes its lowest TCP port on (its ready URL's),
    or None: from ``NetworkSettings.Ports`` (what the runtime bound, dynamic ports too),
    else ``HostConfig.PortBindings`` (what was asked)."""
    for where in (("NetworkSettings", "Ports"), ("HostConfig", "PortBindings")):
        ports = _get(item, *where)
        if not isinstance(ports, dict):
            continue
        best: tuple[int, int] | None = None
        for key, binds in list(ports.items())[:PORTS_MAX]:
            inner, _, proto = str(key).partition("/")
            if proto not in ("tcp", "") or not inner.isdigit() or not isinstance(binds, list):
                continue
            for bind in binds[:PORTS_MAX]:
                host = _get(bind, "HostPort")
                if isinstance(host, str) and host.isdigit() and 0 < int(host) < 65536 and (
                        best is None or int(inner) < best[0]):
                    best = (int(inner), int(host))
        if best is not None:
            return best[1]
    return None


def _lint_facts(item: Any) -> Json:
    """What the container lint reads of one inspect record: its health check, --init and
    PID mode (each only where the runtime said it)."""
    out: Json = {}
    status = _get(item, "State", "Health", "Status")
    test = _get(item, "Config", "Healthcheck", "Test")
    if isinstance(status, str) and status:
        out["health"] = cap_text(status, WORD_MAX)
    elif isinstance(test, list) and test and test[0] != "NONE":
        out["health"] = "configured"
    elif isinstance(_get(item, "Config"), dict):  # inspected, and no health check in it
        out["health"] = "none"
    init = _get(item, "HostConfig", "Init")
    if isinstance(init, bool):
        out["init"] = "yes" if init else "no"
    elif init is None and isinstance(_get(item, "HostConfig"), dict):
        out["init"] = "no"  # docker says null when --init was not given
    mode = _get(item, "HostConfig", "PidMode")
    if isinstance(mode, str):
        out["pid_mode"] = cap_text(mode or "private", WORD_MAX)
    return out


def _missing(stderr: str, ids: list[str]) -> set[str]:
    """The ids the runtime said do not exist (``No such object/container: ID``)."""
    gone = set()
    for line in stderr.lower().splitlines():
        if "no such" in line:
            gone |= {i for i in ids if i in line}
    return gone


class ContainerReader:
    """Name, image, state and restart policy of the containers the processes' cgroups name,
    from ONE batched ``docker inspect`` (and ``podman inspect``) when the set changed or
    ``UNIT_TTL_S`` passed. No CLI: no metadata and no error (the host runs no such runtime).

    A container once seen stays reported while the runtime knows it: after ``docker stop``
    no process names it, and its state ``exited`` is the proof.
    """

    def __init__(self, sudo: bool = False, which: Any = shutil.which) -> None:
        self.clis = {rt: which(rt) for rt in ("docker", "podman")}
        self.sudo = sudo and hasattr(os, "geteuid") and os.geteuid() != 0
        self.remembered: dict[str, str] = {}  # id -> runtime
        self.last: dict[str, Json] = {}
        self.key: object = None
        self.read_at = 0.0

    def read(self, seen: dict[str, str], force: bool = False) -> tuple[list[Json], list[str]]:
        """``seen``: container id -> runtime, from this sample's cgroups."""
        for cid, runtime in seen.items():
            if runtime in self.clis and self.clis[runtime]:
                self.remembered[cid] = runtime
        errors: list[str] = []
        if len(self.remembered) > MAX_CONTAINERS:
            errors.append(f"{len(self.remembered) - MAX_CONTAINERS} containers beyond "
                          f"{MAX_CONTAINERS} not inspected")
        while len(self.remembered) > MAX_CONTAINERS:  # the oldest first
            self.remembered.pop(next(iter(self.remembered)))
        ids = dict(self.remembered)
        now = time.monotonic()
        key = tuple(sorted(ids))
        if not force and key == self.key and now - self.read_at < UNIT_TTL_S:
            return [self.last[i] for i in sorted(ids) if i in self.last], []
        found: dict[str, Json] = {}
        for runtime in ("docker", "podman"):
            asked = sorted(i for i, rt in ids.items() if rt == runtime)
            cli = self.clis.get(runtime)
            if not asked or not cli:
                continue
            argv = [cli, "inspect", "--type", "container", "--", *asked]
            if self.sudo:
                argv = ["sudo", "-n", *argv]
            try:
                done = subprocess.run(argv, capture_output=True, text=True, encoding="utf-8",
                                      errors="replace", timeout=CONTAINER_CLI_TIMEOUT_S)
            except (OSError, subprocess.SubprocessError) as exc:
                errors.append(f"{runtime} inspect failed: {exc}")
                continue
            got = {c["id"]: c for c in parse_inspect(done.stdout, runtime)}
            gone = _missing(done.stderr, asked) - set(got)
            if done.returncode != 0 and not got and not gone:
                errors.append(f"{runtime} inspect: " + (done.stderr.strip()[:200] or
                                                        f"exit {done.returncode}"))
            for cid in gone:
                got[cid] = {"id": cid, "runtime": runtime, "state": REMOVED}
                if cid not in seen:  # removed, and no process names it: forget it
                    self.remembered.pop(cid, None)
            found.update(got)
        self.last, self.key, self.read_at = found, key, now
        return [found[i] for i in sorted(found)], errors


def parse_crictl_pods(text: str) -> list[Json]:
    """``crictl pods -o json`` -> pod dicts (uid, namespace, name)."""
    try:
        items = _get(json.loads(text), "items")
    except ValueError:
        return []
    out = []
    for item in items if isinstance(items, list) else []:
        uid, ns, name = (_get(item, "metadata", k) for k in ("uid", "namespace", "name"))
        if isinstance(uid, str) and POD_UID.fullmatch(uid):
            pod: Json = {"uid": uid}
            for field, value in (("namespace", ns), ("name", name)):
                if isinstance(value, str) and value:
                    pod[field] = cap_text(value, TEXT_MAX)
            out.append(pod)
    return out


class PodReader:
    """Namespace and name of the Kubernetes pods the cgroups name, where ``crictl`` answers;
    else only their UIDs (from the cgroup path)."""

    def __init__(self, sudo: bool = False, which: Any = shutil.which) -> None:
        self.crictl = which("crictl")
        self.sudo = sudo and hasattr(os, "geteuid") and os.geteuid() != 0
        self.last: dict[str, Json] = {}
        self.read_at = -UNIT_TTL_S

    def read(self, uids: set[str], force: bool = False) -> list[Json]:
        if not uids:
            return []
        now = time.monotonic()
        if self.crictl and (force or now - self.read_at >= UNIT_TTL_S
                            or not uids <= set(self.last)):
            argv = [self.crictl, "pods", "-o", "json"]
            try:
                done = subprocess.run(["sudo", "-n", *argv] if self.sudo else argv,
                                      capture_output=True, text=True, encoding="utf-8",
                                      errors="replace", timeout=CONTAINER_CLI_TIMEOUT_S)
                self.last = {p["uid"]: p for p in parse_crictl_pods(done.stdout)}
            except (OSError, subprocess.SubprocessError):
                self.last = {}
            self.read_at = now
        return [self.last.get(u) or {"uid": u} for u in sorted(uids)][:MAX_CONTAINERS]


# ------------------------------------------------------------------------------- host


def read_boot_id(proc: str = "/proc") -> str | None:
    """This boot's id: a (pid, start ticks) identity holds within one boot only."""
    text = (_read(proc + "/sys/kernel/random/boot_id", 128) or "").strip()
    return text if BOOT_ID.fullmatch(text) else None


def load_psutil() -> Any:
    """The host's psutil, or None: the collector never needs it (see ``HostStats``)."""
    try:
        import psutil  # type: ignore[import-untyped]
    except Exception:  # noqa: BLE001 - absent, or broken on this host: /proc serves
        return None
    return psutil


class HostStats:
    """The host's CPU busy (% of all CPUs since the last read) and RAM in use (total less
    available), from psutil where the host has it, else from ``/proc/stat`` and
    ``/proc/meminfo`` computed the way psutil does on Linux."""

    def __init__(self, psutil: Any = None, proc: str = "/proc") -> None:
        self.psutil = psutil
        self.proc = proc
        self.last: tuple[float, float] | None = None  # (busy, total) CPU time, /proc path
        self.primed = False
        self.read_at = -HOST_STATS_S
        self.own_read_at = -OWN_CPU_S
        self.own_cpu_s: float | None = None
        self.values: Json = {}

    @property
    def uses_psutil(self) -> bool:
        return self.psutil is not None

    def read(self) -> Json:
        """{"cpu_pct", "mem_used_mib", "mem_total_mib", "collector_cpu_s"}: the same
        values (and dict) for ``HOST_STATS_S`` after each reading (a CPU % over less than
        that is noise). ``collector_cpu_s``: CPU seconds this collector and the programs it
        waited for (systemctl, nvidia-smi) used since it started, every ``OWN_CPU_S``."""
        now = time.monotonic()
        if now - self.read_at < HOST_STATS_S:
            return self.values
        self.read_at = now
        cpu = self._cpu_psutil() if self.psutil is not None else self._cpu_proc()
        used, total = self._mem_psutil() if self.psutil is not None else self._mem_proc()
        primed, self.primed = self.primed, True
        if now - self.own_read_at >= OWN_CPU_S:
            self.own_read_at = now
            t = os.times()
            self.own_cpu_s = round(t[0] + t[1] + t[2] + t[3], 2)
        self.values = {
            "cpu_pct": round(cpu, 1) if primed and cpu is not None else None,
            "mem_used_mib": used,
            "mem_total_mib": total,
            "collector_cpu_s": self.own_cpu_s,
        }
        return self.values

    def _cpu_psutil(self) -> float | None:
        try:
            return float(self.psutil.cpu_percent(interval=None))
        except Exception:  # noqa: BLE001 - a host's psutil may fail where /proc works
            return self._cpu_proc()

    def _mem_psutil(self) -> tuple[int | None, int | None]:
        try:
            mem = self.psutil.virtual_memory()
            return (mem.total - mem.available) // MIB, mem.total // MIB
        except Exception:  # noqa: BLE001
            return self._mem_proc()

    def _cpu_proc(self) -> float | None:
        """psutil.cpu_percent: busy = all but idle and iowait; guest is inside user."""
        line = (_read(self.proc + "/stat", 512) or "").split("\n", 1)[0].split()
        if len(line) < 9 or line[0] != "cpu":
            return None
        try:
            ticks = [float(x) for x in line[1:9]]  # user nice system idle iowait irq softirq steal
        except ValueError:
            return None
        total = sum(ticks)
        busy = total - ticks[3] - ticks[4]
        last, self.last = self.last, (busy, total)
        if last is None or total <= last[1]:
            return None if last is None else 0.0
        return min(100.0, max(0.0, 100.0 * (busy - last[0]) / (total - last[1])))

    def _mem_proc(self) -> tuple[int | None, int | None]:
        fields: dict[str, int] = {}
        for line in (_read(self.proc + "/meminfo", 8192) or "").splitlines():
            key, _, value = line.partition(":")
            parts = value.split()
            if parts and parts[0].isdigit():
                fields[key] = int(parts[0]) * 1024
        total = fields.get("MemTotal")
        if total is None:
            return None, None
        available = fields.get("MemAvailable")
        if available is None:  # kernel < 3.14: psutil estimates the same way
            kinds = ("MemFree", "Active(file)", "Inactive(file)", "SReclaimable")
            available = sum(fields.get(k, 0) for k in kinds)
        return (total - min(total, available)) // MIB, total // MIB


# -------------------------------------------------------------------------- collector


def login_name() -> str:
    """Who this collector runs as, for messages; a uid without a passwd entry is a login too."""
    uid = os.geteuid()
    try:
        return repr(pwd.getpwuid(uid).pw_name)
    except KeyError:  # containers run arbitrary uids
        return f"uid {uid} (no passwd entry)"


def act_permission(sudo: bool) -> tuple[bool, str | None]:
    """Whether this login can stop units and signal other users' processes."""
    if os.geteuid() == 0:
        return True, None
    user = cap_text(login_name(), TEXT_MAX)
    if sudo:
        try:
            ok = (
                subprocess.run(["sudo", "-n", "true"], capture_output=True, timeout=10).returncode
                == 0
            )
        except (OSError, subprocess.SubprocessError):
            ok = False
        if ok:
            return True, None
        return False, f"login {user} cannot run `sudo -n` (needs a NOPASSWD rule)"
    return False, f"login {user} is not root; rerun with --sudo (needs a NOPASSWD rule)"


def _bounded_errors(errors: list[str]) -> list[str]:
    """Distinct errors, each within ERROR_MAX, at most MAX_ERRORS of them."""
    unique = [cap_text(e, ERROR_MAX) for e in dict.fromkeys(errors)]
    if len(unique) > MAX_ERRORS:
        more = len(unique) - (MAX_ERRORS - 1)
        unique[MAX_ERRORS - 1 :] = [f"... and {more} more errors"]
    return unique


class HostCollector:
    """Produces one wire snapshot per call to ``sample``."""

    def __init__(
        self,
        sudo: bool = False,
        nvml_source: str | None = None,
        proc: ProcReader | None = None,
        units: UnitReader | None = None,
        gpus: Any = None,
        source: str = "nvml",
        stats: HostStats | None = None,
        containers: ContainerReader | None = None,
    ) -> None:
        if gpus is None:
            gpus, source = gpu_reader(nvml_source)
        self.gpus = gpus
        self.source = source
        self.proc = proc or ProcReader()
        self.units = units or UnitReader()
        self.containers = containers or ContainerReader(sudo)
        self.pods = PodReader(sudo)
        self.stats = stats or HostStats(load_psutil(), self.proc.proc)
        self.boot_id = read_boot_id(self.proc.proc)
        self.can_act, self.reason = act_permission(sudo)
        self.watched: set[str] = set()
        self.watched_containers: dict[str, str] = {}  # id -> runtime
        # processes signalled on gpudash's request: listed in every snapshot until they
        # are gone, so that "not listed" means "gone" for them whatever they hold
        self.signalled: dict[int, int] = {}  # pid -> its start ticks
        self.holding: dict[int, tuple[Json, dict[int, int], Json, str, int | None]] = {}
        self.devices = DeviceHolders(self.proc.proc, gpus=gpus)
        host = os.uname().nodename if hasattr(os, "uname") else "localhost"
        self.host = cap_text(host, TEXT_MAX)

    def _signalled(self, procs: dict[str, Json]) -> None:
        for pid, start in sorted(self.signalled.items()):
            if str(pid) in procs:
                continue
            info = self.proc.read(pid) if len(procs) < MAX_PROCS else None
            if info is None or info.get("start_ticks") != start or info.get("state") == "Z":
                del self.signalled[pid]  # gone (dead, or its pid is another process's)
            else:
                procs[str(pid)] = info

    def _ancestry(self, procs: dict[str, Json], holders: list[int], errors: list[str]) -> None:
        """List the live parents (up to ``ANCESTRY_DEPTH`` levels) and the process-group
        leader of every GPU holder: whether a model server's API server is still there
        is told by them."""
        read = self.proc.read
        wanted: list[int] = []
        for pid in holders:
            info = procs.get(str(pid))
            if info is None:
                continue
            pgid = info.get("pgid")
            if isinstance(pgid, int) and pgid > 1 and pgid != pid:
                wanted.append(pgid)
            ppid = info.get("ppid")
            for _ in range(ANCESTRY_DEPTH):
                if not isinstance(ppid, int) or ppid <= 1:
                    break
                parent = procs.get(str(ppid))
                if parent is None:
                    if len(procs) >= MAX_PROCS:
                        errors.append("parents of GPU holders not all listed: "
                                      f"a snapshot lists {MAX_PROCS} processes")
                        return
                    parent = read(ppid)
                    if parent is None:
                        break
                    procs[str(ppid)] = parent
                ppid = parent.get("ppid")
        for pgid in wanted:
            if str(pgid) in procs or len(procs) >= MAX_PROCS:
                continue
            leader = read(pgid)
            if leader is not None and leader.get("pgid") == pgid:
                procs[str(pgid)] = leader

    def sample(self, force_units: bool = False) -> Json:
        """One wire snapshot. Its process dicts are shared with later snapshots while they
        do not change (so ``merge_patch`` skips them by identity): never mutate them."""
        taken_at = time.time()
        if force_units:
            self.proc.stale_all()
        gpus, holders, errors = self.gpus.read()
        errors = list(errors)
        if len(gpus) > MAX_GPUS:
            errors.append(f"{len(gpus) - MAX_GPUS} GPUs beyond the first {MAX_GPUS} not listed")
            gpus = gpus[:MAX_GPUS]
        self.proc.begin_sample()  # after the driver's lists: any exit before now is seen
        procs: dict[str, Json] = {}
        before = self.holding
        holding: dict[int, tuple[Json, dict[int, int], Json, str, int | None]] = {}
        self.holding = holding
        sm_util: dict[int, int] = getattr(self.gpus, "sm_util", {})
        read = self.proc.read
        listed: Any = holders.items()
        if len(holders) > MAX_PROCS:  # absurd, but a snapshot must stay bounded
            listed = sorted(holders.items())[:MAX_PROCS]
            errors.append(f"{len(holders) - MAX_PROCS} GPU processes beyond {MAX_PROCS} not listed")
        for pid, mem in listed:
            # In a child PID namespace the driver's pids (the host's) name other processes
            # here, or none: never read them as if they were the holders.
            info = None if self.proc.nested else read(pid)
            last = before.get(pid)
            sm = sm_util.get(pid)
            if (last is not None and last[0] is info and (last[1] is mem or last[1] == mem)
                    and last[4] == sm):
                holding[pid] = last  # unchanged: the same dict (merge_patch skips it)
                procs[last[3]] = last[2]
                continue
            if info is None:  # listed by the driver, not readable here: say why
                info = {"pid": pid, "unreadable": self.proc.unreadable(pid)}
            out = dict(info)
            out["gpu_memory_mib"] = {str(k): v for k, v in mem.items()}
            if sm is not None:
                out["sm_util_pct"] = sm
            name = str(pid)
            holding[pid] = (info, mem, out, name, sm)
            procs[name] = out
        found, problem = self.devices.sample(gpus, holders, read, force_units)
        procs.update(found)  # holders through /dev/nvidia* that NVML does not list
        if problem:
            errors = errors + [problem]
        owners: dict[str, str] = {}
        for info in list(procs.values()):
            unit = info.get("unit")
            if unit and "cgroup" in info:
                owners[unit] = unit_cgroup(info["cgroup"], unit)
        membership = []
        for unit, cgroup in sorted(owners.items()):
            pids = self.proc.members(cgroup)
            membership.append((unit, tuple(sorted(pids))))
            unlisted = 0
            for pid in sorted(pids):
                if str(pid) not in procs:
                    if len(procs) >= MAX_PROCS:
                        unlisted += 1
                        continue
                    info = self.proc.read(pid)
                    if info is not None:
                        procs[str(pid)] = info
            if unlisted:
                errors.append(
                    f"{unlisted} processes of {unit} not listed (a snapshot lists {MAX_PROCS})"
                )
        self._ancestry(procs, list(holding) + [int(k) for k in found], errors)
        self._signalled(procs)
        self.proc.forget_unseen()
        if self.proc.squeezed:
            errors.append(
                f"cmdlines of {self.proc.squeezed} processes cut to {CMDLINE_SHORT} bytes:"
                f" all long cmdlines share {CMDLINE_BUDGET >> 10} KiB"
            )
        names = set(owners) | self.watched
        if len(names) > MAX_UNITS:
            errors.append(f"{len(names) - MAX_UNITS} units beyond {MAX_UNITS} not listed")
            names = set(sorted(owners)[:MAX_UNITS])
            names |= set(sorted(self.watched)[: MAX_UNITS - len(names)])
        key = (tuple(membership), tuple(sorted(self.watched)))
        units, unit_errors = self.units.read(names, key, force_units)
        seen: dict[str, str] = {}
        pod_uids: set[str] = set()
        me = os.geteuid() if hasattr(os, "geteuid") else 0
        for info in procs.values():
            cid, runtime = info.get("container_id"), info.get("container_runtime")
            if (cid is not None and runtime in ("docker", "podman")
                    and info.get("user_uid", me) == me):
                # a rootless container of another user is not in this runtime's store:
                # asked here, it would answer "no such container"
                seen[cid] = runtime
            if info.get("pod_uid") is not None:
                pod_uids.add(info["pod_uid"])
        for cid, runtime in self.watched_containers.items():
            seen.setdefault(cid, runtime)
        containers, container_errors = self.containers.read(seen, force_units)
        unit_errors = unit_errors + container_errors
        snap: Json = {
            "v": PROTOCOL,
            "host": self.host,
            "taken_at": round(taken_at, 3),
            "source": self.source,
            "errors": _bounded_errors(errors + unit_errors),
            "can_act": self.can_act,
            "gpus": {str(g["index"]): g for g in gpus},
            "procs": procs,
            "units": {u["name"]: u for u in units},
            "containers": {c["id"]: c for c in containers},
            "pods": {p["uid"]: p for p in self.pods.read(pod_uids, force_units)},
        }
        if self.source == "none":
            snap["degraded"] = True
        if self.boot_id is not None:
            snap["boot_id"] = self.boot_id
        for stat, value in self.stats.read().items():
            if value is not None:
                snap[stat] = value
        if self.reason:
            snap["cannot_act_reason"] = cap_text(self.reason, ERROR_MAX)
        return snap


def merge_patch(old: Json, new: Json) -> Json:
    """The RFC 7386 merge patch that turns ``old`` into ``new`` (both None-free)."""
    patch: Json = {}
    for key, value in new.items():
        before = old.get(key, _MISSING)
        if before is value:  # the collector reuses unchanged dicts
            continue
        if isinstance(value, dict) and isinstance(before, dict):
            sub = merge_patch(before, value)
            if sub:
                patch[key] = sub
        elif before != value or type(before) is not type(value):
            patch[key] = value
    for key in old:
        if key not in new:
            patch[key] = None
    return patch


_MISSING = object()


# ----------------------------------------------------------------------------- signals


def send_signal(
    pid: int, start_ticks: int | None, sig: int, proc: str = "/proc", boot_id: str | None = None
) -> str:
    """Signal ``pid`` only if it is still the process that started at ``start_ticks``
    (and, given ``boot_id``, in that boot: start ticks count from boot).

    The pidfd is opened *before* the start time is read: if the pid is recycled in
    between, the pidfd still names the old (dead) process and the signal goes nowhere.
    """
    if pid <= 0 or start_ticks is None:
        return "mismatch"
    if boot_id is not None and boot_id != read_boot_id(proc):
        return "mismatch"  # the host rebooted since the plan: the pid is somebody else
    pidfd = None
    opener = getattr(os, "pidfd_open", None)
    if opener is not None:
        try:
            pidfd = opener(pid)
        except ProcessLookupError:
            return "gone"
        except OSError:
            pidfd = None  # kernel without pidfd: check-then-kill, right here on the host
    try:
        parsed = parse_stat(_read(f"{proc}/{pid}/stat") or "")
        if parsed is None:
            return "gone"
        if parsed[3] != start_ticks:
            return "mismatch"
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, sig)  # novermin: pidfd only on 3.9+
        else:
            os.kill(pid, sig)
        return "sent"
    except ProcessLookupError:
        return "gone"
    except PermissionError:
        return "denied"
    except OSError as exc:
        return "denied" if exc.errno == 1 else "unknown"
    finally:
        if pidfd is not None:
            os.close(pidfd)


# ---------------------------------------------------------------------------- ready URL

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def http_get(url: str, timeout_s: float) -> tuple[int | None, str | None]:
    """(status, None) or (None, why) for a GET of ``url``, which must be plain http to
    this host's loopback (a model server's /health). No proxy, no redirect followed: the
    answer is the server's own, and nothing but loopback is ever asked."""
    import urllib.error
    import urllib.parse
    import urllib.request

    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or parts.hostname not in LOOPBACK_HOSTS:
        return None, "not a loopback http URL"

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None  # the 3xx itself is the answer

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), NoRedirect())
    try:
        with opener.open(url, timeout=max(0.1, min(float(timeout_s), 30.0))) as answer:
            return int(answer.status), None
    except urllib.error.HTTPError as exc:
        return int(exc.code), None
    except Exception as exc:  # noqa: BLE001 - every failure is an answer: "why not"
        reason = getattr(exc, "reason", exc)
        return None, str(getattr(reason, "strerror", None) or reason or type(exc).__name__)[:200]


# ---------------------------------------------------------------------------- main loop


LISTEN_SCAN_MAX = 20000  # descriptors looked at to find who listens on a port


def listening_inodes(port: int, proc: str = "/proc") -> set[str]:
    """The socket inodes listening on TCP ``port`` (v4 and v6) in this network namespace."""
    found: set[str] = set()
    for name in ("tcp", "tcp6"):
        for line in (_read(f"{proc}/net/{name}", 1 << 22) or "").splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and fields[1].rsplit(":", 1)[-1] == (
                    f"{port:04X}"):
                found.add(fields[9])
    return found


def _holds(pid: int, inodes: set[str], proc: str, budget: list[int]) -> bool | None:
    """``pid`` has one of the sockets open (None: its descriptors are not readable here)."""
    try:
        fds = os.listdir(f"{proc}/{pid}/fd")
    except PermissionError:
        return None
    except OSError:
        return False
    for fd in fds:
        budget[0] -= 1
        try:
            link = os.readlink(f"{proc}/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in inodes:
            return True
    return False


def listener_of(port: int, main_pid: int | None, proc: str = "/proc"
                ) -> tuple[int | None, bool]:
    """(the pid listening on ``port``, or None; whether some descriptors were unreadable).
    The unit's main process is looked at first: a model server's API server listens."""
    inodes = listening_inodes(port, proc)
    if not inodes:
        return None, False
    budget, hidden = [LISTEN_SCAN_MAX], False
    pids = [main_pid] if main_pid else []
    pids += sorted(int(d) for d in os.listdir(proc) if d.isdigit() and int(d) != main_pid)
    for pid in pids:
        held = _holds(pid, inodes, proc, budget)
        if held:
            return pid, hidden
        hidden = hidden or held is None
        if budget[0] <= 0:
            return None, True
    return None, hidden


def listener_refusal(url: str, unit: str, collector: HostCollector) -> str | None:
    """Why ``url`` cannot prove ``unit`` serves (its port is another process's), or None.
    Where it cannot be told (descriptors not readable by this login), it is not refused."""
    import urllib.parse

    try:
        port = urllib.parse.urlsplit(url).port or 80
    except ValueError:
        return None
    main = collector.units.last.get(unit, {}).get("main_pid")
    pid, _hidden = listener_of(port, main if isinstance(main, int) else None,
                               collector.proc.proc)
    if pid is None:
        return None  # nobody listens (the GET says so), or not readable here
    return unit_listener_refusal(port, unit, pid,
                                 _read(f"{collector.proc.proc}/{pid}/comm", 64) or "?",
                                 _read(f"{collector.proc.proc}/{pid}/cgroup") or "")


def unit_listener_refusal(port: int, unit: str, pid: int, comm: str, cgroup_text: str
                          ) -> str | None:
    """Why pid ``pid`` (its ``comm`` and ``/proc/PID/cgroup`` text as read on the host),
    listening on ``port``, proves nothing for ``unit``; None when it is the unit's own.
    One rule for the Python collector and the shell fallback."""
    owner = unit_of_cgroup(cgroup_path(cgroup_text))
    if owner == unit:
        return None
    name = comm.strip()[:64] or "?"
    return (f"port {port} is not {unit}'s: pid {pid} ({name}, "
            f"{owner or 'no unit'}) listens on it")


def container_refusal(url: str, container_id: str, runtime: str, collector: HostCollector
                      ) -> str | None:
    """Why ``url`` cannot prove the container serves (its port is another process's), or
    None; as ``listener_refusal``, what cannot be told (nobody in this namespace listens:
    DNAT into the container's own; descriptors not readable) is not refused."""
    import urllib.parse

    try:
        port = urllib.parse.urlsplit(url).port or 80
    except ValueError:
        return None
    main = collector.containers.last.get(container_id, {}).get("main_pid")
    main = main if isinstance(main, int) else None
    proc = collector.proc.proc
    pid, _hidden = listener_of(port, main, proc)
    if pid is None:
        return None
    uid = None
    if main is not None:  # a rootless podman's forwarders run as the container's user
        try:
            uid = os.stat(f"{proc}/{main}").st_uid
        except OSError:
            uid = None
    return container_listener_refusal(port, container_id, runtime, pid,
                                      _read(f"{proc}/{pid}/comm", 64) or "?",
                                      _read(f"{proc}/{pid}/cgroup") or "", uid)


DOCKER_FORWARDERS = ("docker-proxy",)
# podman's port forwarders: conmon (rootful), rootlessport, pasta, slirp4netns (rootless);
# comm is cut at 15 characters
PODMAN_FORWARDERS = ("conmon", "rootlessport", "rootlessport-ch", "pasta", "pasta.avx2",
                     "slirp4netns")


def container_listener_refusal(port: int, container_id: str, runtime: str, pid: int,
                               comm: str, cgroup_text: str, user_uid: int | None = None
                               ) -> str | None:
    """Why pid ``pid`` listening on ``port`` proves nothing for the container, or None when
    the listener is the container's own: a process of its cgroup (host network), or its
    runtime's port forwarder (docker-proxy in the docker daemon's cgroup; podman's conmon
    of this container, or a rootless forwarder of this container or of the rootless
    user ``user_uid``'s podman). Decided on what the host said (comm, cgroup text) only."""
    path = cgroup_path(cgroup_text) or ""
    name = comm.strip()[:64] or "?"
    owner = container_of_cgroup(path)
    if owner is not None and owner[0] == runtime and owner[1] == container_id:
        return None
    unit = unit_of_cgroup(path)
    if runtime == "docker" and name in DOCKER_FORWARDERS and unit == "docker.service":
        return None
    if runtime == "podman" and name in PODMAN_FORWARDERS:
        parts = path.split("/")
        if (f"libpod-conmon-{container_id}.scope" in parts
                or f"libpod-{container_id}.scope" in parts):
            return None
        if user_uid is not None and f"user@{user_uid}.service" in parts and name != "conmon":
            return None
    who = (owner[1] or "")[:12] if owner is not None else None
    return (f"port {port} is not container {container_id[:12]}'s: pid {pid} ({name}, "
            f"{who and 'container ' + who or unit or 'no unit'}) listens on it")


_EMIT_LOCK = threading.Lock()  # a probe's answer is written from its own thread
MAX_PROBES = 4  # GETs in flight at once; more are answered "busy" at once


def _emit(message: Json) -> None:
    # UTF-8 as is: a \u escape makes every non-ASCII character of a host's text 6 bytes;
    # "replace" turns lone surrogates (undecodable passwd names) into "?", never an error.
    line = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    data = line.encode("utf-8", "replace") + b"\n"
    with _EMIT_LOCK:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()


_probes = threading.BoundedSemaphore(MAX_PROBES)


def probe_later(url: str, timeout_s: float, request_id: Any, unit: str | None = None,
                collector: HostCollector | None = None,
                container: tuple[str, str] | None = None) -> Json | None:
    """Answer OP_HTTP from a thread of its own, by an absolute deadline: a server that
    sends one byte a second holds neither the answer past ``timeout_s`` nor the request
    loop (samples and signals go on meanwhile). None: answered later; else the reply.
    Given ``unit`` (or ``container``: its id and runtime), the answer counts only from
    its own listener: a port another process holds is refused without asking it."""
    if not _probes.acquire(blocking=False):
        return {"k": K_HTTP, "status": None, "error": "busy: too many probes in flight",
                "id": request_id}
    deadline = max(0.1, min(float(timeout_s), 30.0))
    got: list[tuple[int | None, str | None]] = []

    def get() -> None:
        refused = None
        if collector is not None and unit is not None:
            refused = listener_refusal(url, unit, collector)
        elif collector is not None and container is not None:
            refused = container_refusal(url, container[0], container[1], collector)
        got.append((None, refused) if refused else http_get(url, deadline))

    def answer() -> None:
        try:
            worker = threading.Thread(target=get, daemon=True)
            worker.start()
            worker.join(deadline)  # the GET itself may go on: nobody waits for it
            status, error = got[0] if got else (None, f"no answer within {deadline:g} s")
            _emit({"k": K_HTTP, "status": status, "error": error, "id": request_id})
        except (BrokenPipeError, OSError):
            pass  # gpudash went away
        finally:
            _probes.release()

    threading.Thread(target=answer, daemon=True).start()
    return None


def _stdin_lines(lines: queue.Queue[bytes | None]) -> None:
    for line in sys.stdin.buffer:
        lines.put(line)
    lines.put(None)


def _command(line: bytes, collector: HostCollector) -> Json | None:
    """Apply one request from gpudash; return the reply for requests that have one.
    A request it cannot read gets an error reply (with its id, where it has one)."""
    request: Any = None
    try:
        request = json.loads(line)
        op = request["op"]
        if op == OP_WATCH:
            if "container" in request:
                cid, runtime = str(request["container"]), str(request.get("runtime"))
                if CONTAINER_ID.fullmatch(cid) and runtime in ("docker", "podman"):
                    if len(collector.watched_containers) < MAX_CONTAINERS:
                        collector.watched_containers[cid] = runtime
                return None
            collector.watched.add(str(request["unit"]))
            return None
        if op == OP_REFRESH:
            return None
        if op == OP_PING:  # gpudash measures its request round trip
            return {"k": K_PONG, "id": request.get("id")}
        if op == OP_SAMPLE:
            return {"k": K_FULL, "s": collector.sample(force_units=True), "id": request.get("id")}
        if op == OP_HTTP:
            unit, owner = request.get("unit"), None
            if "container" in request:
                cid, runtime = str(request["container"]), str(request.get("runtime"))
                if not (CONTAINER_ID.fullmatch(cid) and runtime in ("docker", "podman")):
                    return {"k": K_HTTP, "status": None, "id": request.get("id"),
                            "error": "not a container to probe for"}
                owner = (cid, runtime)
            return probe_later(str(request["url"]), float(request.get("timeout", 3)),
                               request.get("id"), None if unit is None else str(unit),
                               collector, owner)
        if op == OP_SIGNAL:
            pid, start, boot = int(request["pid"]), request.get("start"), request.get("boot")
            if start is not None:
                start = int(start)
            boot = None if boot is None else str(boot)
            outcome = send_signal(pid, start, int(request["sig"]), boot_id=boot)
            collector.proc.watch(pid)  # its state may change: re-read it a while
            if outcome == "sent" and start is not None:
                collector.signalled[pid] = start  # listed until it is gone
            return {"k": K_SIGNAL, "outcome": outcome, "id": request.get("id")}
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
        reply: Json = {"k": K_ERROR, "msg": "bad request"}
    else:
        reply = {"k": K_ERROR, "msg": "unknown op"}
    if isinstance(request, dict) and request.get("id") is not None:
        reply["id"] = request["id"]
    return reply


def main(argv: list[str], nvml_source: str | None = None) -> int:
    """``stream INTERVAL [--sudo]`` or ``serve [--sudo]``: JSON lines on stdout."""
    mode = argv[0] if argv else "stream"
    sudo = "--sudo" in argv
    collector = HostCollector(sudo=sudo, nvml_source=nvml_source)
    lines: queue.Queue[bytes | None] = queue.Queue()
    threading.Thread(target=_stdin_lines, args=(lines,), daemon=True).start()
    try:
        if mode == "serve":
            _emit({"k": K_READY, "v": PROTOCOL})
            while True:
                line = lines.get()
                if line is None:
                    return 0
                reply = _command(line, collector)
                if reply is not None:
                    _emit(reply)
        interval = max(0.05, float(argv[1]) if len(argv) > 1 else 1.0)
        last: Json | None = None
        force = False
        next_at = time.monotonic()
        while True:
            snap = collector.sample(force_units=force)
            force = False
            if last is None:
                _emit({"k": K_FULL, "s": snap})
            else:
                _emit({"k": K_PATCH, "s": merge_patch(last, snap)})
            last = snap
            next_at += interval
            while True:
                wait = next_at - time.monotonic()
                if wait <= 0:
                    next_at = max(next_at, time.monotonic() - interval)
                    break
                try:
                    line = lines.get(timeout=wait)
                except queue.Empty:
                    break
                if line is None:  # gpudash went away
                    return 0
                reply = _command(line, collector)
                if reply is not None and reply.get("k") == K_PONG:
                    _emit(reply)  # answered at once; a ping asks for no fresh sample
                    continue
                force = True
    except (BrokenPipeError, KeyboardInterrupt):
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
