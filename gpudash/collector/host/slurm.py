"""Slurm jobs on this node: which job a process's cgroup names, and the jobs' and the node's
facts from Slurm's own tools (``squeue``, ``scontrol``).

Runs on the GPU host's python3 (3.7+), the standard library only, and also in an Epilog,
which Slurm starts as root with no PATH: the tools are looked up in PATH, then in
SLURM_BIN_DIRS. Every call is bounded (CALL_TIMEOUT_S, and READ_BUDGET_S for a whole
read); a missing tool or a controller that does not answer gives an ``error`` text, never
an exception.

Job names (and comments, paths, ...) are anybody's text: Slurm prints them raw, and a name
may hold ``=``, spaces, even a newline followed by ``JobId=99 ... UserId=root(0)``, which
``scontrol show job -o`` prints as a record of its own (seen on Slurm 22.05). So no record
boundary or field is ever taken from such text: the jobs are listed by ``squeue`` with a
random mark opening each record and the name last (everything after the last separator up
to the next mark is the name, newlines included), and each job's ``scontrol show job -o -d``
record is read knowing that exact name, so the fields after it (state, node list, the GPU
indexes of ``GRES=gpu:2(IDX:0-1)``) are Slurm's and not the name's.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the host may run Python 3.7: no runtime generic aliases
    from collections.abc import Mapping
    from typing import TypeAlias  # novermin: type checking only

    Json: TypeAlias = dict[str, Any]  # a JSON object

CALL_TIMEOUT_S = 5.0  # one squeue / scontrol call
READ_BUDGET_S = 10.0  # all the calls of one read_jobs
MAX_JOBS = 64  # jobs of this node whose scontrol record is read, per read
NAME_MAX = 1024  # characters of a job name kept (then TRUNCATED)
TEXT_MAX = 256  # other texts (user, partition, state, reason, node list)
ERROR_MAX = 200
TRUNCATED = "…"
SLURM_BIN_DIRS = ("/usr/bin", "/usr/local/bin", "/opt/slurm/bin", "/usr/sbin", "/bin")
# states in which a job holds (or still frees) its node's GPUs: their scontrol records are read
ACTIVE_STATES = frozenset((
    "RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "CONFIGURING", "RESIZING", "SIGNALING",
    "STAGE_OUT",
))
# ... of which these still say which GPUs: from COMPLETING on, scontrol's detail is empty
# (``GRES=``) while the job's processes may still hold them (seen on 22.05)
DETAIL_STATES = ACTIVE_STATES - {"COMPLETING", "STAGE_OUT"}

# squeue fields, none of which is free text, then the name: %A job id, %F array job id,
# %K array task id, %U uid, %u user, %T state, %P partition, %e end time, %N node list
QUEUE_FIELDS = ("%A", "%F", "%K", "%U", "%u", "%T", "%P", "%e", "%N", "%j")
QUEUE_SEP = "|"

# --------------------------------------------------------------------------- cgroups

# v2: <scope>/job_<N>/step_<S>[/user/task_<T> | /slurm]; the scope is
# [<node>_]slurmstepd.scope in a slice (system.slice, under a container's path or not)
_V2 = re.compile(
    r"(?:^|/)[^/]+\.slice/(?:[^/]+_)?slurmstepd\.scope/job_(\d+)"
    r"(?:/step_([^/]+)(?:/(slurm|user)(?:/task_([^/]+))?)?)?/?$"
)
# v1: /slurm[_<node>]/uid_<U>/job_<N>[/step_<S>[/task_<T>]] at a hierarchy's root
_V1 = re.compile(
    r"^/slurm(?:_[^/]+)?/uid_(\d+)/job_(\d+)(?:/step_([^/]+)(?:/task_([^/]+))?)?/?$"
)
_STEP = re.compile(r"batch|extern|interactive|\d+(?:\.\d+)?|\d+\+\d+")
# a cgroup below a user's own systemd is delegated to that user, who may name it anything
_DELEGATED = re.compile(r"/user@\d+\.service(?:/|$)")


def job_of_cgroup(text: str) -> Json | None:
    """The Slurm job a ``/proc/PID/cgroup`` text names, or None.

    {"job_id": int, "step": "batch" | "extern" | "interactive" | "<N>" | None,
     "task": "<N>" | "special" | None, "uid": int | None (v1 only), "stepd": bool
     (the step's slurmstepd itself, v2's ``.../slurm``), "layout": "v2" | "v1"}.
    v2's ``0::`` line is read first; on a host whose v2 path names no job, the v1 lines
    (freezer first: proctrack/cgroup's) are. A path under ``user@UID.service`` is the
    user's own to name and never counts."""
    v1_lines: list[tuple[str, str]] = []
    for line in text.split("\n")[:64]:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if _DELEGATED.search(path):
            continue
        if parts[0] == "0" and controllers == "":
            m = _V2.search(path)
            if m:
                job, step = _job_id(m.group(1)), _step(m.group(2))
                if job is None or (m.group(2) is not None and step is None):
                    continue
                return {"job_id": job, "step": step, "task": _task(m.group(4)),
                        "uid": None, "stepd": m.group(3) == "slurm", "layout": "v2"}
        else:
            v1_lines.append((controllers, path))
    v1_lines.sort(key=lambda cp: "freezer" not in cp[0].split(","))
    for _, path in v1_lines:
        m = _V1.match(path)
        if m:
            job, step, uid = _job_id(m.group(2)), _step(m.group(3)), _int(m.group(1))
            if job is None or uid is None or (m.group(3) is not None and step is None):
                continue
            return {"job_id": job, "step": step, "task": _task(m.group(4)), "uid": uid,
                    "stepd": False, "layout": "v1"}
    return None


def _job_id(token: str) -> int | None:
    """Slurm's job ids are 32-bit."""
    n = _int(token)
    return n if n is not None and n < 2**32 else None


def _step(token: str | None) -> str | None:
    return token if token is not None and _STEP.fullmatch(token) else None


def _task(token: str | None) -> str | None:
    return token if token is not None and re.fullmatch(r"\d+|special", token) else None


# --------------------------------------------------------------------------- texts


def cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - len(TRUNCATED)] + TRUNCATED


