"""A Slurm job: slurmd started its processes (``slurmstepd`` cgroups name the job), Slurm
allocated it GPUs, and Slurm hands those GPUs to the next job once it ends.

Its facts come from the host (``scontrol show job``; the wire's ``owners["slurm job"]``,
keyed by job id; the key "" holds the node's: its name, state, drain reason). What no
other tool compares is what Slurm allocated with what the driver sees, per GPU:

- a job's process holding memory on a GPU Slurm did not give that job;
- memory on a GPU that no running job has (an ssh login during a job, a scheduler that
  left the job's cgroup: sglang #23627), with the job it most likely came from;
- memory held by one process on a GPU allocated to another job: that job will run out.

Those are ``Stray``s, whoever owns the process. A job that ended with processes left
(still COMPLETING, or gone from Slurm) has orphans: nobody but a signal frees them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from gpudash.domain.model import Fact, HostSnapshot, Process, Unit
from gpudash.domain.owners.kinds import (
    BaseRules,
    CliSelector,
    Found,
    Orphan,
    Owner,
    OwnerCapability,
    OwnerKind,
    OwnerRef,
    Stray,
)
from gpudash.domain.owners.service import what
from gpudash.domain.tree import ProcessTree

KIND = OwnerKind.SLURM_JOB
PREFIX = "slurm:"
# job states in which Slurm still counts the job's GPUs as allocated
HOLDING = frozenset({"RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "STAGE_OUT",
                     "SIGNALING", "RESIZING", "STOPPED"})
LIVE = frozenset({"RUNNING", "SUSPENDED", "CONFIGURING", "RESIZING", "STOPPED"})
JOB_ID = re.compile(r"[0-9]{1,12}(_[0-9]{1,12})?")  # fullmatch: a job, or an array's task
NO_JOB, OUTSIDE, OTHERS = "no job", "outside allocation", "another job's GPU"
REASONS = (NO_JOB, OUTSIDE, OTHERS)  # a metric's label values


def _text(facts: Mapping[str, Fact], name: str) -> str | None:
    value = facts.get(name)
    return value if isinstance(value, str) and value else None


def _int(facts: Mapping[str, Fact], name: str) -> int | None:
    value = facts.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _gpus(facts: Mapping[str, Fact]) -> tuple[int, ...] | None:
    value = facts.get("gpus")
    return value if isinstance(value, tuple) else None


def job_id(owner: Owner) -> str:
    return owner.key.removeprefix(PREFIX)


def node_facts(snapshot: HostSnapshot) -> Mapping[str, Fact]:
    """What the host said of itself as a Slurm node; {} where it is none."""
    return snapshot.facts(KIND.value, "")


def jobs(snapshot: HostSnapshot) -> Mapping[str, Mapping[str, Fact]]:
    return {k: v for k, v in snapshot.owners.get(KIND.value, {}).items() if k}


def allocated(snapshot: HostSnapshot) -> dict[int, str]:
    """GPU index -> the job Slurm has it allocated to (a job still holding its GPUs)."""
    out: dict[int, str] = {}
    for key, facts in sorted(jobs(snapshot).items()):
        if _text(facts, "state") in HOLDING:
            for gpu in _gpus(facts) or ():
                out.setdefault(gpu, key)
    return out


def _held_gpus(p: Process) -> list[int]:
    """The GPUs ``p`` holds memory on (unknown amounts count: a device holder's)."""
    return sorted({g for g, mib in p.gpu_memory_mib.items() if mib is None or mib > 0}
                  | set(p.device_gpus))


def _likely_source(snapshot: HostSnapshot, p: Process, gpu: int) -> str:
    """The ended job the memory most likely came from: the same user's, that had this GPU,
    the one that ended last."""
    ended = [(int(_int(f, "end_time") or 0), key) for key, f in jobs(snapshot).items()
             if _text(f, "state") not in HOLDING and _text(f, "user") == p.user
             and gpu in (_gpus(f) or ())]
    if not ended:
        return "escaped from a job's cgroup or started outside any job"
    end, key = max(ended)
    ago = max(0, int(snapshot.taken_at) - end) if end else None
    when = f", ended {ago // 60} min {ago % 60} s ago" if ago is not None else ""
    return f"most likely left by job {key} ({p.user}'s{when})"


class SlurmJobRules(BaseRules):
    kind = KIND
    cli: tuple[CliSelector, ...] = (CliSelector("--job", "JOBID", {
        "reap": "what is left of this Slurm job: its processes that outlived it, and what "
                "holds its GPUs outside any running job (never a running job's processes)",
    }, pattern=r"[0-9]{1,12}", what="a Slurm job id", rank=2),)

    def recognize(self, p: Process, snapshot: HostSnapshot, units: Mapping[str, Unit]
                  ) -> Owner | None:
        claimed = p.claimed
        if claimed is None or claimed[0] != self.kind.value:
            return None
        facts = snapshot.facts(self.kind.value, claimed[1])
        user = _text(facts, "user")
        if user is not None and p.user not in (user, "root"):
            return None  # another user's process in a cgroup named like the job's: not its
        node = node_facts(snapshot)
        if node.get("drain"):  # what its panel says of the node it runs on
            facts = {**facts, "node_drain": True, "node_name": node.get("node", ""),
                     "node_state": node.get("node_state", ""),
                     "node_reason": node.get("reason", "")}
        return Owner(self.kind, PREFIX + claimed[1], self, unit=units.get(p.unit or ""),
                     user=p.user, facts=facts)

    def describe(self, owner: Owner) -> str:
        name = _text(owner.facts, "name")
        user = _text(owner.facts, "user") or owner.user
        said = ", ".join(x for x in (name, f"{user}'s" if user else None) if x)
        return f"Slurm job {job_id(owner)}" + (f" ({said})" if said else "")

    def about(self, owner: Owner) -> str:
        return "a Slurm job: slurmd ends its processes when the job ends"

    def capabilities(self, owner: Owner) -> frozenset[OwnerCapability]:
        # a job Slurm still runs can be cancelled (scancel: slurmd ends its processes)
        return frozenset({OwnerCapability.STOP}) if self._state(owner) in LIVE else frozenset()

    def unable(self, owner: Owner, capability: OwnerCapability) -> str:
        if capability is OwnerCapability.STOP:
            return (f"{self.describe(owner)} is no longer running: reap what is left of it "
                    f"(gpudash reap --job {job_id(owner)})")
        return (f"{self.describe(owner)}: Slurm decides; cancel it (scancel), or signal its "
                "processes")

    def selector(self, owner: Owner) -> OwnerRef | None:
        return OwnerRef(self.kind.value, job_id(owner))

    def command(self, capability: OwnerCapability, key: str) -> tuple[str, ...] | None:
        if capability is not OwnerCapability.STOP or not JOB_ID.fullmatch(key):
            return None
        return ("scancel", key)

    def title(self, capability: OwnerCapability, action: str) -> str | None:
        return "Cancel job (scancel)" if capability is OwnerCapability.STOP else None

    def _state(self, owner: Owner) -> str | None:
        return _text(owner.facts, "state")

    def inactive(self, owner: Owner) -> bool:
        # ended (or unknown to Slurm: its record aged out) while processes of it are left
        return self._state(owner) not in LIVE

    def orphans(self, owner: Owner, members: Sequence[Process], tree: ProcessTree
                ) -> Mapping[int, Orphan]:
        state = self._state(owner)
        if state in LIVE:
            return {}
        said = f"is {state}" if state else "is no longer known to Slurm"
        cause = f"is left behind: job {job_id(owner)} {said}"
        brief = f"job {job_id(owner)} {state or 'gone'}"
        return {p.pid: Orphan(p.pid, cause, brief)
                for p in members if p.pid in tree.holding}

    def warnings(self, owner: Owner, orphan_count: int, respawned: bool) -> tuple[str, ...]:
        w: list[str] = []
        if self._state(owner) == "COMPLETING":
            w.append(f"job {job_id(owner)} is completing: slurmd waits for these processes "
                     "to end; if they do not, it drains the node (Kill task failed).")
        if orphan_count:
            w.append(f"{orphan_count} process(es) of the ended job {job_id(owner)} still "
                     "hold GPU memory Slurm will give to the next job: reap them.")
        if owner.facts.get("node_drain"):
            node = _text(owner.facts, "node_name") or "this node"
            why = _text(owner.facts, "node_reason")
            w.append(f"{node} is drained" + (f" ({why})" if why else "") + ": Slurm starts "
                     "no new job here. Once its GPUs are clean: gpudash resume (scontrol "
                     f"update nodename={node} state=resume)")
        return tuple(w)

    def leftovers(self, key: str, snapshot: HostSnapshot, found: Found,
                  gpus: tuple[int, ...] | None, strays: bool) -> Mapping[int, str]:
        """What is left of job ``key`` holding GPU memory: its own processes (once it no
        longer runs), and with ``strays`` whatever holds its GPUs outside any running job
        (the usual site rule: no GPU work outside a job). A running job's processes,
        never: not even another job's epilog signals them."""
        facts = jobs(snapshot).get(key, {})
        if _text(facts, "state") in LIVE:
            return {}
        mine = set(gpus if gpus is not None else _gpus(facts) or ())
        live = {k for k, f in jobs(snapshot).items() if _text(f, "state") in LIVE}
        out: dict[int, str] = {}
        for p in snapshot.processes:
            held = _held_gpus(p)
            if not held:
                continue
            owner = found.owner_by_pid.get(p.pid)
            theirs = job_id(owner) if owner is not None and owner.kind is self.kind else None
            if theirs == key:
                out[p.pid] = f"{what(p)} is left by job {key}"
            elif strays and mine & set(held) and (
                    theirs is None or (theirs in jobs(snapshot) and theirs not in live)):
                # outside any job (its cgroup names none), or left by an ended one; a job
                # Slurm did not describe may be running: never
                gpu = min(mine & set(held))
                out[p.pid] = (f"{what(p)} ({p.user or '?'}) holds GPU {gpu} of job {key} "
                              "outside any running job")
        return out

    def rows(self, owner: Owner) -> tuple[tuple[str, str], ...]:
        f = owner.facts
        gpus = _gpus(f)
        array = _int(f, "array_job"), _int(f, "array_task")
        rows = [("Job", job_id(owner) + (f" (array {array[0]}_{array[1]})"
                                         if None not in array else "")),
                ("Name", _text(f, "name") or "?"), ("User", _text(f, "user") or "?"),
                ("Partition", _text(f, "partition") or "?"),
                ("State", self._state(owner) or "not known to Slurm"),
                ("GPUs", ",".join(map(str, gpus)) if gpus is not None else "not said")]
        if owner.facts.get("node_drain"):
            rows.append(("Node", " ".join(x for x in (
                _text(owner.facts, "node_name"), _text(owner.facts, "node_state"),
                _text(owner.facts, "node_reason")) if x)))
        return tuple(rows)

    def strays(self, snapshot: HostSnapshot, owner_by_pid: Mapping[int, Owner]
               ) -> Mapping[int, Stray]:
        node = node_facts(snapshot)
        if not node or _text(node, "error"):
            return {}  # not a Slurm node, or Slurm did not answer: nothing can be said
        given = allocated(snapshot)
        out: dict[int, Stray] = {}
        for p in snapshot.processes:
            owner = owner_by_pid.get(p.pid)
            mine = job_id(owner) if owner is not None and owner.kind is self.kind else None
            for gpu in _held_gpus(p):
                holder = given.get(gpu)
                if mine is not None:
                    facts = jobs(snapshot).get(mine)
                    if holder == mine or facts is None or _gpus(facts) is None:
                        continue  # its own GPU; a job Slurm forgot (its orphans say it),
                        # or one whose GPUs Slurm did not say
                    if holder is None:
                        out[p.pid] = Stray(OUTSIDE, f"{what(p)} of job {mine} holds GPU "
                                           f"{gpu}, which Slurm did not allocate to it")
                    else:
                        out[p.pid] = Stray(OTHERS, f"{what(p)} of job {mine} holds GPU "
                                           f"{gpu}, allocated to job {holder}: job {holder} "
                                           "may run out of memory")
                elif holder is None:
                    out[p.pid] = Stray(NO_JOB, f"{what(p)} ({p.user or '?'}) holds GPU "
                                       f"{gpu}, which no running job has: "
                                       f"{_likely_source(snapshot, p, gpu)}")
                else:
                    out[p.pid] = Stray(OTHERS, f"{what(p)} ({p.user or '?'}) holds GPU {gpu}, "
                                       f"allocated to job {holder}, outside that job: job "
                                       f"{holder} may run out of memory")
                break
        return out
