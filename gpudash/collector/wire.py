"""Decoding the collector's JSON lines into ``HostSnapshot``s.

Everything here treats the host's output as untrusted: any malformed, truncated or
mistyped message raises ``ProtocolError`` and nothing else.
"""

from __future__ import annotations

import json
import math
from typing import Any

from gpudash.model import Gpu, HostSnapshot, Process, SourceKind, Unit
from gpudash.source import ProtocolError

MAX_LINE = 64 * 1024 * 1024
_SOURCES = {k.value: k for k in SourceKind}


def apply_merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386: ``null`` deletes, objects merge, everything else replaces."""
    out = dict(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict):
            before = out.get(key)
            out[key] = apply_merge_patch(before if isinstance(before, dict) else {}, value)
        else:
            out[key] = value
    return out


def _get(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) and kind is not bool and bool not in _tuple(kind):
        raise ProtocolError(f"{where}.{key}: expected {kind}, got a boolean")
    if not isinstance(value, kind):
        raise ProtocolError(f"{where}.{key}: unexpected {type(value).__name__}")
    return value


def _tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _str(obj: dict[str, Any], key: str, where: str) -> str | None:
    value: str | None = _get(obj, key, str, where)
    return value


def _int(obj: dict[str, Any], key: str, where: str) -> int | None:
    value: int | None = _get(obj, key, int, where)
    return value


def _float(obj: dict[str, Any], key: str, where: str) -> float | None:
    value = _get(obj, key, (int, float), where)
    if value is None:
        return None
    if not math.isfinite(value):
        raise ProtocolError(f"{where}.{key}: not a finite number")
    return float(value)


def _section(state: dict[str, Any], key: str) -> dict[str, Any]:
    value = state.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise ProtocolError(f"{key}: expected an object of objects")
    return value


def _gpu(d: dict[str, Any]) -> Gpu:
    index = _int(d, "index", "gpu")
    if index is None:
        raise ProtocolError("gpu without index")
    return Gpu(
        index=index,
        uuid=_str(d, "uuid", "gpu"),
        name=_str(d, "name", "gpu"),
        memory_total_mib=_int(d, "memory_total_mib", "gpu"),
        memory_used_mib=_int(d, "memory_used_mib", "gpu"),
        memory_reserved_mib=_int(d, "memory_reserved_mib", "gpu"),
        utilization_pct=_int(d, "utilization_pct", "gpu"),
        temperature_c=_int(d, "temperature_c", "gpu"),
        power_w=_float(d, "power_w", "gpu"),
        power_limit_w=_float(d, "power_limit_w", "gpu"),
        error=_str(d, "error", "gpu"),
    )


def _process(d: dict[str, Any]) -> Process:
    pid = _int(d, "pid", "process")
    if pid is None:
        raise ProtocolError("process without pid")
    mem_raw = d.get("gpu_memory_mib", {})
    if not isinstance(mem_raw, dict):
        raise ProtocolError("process.gpu_memory_mib: expected an object")
    memory: dict[int, int | None] = {}
    for key, value in mem_raw.items():
        if not key.lstrip("-").isdigit() or isinstance(value, bool) or not isinstance(value, int):
            raise ProtocolError("process.gpu_memory_mib: bad entry")
        memory[int(key)] = None if value < 0 else value
    dev = d.get("dev", [])
    if not isinstance(dev, list) or not all(type(i) is int and i >= 0 for i in dev):
        raise ProtocolError("process.dev: expected a list of GPU indices")
    return Process(
        pid=pid,
        ppid=_int(d, "ppid", "process"),
        start_ticks=_int(d, "start_ticks", "process"),
        started_at=_float(d, "started_at", "process"),
        state=_str(d, "state", "process"),
        user=_str(d, "user", "process"),
        name=_str(d, "name", "process") or "",
        cmdline=_str(d, "cmdline", "process") or "",
        cgroup=_str(d, "cgroup", "process"),
        unit=_str(d, "unit", "process"),
        gpu_memory_mib=memory,
        device_gpus=tuple(sorted(set(dev))),
    )


def _unit(d: dict[str, Any]) -> Unit:
    name = _str(d, "name", "unit")
    if not name:
        raise ProtocolError("unit without name")
    return Unit(
        name=name,
        active_state=_str(d, "active_state", "unit"),
        sub_state=_str(d, "sub_state", "unit"),
        unit_file_state=_str(d, "unit_file_state", "unit"),
        restart=_str(d, "restart", "unit"),
        kill_mode=_str(d, "kill_mode", "unit"),
        n_restarts=_int(d, "n_restarts", "unit"),
        main_pid=_int(d, "main_pid", "unit"),
        control_group=_str(d, "control_group", "unit"),
        description=_str(d, "description", "unit"),
    )


def to_snapshot(
    state: dict[str, Any],
    host: str,
    *,
    source: SourceKind | None = None,
    degraded: bool = False,
    extra_errors: tuple[str, ...] = (),
) -> HostSnapshot:
    """A wire snapshot (a dict as the collector writes it) as a ``HostSnapshot``."""
    try:
        taken_at = _float(state, "taken_at", "snapshot")
        if taken_at is None:
            raise ProtocolError("snapshot without taken_at")
        errors = state.get("errors", [])
        if not isinstance(errors, list) or not all(isinstance(e, str) for e in errors):
            raise ProtocolError("snapshot.errors: expected a list of strings")
        kind = _SOURCES.get(_str(state, "source", "snapshot") or "nvml")
        if kind is None:
            raise ProtocolError("snapshot.source: unknown kind")
        can_act = _get(state, "can_act", bool, "snapshot")
        return HostSnapshot(
            host=host,
            taken_at=taken_at,
            gpus=tuple(
                sorted((_gpu(g) for g in _section(state, "gpus").values()), key=lambda g: g.index)
            ),
            processes=tuple(
                sorted(
                    (_process(p) for p in _section(state, "procs").values()), key=lambda p: p.pid
                )
            ),
            units=tuple(
                sorted((_unit(u) for u in _section(state, "units").values()), key=lambda u: u.name)
            ),
            source=source or kind,
            degraded=degraded or bool(_get(state, "degraded", bool, "snapshot")),
            errors=tuple(errors) + extra_errors,
            can_act=True if can_act is None else can_act,
            cannot_act_reason=_str(state, "cannot_act_reason", "snapshot"),
        )
    except ProtocolError:
        raise
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise ProtocolError(f"malformed snapshot: {exc}") from None


def parse_message(line: bytes) -> dict[str, Any]:
    """One JSON line from the collector as an object with a string ``k``."""
    if len(line) > MAX_LINE:
        raise ProtocolError("collector message too large")
    try:
        message = json.loads(line)
    except (ValueError, RecursionError) as exc:
        text = line[:120].decode("utf-8", "replace").strip()
        raise ProtocolError(f"collector sent something that is not JSON: {text!r}") from exc
    if not isinstance(message, dict) or not isinstance(message.get("k"), str):
        raise ProtocolError("collector message without a kind")
    return message


class SnapshotDecoder:
    """Folds the stream of full snapshots and merge patches into ``HostSnapshot``s."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.state: dict[str, Any] | None = None

    def feed(self, line: bytes) -> HostSnapshot:
        """Decode one line; raises ``ProtocolError`` for anything but a snapshot."""
        message = parse_message(line)
        kind = message["k"]
        body = message.get("s")
        if kind == "error":
            raise ProtocolError(f"collector error: {str(message.get('msg'))[:300]}")
        if not isinstance(body, dict):
            raise ProtocolError(f"collector message {kind!r} without a snapshot")
        if kind == "full":
            self.state = body
        elif kind == "patch":
            if self.state is None:
                raise ProtocolError("collector sent a patch before a full snapshot")
            self.state = apply_merge_patch(self.state, body)
        else:
            raise ProtocolError(f"unexpected collector message {kind!r}")
        return to_snapshot(self.state, self.host)