def _int(token: str | None) -> int | None:
    return int(token) if token is not None and token.isdigit() and len(token) < 19 else None


def slurm_time(token: str | None) -> int | None:
    """``2026-12-05T03:22:08`` (this host's local time, as Slurm prints it) -> epoch
    seconds; None for ``Unknown``, ``NONE``, ``N/A`` and anything else."""
    if not token or not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", token):
        return None
    try:
        return int(time.mktime(time.strptime(token, "%Y-%m-%dT%H:%M:%S")))
    except (ValueError, OverflowError):
        return None


def gpu_indexes(gres: str) -> list[int] | None:
    """The GPU indexes of a ``GRES=`` detail: ``gpu:2(IDX:0-1)``, ``gpu:a100:1(IDX:3)``,
    ``gpu:1(IDX:0),gpu:v100:2(IDX:2-3)``, ``gpu:3(IDX:0-1,3)``; [] when it names no
    GPU (``GRES=``), None when it is not such a detail."""
    if not gres or gres == "(null)":
        return []
    found: set[int] = set()
    matched = False
    for m in re.finditer(r"(?:^|,)gpu(?::[^:(),\s]+)?:\d+\(IDX:([0-9,\-]*)\)", gres):
        matched = True
        got = _ranges(m.group(1))
        if got is None:
            return None
        found |= got
    if not matched:
        return [] if not re.search(r"(?:^|,)gpu[:(]", gres) else None
    return sorted(found)


def _ranges(text: str, limit: int = 1024) -> set[int] | None:
    """``0-1,3`` -> {0, 1, 3}; None if malformed or past ``limit``."""
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        a, b = _int(lo), _int(hi) if hi else _int(lo)
        if a is None or b is None or b < a or b >= limit:
            return None
        out.update(range(a, b + 1))
    return out


def in_hostlist(node: str, expr: str) -> bool:
    """Whether ``node`` is in a Slurm host list (``gpu[01-04,07],login1``), without
    expanding it (a list may name thousands of nodes)."""
    if not node or not expr:
        return False
    for item in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", expr)[:256]:
        pattern, ranges = "", []
        for lit, brackets in re.findall(r"([^\[]*)(?:\[([^\]]*)\])?", item):
            pattern += re.escape(lit)
            if brackets:
                pattern += r"(\d+)"
                ranges.append(brackets)
        m = re.fullmatch(pattern, node)
        if m and all(_in_ranges(v, r) for v, r in zip(m.groups(), ranges)):  # noqa: B905
            return True
    return False


