"""Who owns a GPU process, and what that owner can be asked to do (see ``kinds``).

Each kind of owner is one adapter (an ``OwnerRules`` in this package's modules), and
``KINDS`` is the one registry of them: ``owner_of`` asks each in turn to recognise a
process from what the host parsed of its cgroup and unit, the first that does names its
owner, and the generic "no unit" owner is the fallback. Adding a kind is a module here and
a line in ``KINDS`` (docs/ARCHITECTURE.md). Pure functions of one snapshot, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpudash.domain.model import HostSnapshot, Process, Unit
from gpudash.domain.owners.container import (
    RESTARTING_POLICIES,
    ContainerRules,
    PodRules,
    cgroup_fields,
    claimed_container,
    container_key,
    container_members,
    pod_advice,
    pod_label,
)
from gpudash.domain.owners.kinds import (
    BaseRules,
    CliSelector,
    Found,
    Orphan,
    Owner,
    OwnerCapability,
    OwnerKind,
    OwnerRef,
    OwnerRules,
    Stray,
)
from gpudash.domain.owners.people import (
    NoOwnerRules,
    ScopeRules,
    SessionRules,
    UserServiceRules,
)
from gpudash.domain.owners.service import ServiceRules, unit_respawned
from gpudash.domain.owners.slurm import SlurmJobRules

__all__ = [
    "KINDS", "NO_UNIT", "RESTARTING_POLICIES", "RULES", "BaseRules", "CliSelector",
    "ContainerRules", "Found", "PodRules", "ServiceRules",
    "OwnerCapability", "cli_selected", "cli_selectors",
    "Orphan",
    "Owner", "OwnerKind", "OwnerRef", "OwnerRules", "Stray", "cgroup_fields", "claimed_container",
    "container_key", "container_members",
    "container_owner", "idle_owners", "owner_named", "owner_of", "owners", "pod_advice",
    "pod_label",
    "rules_of", "service_unit", "strays", "unit_kind", "unit_respawned",
]

# The kinds in the order they are asked: what a cgroup names (a pod, a container) before
# what a unit's name says; the host's services last but one; nobody last.
FALLBACK = NoOwnerRules()
KINDS: tuple[OwnerRules, ...] = (
    SlurmJobRules(), PodRules(), ContainerRules(), UserServiceRules(), SessionRules(), ScopeRules(),
    ServiceRules(), FALLBACK,
)
RULES: dict[OwnerKind, OwnerRules] = {r.kind: r for r in KINDS}


def cli_selectors(command: str) -> list[CliSelector]:
    """The flags that name an owner for ``command`` (reap, reclaim, start), in --help's
    order: every kind's own (``OwnerRules.cli``)."""
    return sorted((s for r in KINDS for s in r.cli if command in s.helps), key=lambda s: s.rank)


def cli_selected(command: str, given: Mapping[str, object]) -> OwnerRef | None:
    """The owner the selector flags of ``command`` name (one at a time), from the parsed
    arguments ``given`` (dest -> value; a flag not given is None or absent)."""
    for rules in KINDS:
        for selector in rules.cli:
            value = given.get(selector.dest)
            if command in selector.helps and isinstance(value, str):
                return OwnerRef(rules.kind.value, value)
    return None
NO_UNIT = FALLBACK.key


def rules_of(kind: str) -> OwnerRules | None:
    """The rules of the kind named ``kind`` (a claim's, a selection's), or None."""
    for rules in KINDS:
        if rules.kind.value == kind:
            return rules
    return None


def unit_kind(unit: str | None) -> OwnerKind:
    """The owner kind a systemd unit name alone says (containers' scopes are containers)."""
    for rules in KINDS:
        if unit and rules.claims_unit(unit):
            return rules.kind
    return FALLBACK.kind


def service_unit(unit: str | None) -> bool:
    """The unit is a service of the host's systemd, which gpudash can act on."""
    for rules in KINDS:
        if unit and rules.claims_unit(unit):
            return rules.manages_unit
    return False


def owner_of(p: Process, snapshot: HostSnapshot, units: Mapping[str, Unit] | None = None
             ) -> Owner:
    """The owner of ``p``: the first kind that recognises it (its pod or container when its
    cgroup names one, else what its unit's name says; a user's own service under their
    ``user@UID.service``, where there are no pods and containers are that user's)."""
    if units is None:
        units = {u.name: u for u in snapshot.units}
    for rules in KINDS:
        owner = rules.recognize(p, snapshot, units)
        if owner is not None:
            return owner
    raise AssertionError("the fallback recognises every process")  # pragma: no cover


def strays(snapshot: HostSnapshot, owner_by_pid: Mapping[int, Owner]) -> dict[int, Stray]:
    """What every kind finds held outside what its manager allocated (pid -> why)."""
    out: dict[int, Stray] = {}
    for rules in KINDS:
        for pid, stray in rules.strays(snapshot, owner_by_pid).items():
            out.setdefault(pid, stray)
    return out


def idle_owners(snapshot: HostSnapshot, seen: list[Owner]) -> list[Owner]:
    """The owners the host reports with no process left, of every kind (``seen``: those
    with processes; it grows with what this returns)."""
    out: list[Owner] = []
    for rules in KINDS:
        for owner in rules.idle(snapshot, seen):
            out.append(owner)
            seen.append(owner)
    return out


def owners(snapshot: HostSnapshot) -> dict[int, Owner]:
    """Every process's owner, by pid (one ``Owner`` for the processes that share one)."""
    units = {u.name: u for u in snapshot.units}
    seen: dict[tuple[object, ...], Owner] = {}
    out: dict[int, Owner] = {}
    for p in snapshot.processes:
        # what a kind recognises a process by (a job's claim is checked against its user)
        key = (p.unit, p.user_uid, p.user_unit, p.user, p.claim)
        owner = seen.get(key)
        if owner is None:
            owner = seen[key] = owner_of(p, snapshot, units)
        out[p.pid] = owner
    return out


def container_owner(snapshot: HostSnapshot, ref: str) -> Owner | None:
    """The owner of the container named (or id'd) ``ref``, whether or not a process of
    it is left (a stopped container has none)."""
    return RULES[OwnerKind.CONTAINER].find(ref, snapshot)


def owner_named(snapshot: HostSnapshot, ref: OwnerRef) -> Owner | None:
    """The owner ``ref`` names on ``snapshot``, as its kind finds it; None: not there (or
    a kind gpudash does not know)."""
    rules = rules_of(ref.kind)
    return None if rules is None else rules.find(ref.key, snapshot)
