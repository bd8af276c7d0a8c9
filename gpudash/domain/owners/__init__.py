"""Who owns a GPU process, and what that owner can be asked to do (see ``kinds``).

``owner_of`` tells a process's owner from what the host parsed of its cgroup (the
container and pod it is in, the user whose own systemd it runs under) and its unit. One
``OwnerRules`` per kind (``service``, ``container``, ``people``) says the rest. Pure
functions of one snapshot, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gpudash.domain.model import Container, HostSnapshot, Process, Unit
from gpudash.domain.owners.container import (
    RESTARTING_POLICIES,
    ContainerRules,
    PodRules,
    pod_advice,
    pod_label,
)
from gpudash.domain.owners.kinds import Orphan, Owner, OwnerCapability, OwnerKind, OwnerRules
from gpudash.domain.owners.people import (
    NoOwnerRules,
    ScopeRules,
    SessionRules,
    UserServiceRules,
)
from gpudash.domain.owners.service import ServiceRules, unit_respawned

__all__ = [
    "NO_UNIT", "RESTARTING_POLICIES", "RULES", "OwnerCapability", "Orphan", "Owner", "OwnerKind",
    "OwnerRules", "container_key", "container_members", "container_owner", "owner_of",
    "owners", "pod_advice", "pod_label", "unit_kind", "unit_respawned",
]

NO_UNIT = "no unit"
RULES: dict[OwnerKind, OwnerRules] = {
    r.kind: r for r in (ServiceRules(), ContainerRules(), PodRules(), SessionRules(),
                        ScopeRules(), UserServiceRules(), NoOwnerRules())
}
_CONTAINER_SCOPE = re.compile(r"^(docker|cri-containerd|crio|libpod|containerd)-[0-9a-f]+\.scope$")
CONTAINER_PREFIXES = {"docker": "docker:", "podman": "podman:"}
POD_PREFIX = "pod:"


def unit_kind(unit: str | None) -> OwnerKind:
    """The owner kind a systemd unit name alone says (containers' scopes are containers)."""
    if not unit:
        return OwnerKind.NONE
    if _CONTAINER_SCOPE.match(unit):
        return OwnerKind.CONTAINER
    if unit.startswith("session-") and unit.endswith(".scope"):
        return OwnerKind.SESSION
    if unit.startswith("user@") and unit.endswith(".service"):
        return OwnerKind.USER_SERVICE
    if unit.endswith(".scope"):
        return OwnerKind.SCOPE
    return OwnerKind.SERVICE


def container_key(runtime: str, label: str) -> str:
    return CONTAINER_PREFIXES.get(runtime, runtime + ":") + label


def _owner(kind: OwnerKind, key: str, **parts: object) -> Owner:
    return Owner(kind, key, RULES[kind], **parts)  # type: ignore[arg-type]


def owner_of(p: Process, snapshot: HostSnapshot, units: Mapping[str, Unit] | None = None
             ) -> Owner:
    """The owner of ``p``: its container or pod when its cgroup names one, else its unit
    (a user's own service under their ``user@UID.service``). In a user's own subtree a
    container is that user's rootless one and there is no pod (``in_user_subtree``)."""
    if units is None:
        units = {u.name: u for u in snapshot.units}
    unit = units.get(p.unit or "")
    runtime, cid = p.container_runtime, p.container_id
    if p.pod_uid is not None and not p.in_user_subtree:
        pod = snapshot.pod(p.pod_uid)
        label = f"{pod.namespace or 'default'}/{pod.name}" if pod and pod.name else p.pod_uid
        return _owner(OwnerKind.POD, POD_PREFIX + label, unit=unit, container_id=cid,
                      runtime=runtime, pod_uid=p.pod_uid, pod=pod)
    if runtime is not None and cid is not None:
        c = None if p.in_user_subtree else snapshot.container(cid)
        return _owner(OwnerKind.CONTAINER, container_key(runtime, c.label if c else cid[:12]),
                      unit=unit, container=c, container_id=cid, runtime=runtime,
                      user_uid=p.user_uid, user=p.user)
    kind = unit_kind(p.unit)
    if kind is OwnerKind.NONE:
        return _owner(OwnerKind.NONE, NO_UNIT)
    if kind is OwnerKind.USER_SERVICE:
        key = f"{p.unit}/{p.user_unit}" if p.user_unit else (p.unit or NO_UNIT)
        return _owner(kind, key, user_uid=p.user_uid, user=p.user)
    return _owner(kind, p.unit or NO_UNIT, unit=unit)


def owners(snapshot: HostSnapshot) -> dict[int, Owner]:
    """Every process's owner, by pid (one ``Owner`` for the processes that share one)."""
    units = {u.name: u for u in snapshot.units}
    seen: dict[tuple[object, ...], Owner] = {}
    out: dict[int, Owner] = {}
    for p in snapshot.processes:
        key = (p.unit, p.container_runtime, p.container_id, p.pod_uid, p.user_uid,
               p.user_unit, p.user if p.user_uid is not None else None)
        owner = seen.get(key)
        if owner is None:
            owner = seen[key] = owner_of(p, snapshot, units)
        out[p.pid] = owner
    return out


def container_owner(snapshot: HostSnapshot, ref: str) -> Owner | None:
    """The owner of the container named (or id'd) ``ref``, whether or not a process of
    it is left (a stopped container has none)."""
    c = snapshot.container(ref)
    if c is None:
        return None
    units = {u.name: u for u in snapshot.units}
    for p in snapshot.processes:
        if p.container_id == c.id and p.pod_uid is None and not p.in_user_subtree:
            return owner_of(p, snapshot, units)
    return _owner(OwnerKind.CONTAINER, container_key(c.runtime, c.label), container=c,
                  container_id=c.id, runtime=c.runtime)


def container_members(snapshot: HostSnapshot, container: Container) -> list[Process]:
    """The processes whose cgroup names ``container`` (a user's own cgroup named like it
    is not one of them: ``in_user_subtree``)."""
    return [p for p in snapshot.processes
            if p.container_id == container.id and not p.in_user_subtree]
