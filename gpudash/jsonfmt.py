"""The ``--json`` snapshot format (``"schema": 1``), documented in the README.

N/A is ``null``. GPU memory per process is keyed by the GPU index as a string (JSON
object keys are strings). Every field of the model's ``Gpu``, ``Process`` and ``Unit`` is
written under its own name, so a field added to the model appears here too; fields are
only ever added to schema 1, never renamed or removed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from gpudash.model import HostSnapshot
from gpudash.triage import process_flags

SCHEMA = 1


def _fields(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def host_to_json(snapshot: HostSnapshot) -> dict[str, Any]:
    flags = process_flags(snapshot)
    gpus = []
    for g in snapshot.gpus:
        gpu = _fields(g)
        gpu["memory_free_mib"] = g.memory_free_mib
        gpus.append(gpu)
    processes = []
    for p in snapshot.processes:
        process = _fields(p)
        process["gpu_memory_mib"] = {str(k): v for k, v in sorted(p.gpu_memory_mib.items())}
        process["flags"] = sorted(f.value for f in flags.get(p.pid, ()))
        processes.append(process)
    return {
        "name": snapshot.host,
        "taken_at": snapshot.taken_at,
        "boot_id": snapshot.boot_id,
        "source": snapshot.source.value,
        "degraded": snapshot.degraded,
        "errors": list(snapshot.errors),
        "can_act": snapshot.can_act,
        "cannot_act_reason": snapshot.cannot_act_reason,
        "cpu_pct": snapshot.cpu_pct,
        "mem_used_mib": snapshot.mem_used_mib,
        "mem_total_mib": snapshot.mem_total_mib,
        "collector_cpu_s": snapshot.collector_cpu_s,
        "gpus": gpus,
        "processes": processes,
        "units": [_fields(u) for u in snapshot.units],
    }


def document(
    hosts: Iterable[HostSnapshot], errors: dict[str, str] | None = None
) -> dict[str, Any]:
    """The whole ``--json`` document; hosts that failed appear with their error."""
    out: list[dict[str, Any]] = [host_to_json(h) for h in hosts]
    for name, message in (errors or {}).items():
        out.append({"name": name, "error": message, "gpus": [], "processes": [], "units": []})
    return {"schema": SCHEMA, "hosts": out}
