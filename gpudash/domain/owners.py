"""Who owns a GPU process, and what that owner can be asked to do.

One owner kind, several producers: a systemd unit, a Docker or Podman container, a
Kubernetes pod, a login session, a transient scope, or nobody. Each owner declares its
capabilities; the action specs (``gpudash.engine.actions``) read them, so the dashboard
greys out what an owner cannot do and says why, instead of offering systemd verbs for a
container. Pure functions of one snapshot, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from gpudash.collector.hostside import container_of_cgroup
from gpudash.domain.model import Container, HostSnapshot, Pod, Process, Unit


class OwnerKind(StrEnum):
    SERVICE = "service"
    SESSION = "session"
    CONTAINER = "container"
    POD = "pod"
    SCOPE = "scope"
    NONE = "no unit"


class Capability(StrEnum):
    """What an owner can be asked to do (beyond signalling one of its processes)."""

    STOP = "stop"  # systemctl stop / docker stop
    DISABLE = "disable"  # systemctl disable / docker update --restart=no: not again by itself
    REMOVE = "remove"  # docker rm / podman rm
    START = "start"  # systemctl start, restart, enable (and swap to it)
    RECLAIM = "reclaim"  # stop + disable + reap + wait for the memory


_CONTAINER_SCOPE = re.compile(r"^(docker|cri-containerd|crio|libpod|containerd)-[0-9a-f]+\.scope$")
RESTARTING_POLICIES = frozenset({"always", "unless-stopped", "on-failure"})
CONTAINER_PREFIXES = {"docker": "docker:", "podman": "podman:"}
POD_PREFIX = "pod:"


@dataclass(frozen=True, slots=True)
class Owner:
    """The owner of a group of processes, with what it can do."""

    kind: OwnerKind
    key: str  # the group's key: a unit name, ``docker:NAME``, ``pod:NS/NAME``, "no unit"
    unit: Unit | None = None  # the systemd unit (a service, or a container's scope)
    container: Container | None = None  # as the runtime inspected it; None: not known
    container_id: str | None = None  # from the cgroup path, known even when not inspected
    runtime: str | None = None  # docker | podman | cri
    pod_uid: str | None = None
    pod: Pod | None = None

    @property
    def capabilities(self) -> frozenset[Capability]:
        if self.kind is OwnerKind.SERVICE and self.unit is not None:
            return frozenset({Capability.STOP, Capability.DISABLE, Capability.START,
                              Capability.RECLAIM})
        if self.kind is OwnerKind.CONTAINER and self.container is not None:
            if self.container.state == "removed":
                return frozenset()
            caps = {Capability.STOP, Capability.REMOVE, Capability.RECLAIM}
            if self.container.runtime == "docker":
                caps.add(Capability.DISABLE)
            return frozenset(caps)
        return frozenset()

    def can(self, capability: Capability) -> bool:
        return capability in self.capabilities

    def unable(self, capability: Capability) -> str:
        """Why this owner cannot do ``capability``, in words the operator can act on."""
        name = self.describe()
        if self.kind is OwnerKind.POD:
            return pod_advice(self)
        if self.kind is OwnerKind.CONTAINER:
            c = self.container
            if c is None:
                return (f"{name}: its runtime did not answer (no {self.runtime} CLI on the "
                        "host, or no permission): signal its processes instead")
            if c.state == "removed":
                return f"{name} no longer exists: reap its orphaned processes"
            if capability is Capability.DISABLE:
                return (f"{name}: turning a Podman restart policy off is not supported here; "
                        "stop it (a stopped container stays stopped) or reclaim it")
            if capability is Capability.START:
                return f"{name} is a container: start it with {c.runtime} start"
        if self.kind is OwnerKind.SERVICE and self.unit is None:
            return f"{name} is not known to systemd on this host"
        if self.kind is OwnerKind.SESSION:
            return f"{name} is a login session: somebody's live work; signal its processes"
        if self.kind is OwnerKind.NONE:
            return "no unit or container owns it: select a process to signal"
        return f"{name} ({self.kind.value}) cannot {capability.value}: signal its processes"

    def describe(self) -> str:
        if self.kind is OwnerKind.CONTAINER:
            c = self.container
            label = c.label if c is not None else (self.container_id or "?")[:12]
            return f"{self.runtime} container {label}"
        if self.kind is OwnerKind.POD:
            return f"Kubernetes pod {pod_label(self)}"
        return self.key

    @property
    def respawner(self) -> str | None:
        """Who brings a killed main process back by itself, or None."""
        if self.kind is OwnerKind.SERVICE and self.unit is not None:
            restart = (self.unit.restart or "no").lower()
            return None if restart == "no" or self.unit.is_down else (
                f"systemd (Restart={self.unit.restart})")
        if self.kind is OwnerKind.CONTAINER and self.container is not None:
            c = self.container
            if (c.restart_policy or "no") in RESTARTING_POLICIES and not c.is_down:
                return f"{c.runtime} (restart policy {c.restart_policy})"
            return None
        if self.kind is OwnerKind.POD:
            return "the kubelet"
        return None


def pod_label(owner: Owner) -> str:
    pod = owner.pod
    if pod is not None and pod.name:
        return f"{pod.namespace or 'default'}/{pod.name}"
    return f"UID {owner.pod_uid}"


def pod_advice(owner: Owner) -> str:
    """What to do about a pod's GPU memory: gpudash does not act on the kubelet's pods."""
    pod = owner.pod
    if pod is not None and pod.name:
        ns = pod.namespace or "default"
        how = (f"kubectl -n {ns} scale deployment/<its deployment> --replicas=0, or "
               f"kubectl -n {ns} delete pod {pod.name}")
    else:
        how = "kubectl scale its workload to 0 replicas, or kubectl delete the pod"
    return (f"Kubernetes pod {pod_label(owner)}: the kubelet restarts its containers when "
            f"they are killed or stopped, so gpudash does not act on it; {how}")


# --- who owns a process ------------------------------------------------------------------


def unit_kind(unit: str | None) -> OwnerKind:
    """The owner kind a systemd unit name alone says (containers' scopes are containers)."""
    if not unit:
        return OwnerKind.NONE
    if _CONTAINER_SCOPE.match(unit):
        return OwnerKind.CONTAINER
    if unit.startswith("session-") and unit.endswith(".scope"):
        return OwnerKind.SESSION
    if unit.startswith("user@") and unit.endswith(".service"):
        return OwnerKind.SESSION
    if unit.endswith(".scope"):
        return OwnerKind.SCOPE
    return OwnerKind.SERVICE


def container_key(runtime: str, label: str) -> str:
    return CONTAINER_PREFIXES.get(runtime, runtime + ":") + label


def owner_of(p: Process, snapshot: HostSnapshot, units: Mapping[str, Unit] | None = None
             ) -> Owner:
    """The owner of ``p``: its container or pod when its cgroup names one, else its unit."""
    if units is None:
        units = {u.name: u for u in snapshot.units}
    unit = units.get(p.unit or "")
    ref = container_of_cgroup(p.cgroup)
    if ref is not None:
        runtime, cid, pod_uid = ref
        if pod_uid is not None:
            pod = snapshot.pod(pod_uid)
            owner = Owner(OwnerKind.POD, "", unit, None, cid, runtime, pod_uid, pod)
            return _with_key(owner, POD_PREFIX + pod_label(owner).removeprefix("UID "))
        if cid is not None:
            c = snapshot.container(cid)
            label = c.label if c is not None else cid[:12]
            return Owner(OwnerKind.CONTAINER, container_key(runtime, label), unit, c, cid,
                         runtime)
    kind = unit_kind(p.unit)
    if kind is OwnerKind.NONE:
        return Owner(OwnerKind.NONE, NO_UNIT)
    return Owner(kind, p.unit or NO_UNIT, unit)


def _with_key(owner: Owner, key: str) -> Owner:
    return Owner(owner.kind, key, owner.unit, owner.container, owner.container_id,
                 owner.runtime, owner.pod_uid, owner.pod)


def owners(snapshot: HostSnapshot) -> dict[int, Owner]:
    """Every process's owner, by pid."""
    units = {u.name: u for u in snapshot.units}
    return {p.pid: owner_of(p, snapshot, units) for p in snapshot.processes}


def container_owner(snapshot: HostSnapshot, ref: str) -> Owner | None:
    """The owner of the container named (or id'd) ``ref``, whether or not a process of
    it is left (a stopped container has none)."""
    c = snapshot.container(ref)
    if c is None:
        return None
    units = {u.name: u for u in snapshot.units}
    for p in snapshot.processes:
        r = container_of_cgroup(p.cgroup)
        if r is not None and r[1] == c.id and r[2] is None:
            return owner_of(p, snapshot, units)
    return Owner(OwnerKind.CONTAINER, container_key(c.runtime, c.label), None, c, c.id,
                 c.runtime)


def container_members(snapshot: HostSnapshot, container: Container) -> list[Process]:
    """The processes whose cgroup names ``container``."""
    out = []
    for p in snapshot.processes:
        r = container_of_cgroup(p.cgroup)
        if r is not None and r[1] == container.id:
            out.append(p)
    return out


NO_UNIT = "no unit"


# --- the container rules -------------------------------------------------------------------


def container_orphan(p: Process, owner: Owner) -> bool:
    """A GPU holder of a container that is gone or stopped, or that escaped to PID 1 from
    a container's cgroup (its container's init, the runtime's shim, is no longer its
    parent): nothing will ever free its memory but a signal."""
    if owner.kind not in (OwnerKind.CONTAINER, OwnerKind.POD):
        return False
    if p.ppid == 1:
        return True
    return owner.container is not None and owner.container.is_down


def container_warnings(owner: Owner, orphan_count: int) -> tuple[str, ...]:
    """Plain-words advice for the operator about a container or a pod."""
    if owner.kind is OwnerKind.POD:
        out = [pod_advice(owner)]
        if orphan_count:
            out.append(f"{orphan_count} process(es) escaped from the pod's cgroup still hold "
                       "GPU memory: reap them.")
        return tuple(out)
    w: list[str] = []
    c = owner.container
    name = owner.describe()
    if c is None:
        w.append(f"{name}: not inspected (no {owner.runtime} CLI on the host, or no "
                 "permission): its restart policy is unknown.")
    elif c.state == "removed":
        w.append(f"{name} no longer exists, yet its processes hold GPU memory.")
    elif (c.restart_policy or "no") in RESTARTING_POLICIES and not c.is_down:
        w.append(f"restart policy {c.restart_policy}: killing its main process makes "
                 f"{c.runtime} restart it; stop the container instead ({c.runtime} stop "
                 "marks it stopped), or reclaim it.")
    if c is not None and (c.restart_count or 0) > 0:
        w.append(f"{c.runtime} restarted this container {c.restart_count} time(s) "
                 "(RestartCount): a new main process took the old one's place.")
    if orphan_count:
        w.append(f"{orphan_count} orphaned process(es) of {name} still hold GPU memory: "
                 "reap them.")
    return tuple(w)


def container_respawned(owner: Owner) -> bool:
    c = owner.container
    return c is not None and (c.restart_count or 0) > 0