def _in_ranges(value: str, ranges: str) -> bool:
    for part in ranges.split(","):
        lo, _, hi = part.partition("-")
        hi = hi or lo
        if not (lo.isdigit() and hi.isdigit()):
            continue
        padded = len(lo) > 1 and lo.startswith("0")
        if (len(value) != len(lo)) if padded else (len(value) > 1 and value.startswith("0")):
            continue  # zero-padded: node01 is in [01-10], node1 is not; node01 not in [1-10]
        if int(lo) <= int(value) <= int(hi):
            return True
    return False


# --------------------------------------------------------------------------- squeue


def queue_format(mark: str) -> str:
    return mark + QUEUE_SEP.join(QUEUE_FIELDS)


def parse_queue(text: str, mark: str, name_max: int | None = NAME_MAX) -> list[Json]:
    """``squeue -h -o queue_format(mark)`` -> one dict a job: {"job_id", "array_job_id",
    "array_task_id" (None unless an array task), "uid", "user", "state", "partition",
    "end_time" (epoch or None), "nodes" (host list), "name" (cut to ``name_max``)}.
    A record opens with ``mark`` (random, per call: no job name can forge it); lines
    without it continue the name before them."""
    records: list[str] = []
    # squeue ends every record with a newline: the name is what comes before it
    for line in (text[:-1] if text.endswith("\n") else text).split("\n"):
        if line.startswith(mark):
            records.append(line[len(mark):])
        elif records:
            records[-1] += "\n" + line
    out = []
    n = len(QUEUE_FIELDS)
    for rec in records:
        fields = rec.split(QUEUE_SEP, n - 1)
        if len(fields) != n:
            continue
        job, array_job, array_task, uid, user, state, partition, end, nodes, name = fields
        job_id, uid_n = _int(job), _int(uid)
        if job_id is None or uid_n is None or not re.fullmatch(r"[A-Z_]+", state):
            continue
        task = _int(array_task)
        out.append({
            "job_id": job_id,
            "array_job_id": _int(array_job) if task is not None else None,
            "array_task_id": task,
            "uid": uid_n,
            "user": cap(user, TEXT_MAX),
            "state": cap(state, TEXT_MAX),
            "partition": cap(partition, TEXT_MAX),
            "end_time": slurm_time(end),
            "nodes": cap(nodes, TEXT_MAX),
            "name": name if name_max is None else cap(name, name_max),
        })
    return out


# --------------------------------------------------------------------------- scontrol


_JOB_HEAD = re.compile(
    r"JobId=(\d+)(?: ArrayJobId=(\d+) ArrayTaskId=(\S+)(?: ArrayTaskThrottle=\d+)?)?"
    r"(?: HetJobId=\d+ HetJobOffset=\d+(?: HetJobIdSet=\S+)?)? JobName="
)
_USER = re.compile(r" UserId=([^\s()]*)\((\d+)\) GroupId=")
_KEY = re.compile(r"(?:^| +)([A-Za-z][A-Za-z0-9_:/]*)=")
_DETAIL = re.compile(r" +Nodes=(\S+) CPU_IDs=\S* Mem=\S* GRES=(\S*)")


def _fields(text: str) -> dict[str, str]:
    """``Key=value Key=value ...`` -> {key: value} (a value may hold spaces); the first
    of a repeated key wins."""
    out: dict[str, str] = {}
    keys = list(_KEY.finditer(text))
    for i, m in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(text)
        out.setdefault(m.group(1), text[m.end():end].strip(" "))
    return out


