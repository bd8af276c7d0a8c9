"""Docker and Podman containers, and Kubernetes pods: their runtime restarts them (the
seed's trap one layer up), so they are stopped through it, not by killing the main process.

A container's orphans are the GPU holders that escaped it (re-parented to PID 1 from its
cgroup: the runtime's shim is no longer their parent) or whose container is stopped or
gone. A rootless container of another user (under ``user@UID.service``) is never inspected
with the host's own runtime (that store does not know it): it is "not inspected", never
"removed", its processes are nobody's orphans, and gpudash does not act on it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from gpudash.domain.lint import Finding, Learned, lint_container
from gpudash.domain.model import Container, HostSnapshot, Process, Unit
from gpudash.domain.owners.kinds import (
    BaseRules,
    CliSelector,
    Orphan,
    Owner,
    OwnerCapability,
    OwnerKind,
    OwnerRef,
)
from gpudash.domain.tree import ProcessTree

RESTARTING_POLICIES = frozenset({"always", "unless-stopped", "on-failure"})
_CONTAINER_SCOPE = re.compile(r"^(docker|cri-containerd|crio|libpod|containerd)-[0-9a-f]+\.scope$")
CONTAINER_PREFIXES = {"docker": "docker:", "podman": "podman:"}
POD_PREFIX = "pod:"
# what each owner-wide action (by its name) does to a container: its title there
CONTAINER_TITLES = {
    "stop": "Stop container",
    "disable": "Restart policy off",
    "stop+disable": "Stop container + restart policy off",
    "reclaim": "Reclaim container (stop + restart policy off + reap + wait)",
    "remove": "Remove container",
    "start": "Start container and prove it runs",
    "restart": "Restart container and prove it runs",
}


def container_key(runtime: str, label: str) -> str:
    return CONTAINER_PREFIXES.get(runtime, runtime + ":") + label


def claimed_container(p: Process) -> tuple[str, str] | None:
    """``(runtime, id)`` of the container ``p``'s claim names (``container:docker/ID``)."""
    claimed = p.claimed
    if claimed is None or claimed[0] != OwnerKind.CONTAINER.value:
        return None
    runtime, _, cid = claimed[1].partition("/")
    return runtime, cid


def claimed_pod(p: Process) -> str | None:
    """The UID of the Kubernetes pod ``p``'s claim names (``pod:UID``)."""
    claimed = p.claimed
    return claimed[1] if claimed is not None and claimed[0] == OwnerKind.POD.value else None


def cgroup_fields(p: Process) -> dict[str, str | None]:
    """What ``p``'s cgroup says of its container, as the ``--json`` document's process
    fields, read from its claim (schema 2 had them from the wire): a pod's
    container runtime is ``cri``, the kubelet's."""
    container, pod = claimed_container(p), claimed_pod(p)
    return {"container_runtime": "cri" if pod else container and container[0],
            "container_id": container and container[1], "pod_uid": pod}


def container_members(snapshot: HostSnapshot, container: Container) -> list[Process]:
    """The processes whose cgroup names ``container`` (a user's own cgroup named like it
    is not one of them: ``in_user_subtree``)."""
    return [p for p in snapshot.processes if _in(p, container)]


def _in(p: Process, container: Container) -> bool:
    claimed = claimed_container(p)
    return claimed is not None and claimed[1] == container.id and not p.in_user_subtree


def runtime_and_id(owner: Owner) -> tuple[str | None, str | None]:
    """``(runtime, id)`` of a container owner, as the claim that named it says; (None,
    None) where its scope's name alone did."""
    if owner.claimed is None:
        return None, None
    runtime, _, cid = owner.claimed.partition("/")
    return runtime, cid


def rootless_of_another(owner: Owner) -> bool:
    """A rootless container of a user, which the host's runtime (root's) did not inspect."""
    return owner.user_uid is not None and owner.container is None


