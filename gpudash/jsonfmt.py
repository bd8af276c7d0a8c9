"""The ``--json`` snapshot format (``"schema": 1``), documented in the README.

N/A is ``null``. GPU memory per process is keyed by the GPU index as a string (JSON
object keys are strings).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpudash.model import HostSnapshot
from gpudash.triage import process_flags

SCHEMA = 1


def host_to_json(snapshot: HostSnapshot) -> dict[str, Any]:
    flags = process_flags(snapshot)
    return {
        "name": snapshot.host,
        "taken_at": snapshot.taken_at,
        "source": snapshot.source.value,
        "degraded": snapshot.degraded,
        "errors": list(snapshot.errors),
        "can_act": snapshot.can_act,
        "gpus": [
            {
                "index": g.index,
                "uuid": g.uuid,
                "name": g.name,
                "memory_total_mib": g.memory_total_mib,
                "memory_used_mib": g.memory_used_mib,
                "memory_free_mib": g.memory_free_mib,
                "memory_reserved_mib": g.memory_reserved_mib,
                "utilization_pct": g.utilization_pct,
                "temperature_c": g.temperature_c,
                "power_w": g.power_w,
                "power_limit_w": g.power_limit_w,
                "error": g.error,
            }
            for g in snapshot.gpus
        ],
        "processes": [
            {
                "pid": p.pid,
                "ppid": p.ppid,
                "start_ticks": p.start_ticks,
                "started_at": p.started_at,
                "user": p.user,
                "state": p.state,
                "name": p.name,
                "cmdline": p.cmdline,
                "unit": p.unit,
                "cgroup": p.cgroup,
                "gpu_memory_mib": {str(k): v for k, v in sorted(p.gpu_memory_mib.items())},
                "flags": sorted(f.value for f in flags.get(p.pid, ())),
            }
            for p in snapshot.processes
        ],
        "units": [
            {
                "name": u.name,
                "active_state": u.active_state,
                "sub_state": u.sub_state,
                "unit_file_state": u.unit_file_state,
                "restart": u.restart,
                "kill_mode": u.kill_mode,
                "n_restarts": u.n_restarts,
                "main_pid": u.main_pid,
                "control_group": u.control_group,
            }
            for u in snapshot.units
        ],
    }


def document(
    hosts: Iterable[HostSnapshot], errors: dict[str, str] | None = None
) -> dict[str, Any]:
    """The whole ``--json`` document; hosts that failed appear with their error."""
    out: list[dict[str, Any]] = [host_to_json(h) for h in hosts]
    for name, message in (errors or {}).items():
        out.append({"name": name, "error": message, "gpus": [], "processes": [], "units": []})
    return {"schema": SCHEMA, "hosts": out}
