"""Who owns a GPU process, and the rules each kind of owner comes with.

An ``Owner`` is a group's owner as one snapshot shows it (a systemd service, a user's
own service, a login session, a container, a Kubernetes pod, a transient scope, or
nobody). Each kind is one adapter, an ``OwnerRules`` class in this package: how it is
recognised in a snapshot, what it can do and why it cannot, when its processes are
orphans, what to warn about, its lint, how the panel and the engine name it. The
triage, the action specs and the screens ask the owner, never switch on its kind
(tests/test_owner_adapters.py fails when a kind is named outside this package and the
demo).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field
from enum import StrEnum
from typing import Protocol

from gpudash.domain.lint import Finding, Learned
from gpudash.domain.model import Container, Fact, HostSnapshot, Pod, Process, Unit
from gpudash.domain.tree import ProcessTree
from gpudash.record import record


class OwnerKind(StrEnum):
    SERVICE = "service"
    USER_SERVICE = "user service"  # under a user's own systemd (user@UID.service)
    SESSION = "session"
    CONTAINER = "container"
    POD = "pod"
    SLURM_JOB = "slurm job"
    SCOPE = "scope"
    NONE = "no unit"


class OwnerCapability(StrEnum):
    """What an owner can be asked to do (beyond signalling one of its processes)."""

    STOP = "stop"  # systemctl stop / docker stop
    DISABLE = "disable"  # systemctl disable / docker update --restart=no: not again by itself
    REMOVE = "remove"  # docker rm / podman rm
    START = "start"  # systemctl start, restart, enable (and swap to it)
    RECLAIM = "reclaim"  # stop + disable + reap + wait for the memory


@record
class OwnerRef:
    """Which owner an action names: its kind's name (``OwnerRules.kind``) and the key that
    kind knows it by (a unit's name, a container's name or id, a pod's UID, a job's id).
    ``Selection.owner`` is one; the kinds' rules make it (``selector``) and find it
    (``find``)."""

    kind: str
    key: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.key}"  # as a process's claim names its owner


@record
class CliSelector:
    """How the command line names an owner of a kind: ``FLAG VALUE`` (``--job 4117``),
    for the subcommands in ``helps``. The CLI's selector flags are these, generated; the
    value is the key of an ``OwnerRef`` of the kind that declares it."""

    flag: str  # "--job"
    metavar: str  # "JOBID"
    helps: Mapping[str, str]  # subcommand -> the flag's help there (only those have it)
    pattern: str | None = None  # what a value must be (``re.fullmatch``), else a usage error
    what: str = ""  # what a value is, for that error ("a Slurm job id")
    rank: int = 0  # its place among the selectors in --help

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    def checked(self, text: str) -> str:
        """``text`` if it can be such a value; ValueError otherwise."""
        if self.pattern is not None and not re.fullmatch(self.pattern, text):
            raise ValueError(f"not {self.what or 'a valid value'}: {text[:40]!r}")
        return text


@record
class Stray:
    """A process (of any owner) holding GPU memory that a kind's manager did not give it: a
    Slurm node's GPU that no running job was allocated, or another job's. ``reason``: one
    of a few short words (a metric's label: "no job", "outside allocation"); ``why``: the
    whole story, naming the GPU and who it most likely came from."""

    reason: str
    why: str


@record
class Found:
    """What the triage found of a snapshot's owners, for a kind's ``leftovers``."""

    owner_by_pid: Mapping[int, Owner]
    orphans: Mapping[int, Orphan]
    strays: Mapping[int, Stray]


@record
class Orphan:
    """Why a process is an orphan: the top of its orphaned subtree (itself, or the process
    it is under) and what happened to that one, as a predicate ("lost its API server
    (pid 3700 gone)", "is left from an earlier run of vllm.service (...)")."""

    root: int
    cause: str
    # the cause in a few words, for a table's cell beside the owner's own row ("earlier
    # run, main now 215207", "job 4117 COMPLETED"); the cause where none is given
    brief: str = ""


class OwnerRules(Protocol):
    """One kind of owner: the whole contract of an adapter (``BaseRules`` has defaults)."""

    kind: OwnerKind
    # Its systemd unit is the owner (a service): the unit's state, lint and actions are
    # the owner's. A container's scope is a unit too, but the runtime is its owner.
    manages_unit: bool
    nobody: bool  # no owner at all: listed last; each process stands for itself
    personal: bool  # somebody's live work (a login): signalling it says so
    cli: tuple[CliSelector, ...]  # how the command line names one (none: it does not)

    def recognize(self, p: Process, snapshot: HostSnapshot, units: Mapping[str, Unit]
                  ) -> Owner | None:
        """``p``'s owner when it is of this kind (the registry asks the kinds in order)."""
        ...

    def claims_unit(self, name: str) -> bool:
        """A systemd unit of this name, alone, is of this kind."""
        ...

    def idle(self, snapshot: HostSnapshot, seen: Sequence[Owner]) -> Iterable[Owner]:
        """Owners of this kind the host reports with no process left (a stopped service,
        an exited container): shown, as the proof an operator looks for. ``seen``: the
        owners already shown (those with processes)."""
        ...

    def capabilities(self, owner: Owner) -> frozenset[OwnerCapability]: ...

    def unable(self, owner: Owner, capability: OwnerCapability) -> str:
        """Why ``owner`` cannot do ``capability``, in words the operator can act on."""
        ...

    def describe(self, owner: Owner) -> str: ...

    def about(self, owner: Owner) -> str:
        """What the unit panel says of an owner it has no more facts about."""
        ...

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

    def lint(self, owner: Owner, holds_gpu_memory: bool, learned: Learned | None
             ) -> tuple[Finding, ...]:
        """What in its configuration makes the incident likely."""
        ...

    def shown_empty(self, owner: Owner) -> bool:
        """Shown even when none of its processes holds GPU memory (a service's state is
        the proof an operator looks for)."""
        ...

    def rows(self, owner: Owner) -> tuple[tuple[str, str], ...]:
        """Its facts as the unit panel lists them, (name, value) each (host text)."""
        ...

    def strays(self, snapshot: HostSnapshot, owner_by_pid: Mapping[int, Owner]
               ) -> Mapping[int, Stray]:
        """Processes of any owner that hold GPU memory this kind's manager allocated to
        nobody, or to another owner (a Slurm node's GPUs): pid -> why."""
        ...

    def selector(self, owner: Owner) -> OwnerRef | None:
        """How an action names it (``Selection.owner``); None: it is not acted on as a
        whole."""
        ...

    def find(self, key: str, snapshot: HostSnapshot) -> Owner | None:
        """The owner of this kind that ``key`` names on ``snapshot`` (with processes or
        idle), or None: not there."""
        ...

    def kill_note(self, owner: Owner, p: Process) -> str | None:
        """What killing ``p``, one of its processes, does beyond it (a runtime restarts
        it), or None."""
        ...

    def leftovers(self, key: str, snapshot: HostSnapshot, found: Found,
                  gpus: tuple[int, ...] | None, strays: bool) -> Mapping[int, str]:
        """What reaping the leftovers of the owner ``key`` (as a claim names it) signals:
        pid -> why. ``gpus``: its GPUs where the caller knows them; ``strays``: also what
        holds them outside any owner of this kind that still runs."""
        ...

    def holder(self, owner: Owner, p: Process, process: str) -> str:
        """Who is in the way, for a start that does not fit (``process``: ``p`` in words)."""
        ...

    def command(self, capability: OwnerCapability, key: str) -> tuple[str, ...] | None:
        """The host command that does ``capability`` to the owner a claim names ``key``
        (a Slurm job's ``scancel``), validated; None: none (systemd's and the container
        runtimes' have their own steps)."""
        ...

    def identity(self, owner: Owner) -> Mapping[str, str | None]:
        """Who it is beyond its key, as the ``--json`` document's owner fields say it
        (schema 3: ``container_id``, ``runtime``, ``pod_uid``); {}: none of them."""
        ...

    def title(self, capability: OwnerCapability, action: str) -> str | None:
        """What the action named ``action`` (``stop``, ``stop+disable``...), which asks
        ``capability``, is called on an owner of this kind ("Cancel job (scancel)"); None:
        the action's own title."""
        ...


class BaseRules:
    """The defaults of a kind: named, nothing to ask, not acted on (the generic owner)."""

    kind: OwnerKind
    manages_unit = False
    nobody = False
    personal = False
    cli: tuple[CliSelector, ...] = ()

    def recognize(self, p: Process, snapshot: HostSnapshot, units: Mapping[str, Unit]
                  ) -> Owner | None:
        return None

    def claims_unit(self, name: str) -> bool:
        return False

    def idle(self, snapshot: HostSnapshot, seen: Sequence[Owner]) -> Iterable[Owner]:
        return ()

    def capabilities(self, owner: Owner) -> frozenset[OwnerCapability]:
        return frozenset()

    def unable(self, owner: Owner, capability: OwnerCapability) -> str:
        return f"{self.describe(owner)} cannot {capability.value}: signal its processes"

    def describe(self, owner: Owner) -> str:
        return owner.key

    def about(self, owner: Owner) -> str:
        return self.kind.value

    def respawner(self, owner: Owner) -> str | None:
        return None

    def main_pid(self, owner: Owner) -> int | None:
        return None

    def inactive(self, owner: Owner) -> bool:
        return False

    def respawned(self, owner: Owner, previous: Unit | None) -> bool:
        return False

    def orphans(self, owner: Owner, members: Sequence[Process], tree: ProcessTree
                ) -> Mapping[int, Orphan]:
        return {}

    def warnings(self, owner: Owner, orphan_count: int, respawned: bool) -> tuple[str, ...]:
        return ()

    def lint(self, owner: Owner, holds_gpu_memory: bool, learned: Learned | None
             ) -> tuple[Finding, ...]:
        return ()

    def shown_empty(self, owner: Owner) -> bool:
        return False

    def rows(self, owner: Owner) -> tuple[tuple[str, str], ...]:
        return ()

    def strays(self, snapshot: HostSnapshot, owner_by_pid: Mapping[int, Owner]
               ) -> Mapping[int, Stray]:
        return {}

    def selector(self, owner: Owner) -> OwnerRef | None:
        return None

    def find(self, key: str, snapshot: HostSnapshot) -> Owner | None:
        ref = OwnerRef(self.kind.value, key)
        units = {u.name: u for u in snapshot.units}
        for p in snapshot.processes:
            owner = self.recognize(p, snapshot, units)
            if owner is not None and self.selector(owner) == ref:
                return owner
        return next((o for o in self.idle(snapshot, ()) if self.selector(o) == ref), None)

    def kill_note(self, owner: Owner, p: Process) -> str | None:
        return None

    def leftovers(self, key: str, snapshot: HostSnapshot, found: Found,
                  gpus: tuple[int, ...] | None, strays: bool) -> Mapping[int, str]:
        return {pid: o.cause for pid, o in found.orphans.items()
                if (owner := found.owner_by_pid.get(pid)) is not None and owner.key == key}

    def holder(self, owner: Owner, p: Process, process: str) -> str:
        return owner.key

    def command(self, capability: OwnerCapability, key: str) -> tuple[str, ...] | None:
        return None

    def identity(self, owner: Owner) -> Mapping[str, str | None]:
        return {}

    def title(self, capability: OwnerCapability, action: str) -> str | None:
        return None


@record
class Owner:
    """The owner of a group of processes, with what it can do."""

    kind: OwnerKind
    key: str  # the group's key: a unit name, ``docker:NAME``, ``pod:NS/NAME``, "no unit"
    rules: OwnerRules = field(compare=False, repr=False)
    unit: Unit | None = None  # the systemd unit (a service, or a container's scope)
    container: Container | None = None  # as the runtime inspected it; None: not known
    pod: Pod | None = None
    # the key of the claim that named it (``docker/ID`` of a container, a pod's UID, a
    # job's id), known from the cgroup even where nothing was inspected; its kind reads it
    claimed: str | None = None
    user_uid: int | None = None  # under this user's own systemd: theirs, not the host's
    user: str | None = None  # that user's name, as the host reported its processes' owner
    # what a kind that has no field above knows of its owner (a job's facts), as the host
    # reported them: untrusted text
    facts: Mapping[str, Fact] = field(default_factory=dict, compare=False)

    @property
    def service(self) -> Unit | None:
        """Its systemd unit when that unit is the owner (a service), else None."""
        return self.unit if self.rules.manages_unit else None

    @property
    def nobody(self) -> bool:
        return self.rules.nobody

    @property
    def personal(self) -> bool:
        return self.rules.personal

    @property
    def selector(self) -> OwnerRef | None:
        return self.rules.selector(self)

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