def parse_job(text: str, name: str | None = None, node: str | None = None) -> Json | None:
    """The first record of ``scontrol show job -o -d JOB``, knowing the job's exact
    ``name`` (parse_queue's). Without it, the record is read only where the name cannot
    be mistaken (no ``UserId=`` and no newline in it). None when it is not such a record.

    {"job_id", "array_job_id", "array_task_id", "name", "user", "uid", "state",
     "partition", "nodes", "end_time", "gpus": [INDEX] on ``node`` (None without a
     node, when the detail does not say, or once the job is no longer in DETAIL_STATES),
     "gpus_by_nodes": {host list: [INDEX]} as printed}."""
    head = _JOB_HEAD.match(text)
    if not head:
        return None
    rest = text[head.end():]
    if name is not None:
        if not rest.startswith(name):
            return None
        after = rest[len(name):]
    else:
        found = list(_USER.finditer(rest))
        if len(found) != 1 or "\n" in rest[: found[0].start()]:
            return None
        name, after = rest[: found[0].start()], rest[found[0].start():]
    user = _USER.match(after)
    if not user:
        return None
    # Slurm's own fields up to MinCPUsNode=: no free text is printed among them (the
    # comment, command, work dir and output paths come after)
    body = after.split("\n", 1)[0]
    cut = body.find(" MinCPUsNode=")
    body = body if cut < 0 else body[:cut]
    f = _fields(body)
    state = f.get("JobState", "")
    if not re.fullmatch(r"[A-Z_]+", state):
        return None
    by_nodes: dict[str, list[int]] = {}
    detail_ok = True
    for m in _DETAIL.finditer(body):
        idx = gpu_indexes(m.group(2))
        if idx is None:
            detail_ok = False
            continue
        by_nodes[m.group(1)] = idx
    gpus = None
    if node is not None and detail_ok and by_nodes and state in DETAIL_STATES:
        gpus = sorted({i for nodes, idx in by_nodes.items() if in_hostlist(node, nodes)
                       for i in idx})
    array_task = _int(head.group(3))
    return {
        "job_id": int(head.group(1)),
        "array_job_id": _int(head.group(2)) if array_task is not None else None,
        "array_task_id": array_task,
        "name": cap(name, NAME_MAX),
        "user": cap(user.group(1), TEXT_MAX),
        "uid": int(user.group(2)),
        "state": state,
        "partition": cap(f.get("Partition", ""), TEXT_MAX),
        "nodes": cap(f.get("NodeList", ""), TEXT_MAX),
        "end_time": slurm_time(f.get("EndTime")),
        "gpus": gpus,
        "gpus_by_nodes": by_nodes,
    }


_NODE_REASON = re.compile(r" Reason=(.*?)(?: \[([^\]@\s]*)@([^\]\s]*)\])?\s*$", re.S)


def parse_node(text: str) -> Json | None:
    """``scontrol show node -o NODE`` -> {"node", "state" (``MIXED+DRAIN``), "base"
    (``MIXED``), "flags" ([``DRAIN``]), "responding" (False for ``IDLE*``), "drain":
    bool, "reason", "reason_user", "reason_time" (epoch)}, or None."""
    m = re.match(r"NodeName=(\S+) ", text)
    if not m:
        return None
    # the reason (an admin's text, gpudash's own drain too) comes last and may hold anything
    r = _NODE_REASON.search(text)
    head = text[: r.start()] if r else text
    state = _fields(head.split("\n", 1)[0]).get("State", "")
    if not re.fullmatch(r"[A-Z_]+\*?(?:\+[A-Z_]+\*?)*[*~#!%$@^-]?", state):
        return None
    parts = state.split("+")
    base = parts[0].rstrip("*~#!%$@^-")
    flags = [p.rstrip("*~#!%$@^-") for p in parts[1:]]
    return {
        "node": cap(m.group(1), TEXT_MAX),
        "state": state,
        "base": base,
        "flags": flags,
        "responding": "*" not in state,
        "drain": "DRAIN" in flags or base in ("DRAIN", "DRAINED", "DRAINING"),
        "reason": cap(r.group(1), TEXT_MAX) if r else None,
        "reason_user": cap(r.group(2), TEXT_MAX) if r and r.group(2) is not None else None,
        "reason_time": slurm_time(r.group(3)) if r else None,
    }


# --------------------------------------------------------------------------- reading


