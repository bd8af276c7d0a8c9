"""Parsers of what the host prints: ``/proc/PID/stat``, cgroup paths (unit, container,
pod, a user's own systemd), ``systemctl show`` and ``nvidia-smi`` CSV. gpudash's shell
collector parses the same output with them."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .protocol import (
    CGROUP_MAX,
    CONTAINER,
    CONTAINER_ID,
    EXEC_MAX,
    MAX_GPUS,
    POD,
    TEXT_MAX,
    UNIT_COMPONENT,
)
from .text import cap_text

if TYPE_CHECKING:
    from .protocol import Json


# docker-<id>.scope (systemd driver), libpod-<id>.scope (podman), cri-containerd-/crio-
_CONTAINER_PART = re.compile(r"(docker|libpod|cri-containerd|crio|containerd)-([0-9a-f]{12,64})"
                             r"(?:\.scope)?")
# kubepods-besteffort-pod<uid, _ for ->.slice (systemd driver), pod<uid> (cgroupfs)
_POD_PART = re.compile(r"(?:kubepods(?:-[a-z]+)?-)?pod([0-9a-f_-]{8,64})(?:\.slice)?")

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


NA_MARKERS = ("[N/A]", "[Not Supported]", "[Insufficient Permissions]", "N/A", "[Unknown Error]")


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
    and the id may be None (the pod's own cgroup). Under ``user@UID.service`` (see
    ``user_of_cgroup``) there is no pod, whatever the names say.
    """
    if not path:
        return None
    parts = path.split("/")
    pod = None
    # systemd delegates a user@UID.service subtree to that user, who names cgroups there
    # at will: a kubepods-...-pod<uid>.slice in it is theirs, never the kubelet's pod
    if "kubepods" in path and _user_manager(parts) is None:
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


def _user_manager(parts: list[str]) -> tuple[int, int] | None:
    """``(index, uid)`` of the first ``user@UID.service`` among a cgroup's components."""
    for i, part in enumerate(parts):
        m = _USER_MANAGER.fullmatch(part)
        if m:
            return i, int(m.group(1))
    return None


def user_of_cgroup(path: str | None) -> tuple[int, str | None] | None:
    """``(uid, unit)`` when the cgroup is under a user's own systemd (``user@UID.service``):
    that user's uid and the innermost unit there (their service, or a rootless
    container's scope), else None.

    The one rule for that subtree: systemd delegates it to the user, who can create any
    cgroup there under any name, so what is in it is the user's own at any depth: a
    container named there is their rootless one (never inspected with the host's
    runtime), and nothing there is a Kubernetes pod."""
    if not path:
        return None
    parts = path.split("/")
    found = _user_manager(parts)
    if found is None:
        return None
    at, uid = found
    inner = [q for q in parts[at + 1:] if UNIT_COMPONENT.fullmatch(q)]
    return uid, (inner[-1] if inner else None)


def container_claim(path: str | None) -> str | None:
    """The claim of the container or pod a cgroup is in (``container:docker/ID``,
    ``pod:UID``; see ``OWNER_KEYS``), or None."""
    ref = container_of_cgroup(path)
    if ref is None:
        return None
    runtime, cid, pod = ref
    if pod is not None:
        return POD + ":" + pod
    return None if cid is None else CONTAINER + ":" + runtime + "/" + cid


def cgroup_facts(path: str | None) -> Json:
    """What a process's cgroup says of its owner, as the wire's process keys."""
    out: Json = {"claim": container_claim(path)}
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
