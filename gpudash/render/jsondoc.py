"""The ``--json`` snapshot format (``"schema": 3``), documented in docs/reference/JSON.md
(generated; each field's meaning is in ``jsonfields``).

N/A is ``null``. GPU memory per process is keyed by the GPU index as a string (JSON
object keys are strings). Every field of the model's ``Gpu``, ``Process``, ``Unit``,
``Container`` and ``Pod`` is written under its own name, so a field added to the model
appears here too; fields are only ever added, never renamed or removed. Schema 2 added
owners (a unit, a container, a pod, a session, nobody: ``owners`` and each process's
``owner``), ``containers`` and ``pods``; everything of schema 1 is where it was. Schema 3:
a process's ``claim`` names its container or pod too (``container:docker/ID``,
``pod:UID``: the wire's one way of naming an owner), and a pod's process has no
``container_id`` (null): the pod is its owner, not the container in it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpudash.domain.lint import Learned
from gpudash.domain.model import HostSnapshot
from gpudash.domain.owners import cgroup_fields
from gpudash.domain.triage import triage, unattributed_mib
from gpudash.domain.unheld import unheld_memory

SCHEMA = 3


def _fields(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def host_to_json(snapshot: HostSnapshot,
                 learned: Mapping[str, Learned] | None = None) -> dict[str, Any]:
    """One host's document; ``learned``: what gpudash saw of its units' stops (unit ->
    stop time, processes that ignored SIGTERM) for the unit lint, read by the caller."""
    result = triage(snapshot, learned=learned)
    flags = result.flags
    unattributed = unattributed_mib(snapshot)
    unheld = unheld_memory(snapshot)
    gpus = []
    for g in snapshot.gpus:
        gpu = _fields(g)
        gpu["memory_free_mib"] = g.memory_free_mib
        gpu["unattributed_mib"] = unattributed.get(g.index)
        u = unheld.get(g.index)
        gpu["unheld"] = None if u is None else {
            "mib": u.mib, "checks": list(u.checks), "holders": list(u.holders),
            "blockers": list(u.blockers), "resettable": u.resettable, "notes": list(u.notes)}
        gpus.append(gpu)
    owner_of = {n.process.pid: group.key for group in result.groups for n in group.nodes()}
    owners = []
    for group in result.groups:
        o = group.owner
        who = o.rules.identity(o) if o is not None else {}  # a container's, a pod's
        owners.append({
            "key": group.key,
            "kind": group.kind.value,
            "unit": group.unit.name if group.unit is not None else None,
            "container_id": who.get("container_id"),
            "runtime": who.get("runtime"),
            "pod_uid": who.get("pod_uid"),
            "capabilities": sorted(c.value for c in o.capabilities) if o is not None else [],
            "respawner": o.respawner if o is not None else None,
            "flags": sorted(f.value for f in group.flags),
            "gpu_memory_mib": {str(k): v for k, v in sorted(group.gpu_memory_mib.items())},
            "pids": sorted(n.process.pid for n in group.nodes()),
            "warnings": list(group.warnings),
            "lint": [f.as_dict() for f in group.lint],
            "facts": ({k: list(v) if isinstance(v, tuple) else v for k, v in o.facts.items()}
                      if o is not None else {}),
        })
    processes = []
    for p in snapshot.processes:
        process = _fields(p)
        process |= cgroup_fields(p)
        process["owner"] = owner_of.get(p.pid)
        process["gpu_memory_mib"] = {str(k): v for k, v in sorted(p.gpu_memory_mib.items())}
        process["flags"] = sorted(f.value for f in flags.get(p.pid, ()))
        process["orphan"] = result.orphan_why(p.pid)
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
        "pid_view": snapshot.pid_view,
        "gpus": gpus,
        "processes": processes,
        "units": [_fields(u) for u in snapshot.units],
        "containers": [_fields(c) for c in snapshot.containers],
        "pods": [_fields(p) for p in snapshot.pods],
        "owners": owners,
    }


def document(
    hosts: Iterable[HostSnapshot], errors: dict[str, str] | None = None,
    learned: Callable[[HostSnapshot], Mapping[str, Learned]] | None = None,
) -> dict[str, Any]:
    """The whole ``--json`` document; hosts that failed appear with their error.
    ``learned(host)``: what gpudash saw of the units' stops on that host, for the lint."""
    out: list[dict[str, Any]] = [
        host_to_json(h, None if learned is None else learned(h)) for h in hosts]
    for name, message in (errors or {}).items():
        out.append({"name": name, "error": message, "gpus": [], "processes": [], "units": [],
                    "containers": [], "pods": [], "owners": []})
    return {"schema": SCHEMA, "hosts": out}