class ContainerRules(BaseRules):
    kind = OwnerKind.CONTAINER
    cli: tuple[CliSelector, ...] = (CliSelector("--container", "NAME", {
        "reclaim": "a Docker or Podman container (name or id): stop it, turn its restart "
                   "policy off, reap what is left",
        "start": "or a stopped Docker or Podman container (name or id): its restart policy "
                 "put back as it was before gpudash turned it off, then docker start, "
                 "proven running with its memory back",
        "reap": "only those of this Docker or Podman container",
    }, rank=1),)

    def recognize(self, p: Process, snapshot: HostSnapshot, units: Mapping[str, Unit]
                  ) -> Owner | None:
        claimed = claimed_container(p)
        unit = units.get(p.unit or "")
        if claimed is not None:
            runtime, cid = claimed
            c = None if p.in_user_subtree else snapshot.container(cid)
            return Owner(self.kind, container_key(runtime, c.label if c else cid[:12]), self,
                         unit=unit, container=c, claimed=f"{runtime}/{cid}",
                         user_uid=p.user_uid, user=p.user)
        if p.unit and self.claims_unit(p.unit):  # its scope, not parsed further
            return Owner(self.kind, p.unit, self, unit=unit)
        return None

    def claims_unit(self, name: str) -> bool:
        return _CONTAINER_SCOPE.match(name) is not None

    def idle(self, snapshot: HostSnapshot, seen: Sequence[Owner]) -> Iterable[Owner]:
        """A stopped container stays visible ("exited, restart policy no, 0 GiB")."""
        ids = {runtime_and_id(o)[1] for o in seen if o.kind is self.kind}
        return [Owner(self.kind, container_key(c.runtime, c.label), self, container=c,
                      claimed=f"{c.runtime}/{c.id}")
                for c in snapshot.containers if c.state != "removed" and c.id not in ids]

    def about(self, owner: Owner) -> str:
        return "a container: its runtime did not say more (no CLI, or no permission)"

    def lint(self, owner: Owner, holds_gpu_memory: bool, learned: Learned | None
             ) -> tuple[Finding, ...]:
        return () if owner.container is None else lint_container(owner.container)

    def selector(self, owner: Owner) -> OwnerRef | None:
        return None if owner.container is None else OwnerRef(self.kind.value, owner.container.id)

    def find(self, key: str, snapshot: HostSnapshot) -> Owner | None:
        """The container named (or id'd) ``key``, whether or not a process of it is left
        (a stopped container has none)."""
        c = snapshot.container(key)
        if c is None:
            return None
        members = container_members(snapshot, c)
        if members:
            return self.recognize(members[0], snapshot, {u.name: u for u in snapshot.units})
        return Owner(self.kind, container_key(c.runtime, c.label), self, container=c,
                     claimed=f"{c.runtime}/{c.id}")

    def title(self, capability: OwnerCapability, action: str) -> str | None:
        return CONTAINER_TITLES.get(action)

    def identity(self, owner: Owner) -> Mapping[str, str | None]:
        runtime, cid = runtime_and_id(owner)
        return {"container_id": cid, "runtime": runtime}

    def kill_note(self, owner: Owner, p: Process) -> str | None:
        """Killing a container's main process: its runtime's restart policy brings it
        back."""
        c = owner.container
        if c is None or not owner.respawner:
            return None
        return (f"pid {p.pid} belongs to {owner.describe()} (restart policy "
                f"{c.restart_policy}): {c.runtime} will restart it. Stop or reclaim the "
                "container instead.")

    def capabilities(self, owner: Owner) -> frozenset[OwnerCapability]:
        c = owner.container
        if c is None or c.state == "removed":
            return frozenset()
        caps = {OwnerCapability.STOP, OwnerCapability.REMOVE, OwnerCapability.RECLAIM,
                OwnerCapability.START}
        if c.runtime == "docker":
            caps.add(OwnerCapability.DISABLE)
        return frozenset(caps)

    def unable(self, owner: Owner, capability: OwnerCapability) -> str:
        name = self.describe(owner)
        c = owner.container
        runtime, _ = runtime_and_id(owner)
        if rootless_of_another(owner):
            return (f"{name} is {owner.user or 'a user'}'s rootless container, not the "
                    f"host's: gpudash does not act on it (as that user: {runtime} "
                    "stop ...)")
        if c is None:
            return (f"{name}: its runtime did not answer (no {runtime} CLI on the "
                    "host, or no permission): signal its processes instead")
        if c.state == "removed":
            return f"{name} no longer exists: reap its orphaned processes"
        if capability is OwnerCapability.DISABLE:
            return (f"{name}: turning a Podman restart policy off is not supported here; "
                    "stop it (a stopped container stays stopped) or reclaim it")
        if capability is OwnerCapability.START:  # what a container cannot: enable (boot)
            return (f"{name} has no boot setting (enable is systemd's): its restart policy "
                    f"({c.restart_policy or 'unknown'}) decides whether {c.runtime} starts "
                    "it again")
        return f"{name} cannot {capability.value}: signal its processes"

    def describe(self, owner: Owner) -> str:
        c = owner.container
        runtime, cid = runtime_and_id(owner)
        label = c.label if c is not None else (cid or "?")[:12]
        mine = f"{owner.user}'s rootless " if rootless_of_another(owner) and owner.user else ""
        return f"{mine}{runtime} container {label}"

    def respawner(self, owner: Owner) -> str | None:
        c = owner.container
        if c is not None and (c.restart_policy or "no") in RESTARTING_POLICIES and not c.is_down:
            return f"{c.runtime} (restart policy {c.restart_policy})"
        return None

    def main_pid(self, owner: Owner) -> int | None:
        return owner.container.main_pid if owner.container is not None else None

    def inactive(self, owner: Owner) -> bool:
        return False  # a stopped container's state is in its warnings, not a unit flag

    def respawned(self, owner: Owner, previous: Unit | None) -> bool:
        c = owner.container
        return c is not None and (c.restart_count or 0) > 0

    def shown_empty(self, owner: Owner) -> bool:
        return False

    def orphans(self, owner: Owner, members: Sequence[Process], tree: ProcessTree
                ) -> Mapping[int, Orphan]:
        if rootless_of_another(owner):
            return {}  # somebody's own container, not inspected: never reaped
        name = self.describe(owner)
        c = owner.container
        out: dict[int, Orphan] = {}
        for p, root in escaped_roots(members, tree):
            if root is not None:
                out[p.pid] = Orphan(root.pid, f"escaped {name} (re-parented to PID 1)",
                                    "escaped (re-parented to PID 1)")
            elif c is not None and c.is_down:
                out[p.pid] = Orphan(p.pid, f"is left behind: {name} is {c.state}",
                                    f"container {c.state}")
        return out

    def warnings(self, owner: Owner, orphan_count: int, respawned: bool) -> tuple[str, ...]:
        w: list[str] = []
        c = owner.container
        name = self.describe(owner)
        runtime, _ = runtime_and_id(owner)
        if rootless_of_another(owner):
            w.append(f"{name}: not inspected (the host's {runtime} does not know "
                     "another user's containers); gpudash leaves it alone.")
        elif c is None:
            w.append(f"{name}: not inspected (no {runtime} CLI on the host, or no "
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


def escaped_roots(members: Sequence[Process], tree: ProcessTree
                  ) -> list[tuple[Process, Process | None]]:
    """Each member holding (or parenting) GPU memory, with the topmost ancestor of it in
    the same cgroup when that one was re-parented to PID 1 (it escaped: the runtime's
    shim is not its parent any more), else None."""
    mine = {p.pid for p in members}
    out: list[tuple[Process, Process | None]] = []
    for p in members:
        if p.pid not in tree.holding:
            continue
        root = p
        for parent in tree.ancestors(p):
            if parent.pid not in mine:
                break
            root = parent
        out.append((p, root if root.ppid == 1 else None))
    return out


def pod_label(owner: Owner) -> str:
    pod = owner.pod
    if pod is not None and pod.name:
        return f"{pod.namespace or 'default'}/{pod.name}"
    return f"UID {owner.claimed}"


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


class PodRules(BaseRules):
    kind = OwnerKind.POD

    def recognize(self, p: Process, snapshot: HostSnapshot, units: Mapping[str, Unit]
                  ) -> Owner | None:
        uid = claimed_pod(p)
        if uid is None or p.in_user_subtree:  # no pods in a user's own subtree
            return None
        pod = snapshot.pod(uid)
        label = f"{pod.namespace or 'default'}/{pod.name}" if pod and pod.name else uid
        return Owner(self.kind, POD_PREFIX + label, self, unit=units.get(p.unit or ""),
                     claimed=uid, pod=pod)

    def about(self, owner: Owner) -> str:
        return "a Kubernetes pod: the kubelet restarts it; gpudash does not act on it"

    def selector(self, owner: Owner) -> OwnerRef | None:
        return None if owner.claimed is None else OwnerRef(self.kind.value, owner.claimed)

    def identity(self, owner: Owner) -> Mapping[str, str | None]:
        return {"runtime": "cri", "pod_uid": owner.claimed}  # the kubelet's runtime

    def kill_note(self, owner: Owner, p: Process) -> str | None:
        return f"pid {p.pid}: " + pod_advice(owner)

    def capabilities(self, owner: Owner) -> frozenset[OwnerCapability]:
        return frozenset()

    def unable(self, owner: Owner, capability: OwnerCapability) -> str:
        return pod_advice(owner)

    def describe(self, owner: Owner) -> str:
        return f"Kubernetes pod {pod_label(owner)}"

    def respawner(self, owner: Owner) -> str | None:
        return "the kubelet"

    def main_pid(self, owner: Owner) -> int | None:
        return None

    def inactive(self, owner: Owner) -> bool:
        return False

    def respawned(self, owner: Owner, previous: Unit | None) -> bool:
        return False

    def shown_empty(self, owner: Owner) -> bool:
        return False

    def orphans(self, owner: Owner, members: Sequence[Process], tree: ProcessTree
                ) -> Mapping[int, Orphan]:
        cause = f"escaped {self.describe(owner)} (re-parented to PID 1)"
        return {p.pid: Orphan(root.pid, cause, "escaped its pod (re-parented to PID 1)")
                for p, root in escaped_roots(members, tree) if root is not None}

    def warnings(self, owner: Owner, orphan_count: int, respawned: bool) -> tuple[str, ...]:
        out = [pod_advice(owner)]
        if orphan_count:
            out.append(f"{orphan_count} process(es) escaped from the pod's cgroup still hold "
                       "GPU memory: reap them.")
        return tuple(out)
