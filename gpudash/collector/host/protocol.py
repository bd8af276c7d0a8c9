"""The one definition of what travels between gpudash and this collector.

gpudash's decoder (gpudash/protocol/wire.py) imports these names, and a test holds the key
lists equal to the fields of gpudash's model (Gpu, Process, Unit, HostSnapshot). How a
stream writes its snapshots (``SnapshotStream``: whole, then merge patches) and a message
becomes a line (``message_line``) are here too: the demo host, which simulates a
collector, writes its lines the same way.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

PROTOCOL = 10  # 2: boot_id, CPU and memory of the host and of each process, source "none"
# 3: "containers" (docker/podman inspect of the containers their cgroups name) and "pods"
# 4: a process's process group and what its cgroup says (container, pod, a user's own
#    systemd), why a listed process could not be read; the parents and group leaders
#    of GPU holders are listed
# 5: a unit's stop timeout, restart delay, start limits, and its first ExecStart's argv
#    (what the unit lint and the fit estimate read)
# 6: a GPU process's SM utilisation (nvmlDeviceGetProcessUtilization), where NVML has it
# 7: a container's health check, --init and PID mode (what the container lint reads)
# 8: "owners", the facts of owner kinds without a section of their own (a Slurm job's),
#    by kind and key; a process's "claim": the owner its cgroup names, "KIND:KEY"
# 9: what was checked of memory no process holds: per GPU whether NVML's process list was
#    read, the device-file scan's verdict; MIG, display and persistence mode; the host's
#    "pid_view" (what a GPU reset's plan reads)
# 10: containers and pods are owners like any other: claimed ("container:docker/ID",
#    "pod:UID"; a process has no container_runtime, container_id or pod_uid of its own)
#    and described in "owners" (no "containers" or "pods" section any more)

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
    "gpus", "procs", "units", "owners",
    "pid_view",  # which processes the collector sees: one of PID_VIEWS
)
PID_VIEWS = ("full", "hidepid", "namespace")  # hidepid: other users' hidden (not root)
GPU_KEYS = (
    "index", "uuid", "name", "memory_total_mib", "memory_used_mib", "memory_reserved_mib",
    "utilization_pct", "temperature_c", "power_w", "power_limit_w", "error",
    # NVML's list of its compute processes: "read", or why not ("denied", "unsupported",
    # "error"): an empty list that was not read proves nothing
    "process_list",
    # while memory on it is unexplained (DEV_SLACK_MIB): the scan of every process's
    # /dev/nvidia* fds and maps: one of DEVICE_SCANS; absent: not scanned
    "device_scan",
    "mig_mode", "display_active", "persistence_mode",  # "on" / "off"
)
PROCESS_LISTS = ("read", "denied", "unsupported", "error")
DEVICE_SCANS = ("clear", "held", "partial")
PROC_KEYS = (  # gpu_memory_mib: {"INDEX": MiB, or -1 where the driver cannot tell}
    "pid", "ppid", "start_ticks", "started_at", "state", "user", "name", "cmdline", "cgroup",
    "unit", "gpu_memory_mib", "cpu_pct", "rss_mib",
    # % of the SM time it used since the last sample, the most on any of its GPUs; absent
    # where the driver cannot tell (nvidia-smi, an older driver or GPU)
    "sm_util_pct",
    "device_gpus",  # [INDEX]: holds these GPUs' /dev/nvidia* although the driver lists it not
    "pgid",  # its process group
    # from its cgroup: under user@UID.service, that user's uid and the unit there
    "user_uid", "user_unit",
    "unreadable",  # listed by the driver, not readable here: one of UNREADABLE_REASONS
    # "KIND:KEY": the owner its cgroup names, of one of OWNER_KINDS (OWNER_KEYS[KIND]
    # fullmatches KEY): "slurm job:42", "container:docker/ID", "pod:UID"
    "claim",
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
# A container's facts in "owners" (under "container", keyed "RUNTIME/ID" as its claim;
# the id and runtime travel in the key), a pod's (under "pod", keyed by its UID): the
# containers its processes' cgroups name (and those watched), the pods of its processes.
CONTAINER_KEYS = (  # state "removed": the runtime answered that no such container exists
    "id", "runtime", "name", "image", "state", "restart_policy", "restart_count", "main_pid",
    # the container lint's: "none" (no health check) or its status ("healthy", ...; a
    # configured one not yet run: "configured"); "yes"/"no" (--init: a PID 1 that reaps);
    # the PID namespace ("host": --pid host; "private"; "container:ID")
    "health", "init", "pid_mode",
    "port",  # the host TCP port it publishes (its lowest TCP port's): its ready URL's
)
POD_KEYS = ("uid", "namespace", "name")
# "owners": {KIND: {KEY: {FACT: text | integer | true/false | [integers]}}}: what the host
# knows of the owners its processes claim, by kind; the key "" holds the kind's facts
# about the host itself (a Slurm node's state). Bounded like everything else.
SLURM_JOB, CONTAINER, POD = "slurm job", "container", "pod"
OWNER_KINDS = (SLURM_JOB, CONTAINER, POD)  # the kinds a host may name in "owners" and claims
MAX_OWNERS = 256  # of one kind
MAX_FACTS = 32  # of one owner
MAX_FACT_LIST = 64  # integers in one fact
OWNER_KEY = re.compile(r"[A-Za-z0-9_.+-]{0,64}")  # fullmatch; "" is the host's
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
# A claim's KEY, by kind (fullmatch). A container's names its runtime with its id: the
# cgroup says both, and the runtime (whose CLI is asked, whose restart policy applies)
# is known even where the container could not be inspected. A pod's is its UID alone:
# the pod is the owner (the kubelet's, never acted on), not the container in it.
OWNER_KEYS = {
    SLURM_JOB: OWNER_KEY,
    CONTAINER: re.compile(r"(docker|podman)/[0-9a-f]{12,64}"),
    POD: POD_UID,
}

UNIT_PROPERTIES = (
    "Id,ActiveState,SubState,UnitFileState,Restart,KillMode,NRestarts,MainPID,"
    "ControlGroup,Description,TimeoutStopUSec,RestartUSec,StartLimitIntervalUSec,"
    "StartLimitBurst,ExecStart,Environment,SendSIGKILL"
)
EXEC_MAX = 1024  # bytes of a unit's ExecStart argv as JSON text

SMI_GPU_FIELDS = (
    "index,uuid,name,memory.total,memory.used,utilization.gpu,temperature.gpu,"
    "power.draw,power.limit"
)
SMI_APP_FIELDS = "gpu_uuid,pid,used_memory"

if TYPE_CHECKING:  # the host may run Python 3.7: no runtime generic aliases
    from typing import TypeAlias  # novermin: type checking only

    Json: TypeAlias = dict[str, Any]


def kind_owners(records: list[Json], key_fields: tuple[str, ...]) -> Json:
    """Records of one kind (a container's inspect, a pod) as its ``owners`` section: each
    keyed by its ``key_fields`` joined with "/" (``RUNTIME/ID``, ``UID``: its claim's
    key), its facts the rest."""
    return {"/".join(str(r[k]) for k in key_fields):
            {k: v for k, v in r.items() if k not in key_fields} for r in records}


CONTAINER_KEY_FIELDS = ("runtime", "id")  # a container's owner key: "docker/ID"
POD_KEY_FIELDS = ("uid",)


def message_line(message: Json) -> bytes:
    """One message as the line the collector writes: UTF-8 as is (a \\u escape makes every
    non-ASCII character of a host's text 6 bytes); "replace" turns lone surrogates
    (undecodable passwd names) into "?"."""
    line = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    return line.encode("utf-8", "replace") + b"\n"


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


class SnapshotStream:
    """What a stream writes of each snapshot: the first whole (``K_FULL``), every later
    one as the merge patch from the one before (``K_PATCH``)."""

    def __init__(self) -> None:
        self.last: Json | None = None

    def message(self, snap: Json) -> Json:
        last, self.last = self.last, snap
        if last is None:
            return {"k": K_FULL, "s": snap}
        return {"k": K_PATCH, "s": merge_patch(last, snap)}
