"""Slurm jobs as owners: which one a process's cgroup claims (``claim``: ``KIND:KEY``)
and what the host knows of them (the snapshot's ``owners``). A container's and a pod's
claim come from ``parsing.container_claim``, their facts from ``containers``.

One reader per kind, asked in turn; here a Slurm job (``slurm``). A kind this host is
not part of says nothing: no claim, no section. A host is a Slurm node while a ``slurmd``
runs on it or a process claims a job: ``squeue`` alone (a login host's client, a package
installed and never configured) is not one, and its errors are not this host's. Its
facts are read every ``FACTS_TTL_S`` (at once when a process claims an owner not yet
described, or a refresh is asked), and after an error only every ``RETRY_S``: a
controller that does not answer must not slow every sample.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from .protocol import MAX_FACT_LIST, MAX_OWNERS, SLURM_JOB, TEXT_MAX
from .slurm import ACTIVE_STATES, find_tool, job_of_cgroup, read_jobs, read_node
from .text import cap_text

if TYPE_CHECKING:
    from .protocol import Json

FACTS_TTL_S = 5.0
RETRY_S = 30.0
# the job fields the wire carries (host text capped), as the domain's Slurm adapter reads them
_JOB_TEXT = (("user", "user"), ("name", "name"), ("state", "state"),
             ("partition", "partition"), ("nodes", "nodes"))
_JOB_INT = (("uid", "uid"), ("end_time", "end_time"), ("array_job_id", "array_job"),
            ("array_task_id", "array_task"))


def claim_of(cgroup_text: str) -> str | None:
    """The owner a process's ``/proc/PID/cgroup`` names, as ``KIND:KEY``; None."""
    job = job_of_cgroup(cgroup_text)
    return None if job is None else f"{SLURM_JOB}:{job['job_id']}"


class SlurmJobs:
    """The jobs of this Slurm node and the node's state, for the wire."""

    def __init__(self, clock: Any = time.monotonic, proc: str = "/proc") -> None:
        self.clock = clock
        self.proc = proc
        self.present = find_tool("squeue") is not None
        self.node_due = 0.0  # when to look for slurmd again
        self.node = False
        self.due = 0.0
        self.section: Json = {}
        self.described: set[str] = set()
        self.gpus_seen: dict[str, list[int]] = {}  # job -> its GPUs, while Slurm said them

    def read(self, claimed: set[str], force: bool) -> tuple[Json, list[str]]:
        """(the kind's section, errors to report); {} where this is no Slurm node."""
        now = self.clock()
        if not self.present or not (claimed or self._slurmd_runs(now)):
            self.section, self.described = {}, set()
            return {}, []
        if not force and now < self.due and claimed <= self.described:
            return self.section, []
        jobs, node = read_jobs(), read_node()
        error = jobs.get("error") or node.get("error")
        self.due = now + (RETRY_S if error else FACTS_TTL_S)
        self.section = self._section(jobs, node, error)
        self.described = set(self.section) - {""}
        return self.section, [f"slurm: {error}"] if error else []

    def _slurmd_runs(self, now: float) -> bool:
        """Whether a ``slurmd`` runs here (looked for every RETRY_S)."""
        if now >= self.node_due:
            self.node_due = now + RETRY_S
            self.node = slurmd_running(self.proc)
        return self.node

    def _section(self, jobs: Json, node: Json, error: str | None) -> Json:
        here: Json = {"node": cap_text(str(jobs.get("node") or ""), TEXT_MAX)}
        facts = node.get("node") or {}
        if facts:
            here["node_state"] = cap_text(str(facts.get("state") or ""), TEXT_MAX)
            here["drain"] = bool(facts.get("drain"))
            if facts.get("reason"):
                here["reason"] = cap_text(str(facts["reason"]), TEXT_MAX)
        if error:
            here["error"] = cap_text(error, TEXT_MAX)
        # the active jobs first, then the most recently ended: at most MAX_OWNERS - 1
        listed = sorted(jobs.get("jobs") or [], key=lambda j: (
            j.get("state") not in ACTIVE_STATES, -(j.get("end_time") or 0)))
        out: Json = {"": here}
        seen: dict[str, list[int]] = {}
        for job in listed[: MAX_OWNERS - 1]:
            key = str(job["job_id"])
            one: Json = {}
            for field, name in _JOB_TEXT:
                if job.get(field):
                    one[name] = cap_text(str(job[field]), TEXT_MAX)
            for field, name in _JOB_INT:
                if isinstance(job.get(field), int):
                    one[name] = job[field]
            gpus = job.get("gpus")
            if gpus is None:
                gpus = self.gpus_seen.get(key)  # an ended job: the GPUs it had
            if gpus is not None:
                seen[key] = one["gpus"] = sorted(gpus)[:MAX_FACT_LIST]
            out[key] = one
        self.gpus_seen = seen
        return out


def slurmd_running(proc: str = "/proc") -> bool:
    """Whether a process named ``slurmd`` is in ``proc`` (any user may read a ``comm``)."""
    try:
        names = os.listdir(proc)
    except OSError:
        return False
    for name in names:
        if name.isdigit():
            try:
                with open(os.path.join(proc, name, "comm"), "rb") as f:
                    if f.read(16).strip() == b"slurmd":
                        return True
            except OSError:
                continue
    return False


class Claims:
    """Every kind's reader: the ``owners`` section of a snapshot."""

    def __init__(self, proc: str = "/proc") -> None:
        self.slurm = SlurmJobs(proc=proc)

    def read(self, procs: dict[str, Json], force: bool) -> tuple[Json, list[str]]:
        claimed = {str(p["claim"]).partition(":")[2] for p in procs.values()
                   if str(p.get("claim", "")).startswith(SLURM_JOB + ":")}
        section, errors = self.slurm.read(claimed, force)
        return ({SLURM_JOB: section} if section else {}), errors