def find_tool(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """``name`` in PATH's absolute directories, else in SLURM_BIN_DIRS (an Epilog has no
    PATH). An empty or relative PATH entry means the working directory, which is never
    searched: an Epilog runs as root in a directory others may write to."""
    env = os.environ if environ is None else environ
    dirs = [d for d in env.get("PATH", "").split(os.pathsep) if d.startswith("/")]
    for d in [*dirs, *SLURM_BIN_DIRS]:
        path = os.path.join(d, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def local_node(environ: Any = None) -> str:
    """This node's Slurm name: SLURMD_NODENAME (an Epilog's), else the short host name
    (slurmd's default NodeName)."""
    env = os.environ if environ is None else environ
    return env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def _call(argv: list[str], timeout: float) -> tuple[str, str | None]:
    """(stdout, error text or None) of one bounded call."""
    what = " ".join(a for a in argv[:3] if not a.startswith("-"))
    tool = find_tool(argv[0])
    if tool is None:
        return "", f"{argv[0]} not found (PATH, {', '.join(SLURM_BIN_DIRS)}): Slurm unknown"
    try:
        done = subprocess.run([tool, *argv[1:]], capture_output=True, text=True,
                              encoding="utf-8", errors="replace", timeout=max(0.1, timeout),
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return "", f"{what}: no answer in {timeout:g}s"
    except (OSError, subprocess.SubprocessError) as exc:
        return "", cap(f"{what} failed: {exc}", ERROR_MAX)
    if done.returncode != 0:
        said = " ".join(done.stderr.split()) or f"exit {done.returncode}"
        if said.startswith(argv[0] + ": "):  # squeue's own "squeue: error: ..."
            said = said[len(argv[0]) + 2:]
        return done.stdout, cap(f"{what}: {said}", ERROR_MAX)
    return done.stdout, None


def read_jobs(node: str | None = None, timeout_s: float = CALL_TIMEOUT_S,
              budget_s: float = READ_BUDGET_S) -> Json:
    """The jobs Slurm has on ``node`` (default: this one), ended ones it still remembers
    included: {"node", "jobs": [parse_queue's dict + "gpus": this node's GPU indexes
    (None where Slurm does not say: a job not in DETAIL_STATES), "gpus_by_nodes"],
    "error": text or None (the first thing that went wrong; what was read is kept)}."""
    node = node or local_node()
    deadline = time.monotonic() + budget_s
    mark = "@gpudash:" + os.urandom(8).hex() + ":"
    text, error = _call(["squeue", "-h", "-t", "all", "-w", node, "-o", queue_format(mark)],
                        timeout_s)
    if error is not None:
        return {"node": node, "jobs": [], "error": error}
    jobs = parse_queue(text, mark, name_max=None)  # exact names: parse_job matches them
    read = 0
    for job in jobs:
        job["gpus"], job["gpus_by_nodes"] = None, {}
        if job["state"] not in ACTIVE_STATES or read >= MAX_JOBS:
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            error = error or f"scontrol show job: read budget of {budget_s:g}s spent"
            continue
        read += 1
        spec = (f"{job['array_job_id']}_{job['array_task_id']}"
                if job["array_task_id"] is not None else str(job["job_id"]))
        out, err = _call(["scontrol", "show", "job", "-o", "-d", spec], min(timeout_s, left))
        rec = parse_job(out, job["name"], node) if err is None else None
        if rec is not None and rec["job_id"] == job["job_id"]:
            job["state"] = rec["state"]
            job["end_time"] = rec["end_time"]
            job["nodes"] = rec["nodes"] or job["nodes"]
            job["gpus"], job["gpus_by_nodes"] = rec["gpus"], rec["gpus_by_nodes"]
        elif err is not None and "Invalid job id" not in err:
            error = error or err  # a job that ended since squeue listed it is no error
    for job in jobs:
        job["name"] = cap(job["name"], NAME_MAX)
    return {"node": node, "jobs": jobs, "error": error}


def read_node(node: str | None = None, timeout_s: float = CALL_TIMEOUT_S) -> Json:
    """{"node": parse_node's dict or None, "error": text or None} for ``node`` (default:
    this one)."""
    node = node or local_node()
    text, error = _call(["scontrol", "show", "node", "-o", node], timeout_s)
    if error is not None:
        return {"node": None, "error": error}
    facts = parse_node(text)
    return {"node": facts, "error": None if facts else
            cap(f"scontrol show node {node}: not a node record", ERROR_MAX)}
