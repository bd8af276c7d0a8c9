"""Who owns a GPU process, and the rules each kind of owner comes with.

An ``Owner`` is a group's owner as one snapshot shows it (a systemd service, a user's
own service, a login session, a container, a Kubernetes pod, a transient scope, or
nobody). What an owner can do, why it cannot, when its processes are orphans and what to
warn about are its kind's ``OwnerRules`` (one class per kind, in this package's modules):
the triage, the action specs and the screens ask the owner, never switch on its kind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from gpudash.domain.model import Container, Pod, Process, Unit
from gpudash.domain.tree import ProcessTree


class OwnerKind(StrEnum):
    SERVICE = "service"
    USER_SERVICE = "user service"  # under a user's own systemd (user@UID.service)
    SESSION = "session"
    CONTAINER = "container"
    POD = "pod"
    SCOPE = "scope"
    NONE = "no unit"


class OwnerCapability(StrEnum):
    """What an owner can be asked to do (beyond signalling one of its processes)."""

    STOP = "stop"  # systemctl stop / docker stop
    DISABLE = "disable"  # systemctl disable / docker update --restart=no: not again by itself
    REMOVE = "remove"  # docker rm / podman rm
    START = "start"  # systemctl start, restart, enable (and swap to it)
    RECLAIM = "reclaim"  # stop + disable + reap + wait for the memory


@dataclass(frozen=True, slots=True)
class Orphan:
    """Why a process is an orphan: the top of its orphaned subtree (itself, or the process
    it is under) and what happened to that one, as a predicate ("lost its API server
    (pid 3700 gone)", "is left from an earlier run of vllm.service (...)")."""

    root: int
    cause: str


class OwnerRules(Protocol):
    """The rules of one kind of owner."""

    kind: OwnerKind

    def capabilities(self, owner: Owner) -> frozenset[OwnerCapability]: ...

    def unable(self, owner: Owner, capability: OwnerCapability) -> str:
        """Why ``owner`` cannot do ``capability``, in words the operator can act on."""
        ...

    def describe(self, owner: Owner) -> str: ...

    def respawner(self, owner: Owner) -> str | None:
        """Who brings a killed main process back by itself, or None."""
        ...

    def main_pid(self, owner: Owner) -> int | None: ...

    def inactive(self, owner: Owner) -> bool:
        """The owner is stopped while processes of it may still be there."""
        ...

    def respawned(self, owner: Owner, previous: Unit | None) -> bool:
        """Its manager restarted it by itself (``previous``: its unit a sample before)."""
        ...

    def orphans(self, owner: Owner, members: Sequence[Process], tree: ProcessTree
                ) -> Mapping[int, Orphan]:
        """Its processes that hold (or parent) GPU memory nobody will ever free but a
        signal, each with why; never somebody's live work."""
        ...

    def warnings(self, owner: Owner, orphan_count: int, respawned: bool) -> tuple[str, ...]:
        """Plain-words advice for the operator about this owner."""
        ...

    def shown_empty(self, owner: Owner) -> bool:
        """Shown even when none of its processes holds GPU memory (a service's state is
        the proof an operator looks for)."""
        ...


@dataclass(frozen=True, slots=True)
class Owner:
    """The owner of a group of processes, with what it can do."""

    kind: OwnerKind
    key: str  # the group's key: a unit name, ``docker:NAME``, ``pod:NS/NAME``, "no unit"
    rules: OwnerRules = field(compare=False, repr=False)
    unit: Unit | None = None  # the systemd unit (a service, or a container's scope)
    container: Container | None = None  # as the runtime inspected it; None: not known
    container_id: str | None = None  # from the cgroup path, known even when not inspected
    runtime: str | None = None  # docker | podman | cri
    pod_uid: str | None = None
    pod: Pod | None = None
    user_uid: int | None = None  # under this user's own systemd: theirs, not the host's
    user: str | None = None  # that user's name, as the host reported its processes' owner

    @property
    def capabilities(self) -> frozenset[OwnerCapability]:
        return self.rules.capabilities(self)

    def can(self, capability: OwnerCapability) -> bool:
        return capability in self.capabilities

    def unable(self, capability: OwnerCapability) -> str:
        return self.rules.unable(self, capability)

    def describe(self) -> str:
        return self.rules.describe(self)

    @property
    def respawner(self) -> str | None:
        return self.rules.respawner(self)
