"""``gpudash reap --slurm-epilog``: Slurm's ``Epilog=``, with proof.

slurmd runs the epilog as root on the node once a job ends, with ``SLURM_JOB_ID``,
``SLURM_JOB_UID``, ``SLURM_JOB_GPUS`` (the node's GPU indexes: ``CUDA_VISIBLE_DEVICES`` is
renumbered under ``ConstrainDevices=yes``), ``SLURMD_NODENAME`` and no ``PATH``. What is
left of the job (its processes that outlived it, whatever holds its GPUs outside any
running job) is planned, signalled with the PID guard and its memory proven back, as every
reap is (one audit record). When the memory is not back the node is drained with
gpudash's own one-line reason (a plain non-zero exit only says "Epilog error" in
``sinfo -R``) and the exit is non-zero, so Slurm does not hand a full GPU to the next job.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
from collections.abc import Mapping

from gpudash.cli.contract import Exit
from gpudash.cli.terminal import Terminal
from gpudash.domain.owners import OwnerRef
from gpudash.domain.owners.slurm_node import DRAIN, REASON_MAX, node_argv, one_line

KIND = "slurm job"  # the owner kind whose leftovers an epilog reaps (a claim's KIND)
# where Slurm's tools are when PATH is empty (an epilog's), after PATH's own
TOOL_DIRS = ("/usr/bin", "/usr/local/bin", "/usr/sbin", "/opt/slurm/bin", "/usr/local/slurm/bin")
DRAIN_TIMEOUT_S = 10.0


class EpilogError(ValueError):
    """What the epilog's environment lacks or says wrong (exit 2, nothing done)."""


def job_of(environ: Mapping[str, str]) -> tuple[str, tuple[int, ...]]:
    """(job id, the node's GPU indexes of the job) from slurmd's environment."""
    job = environ.get("SLURM_JOB_ID", "")
    if not re.fullmatch(r"[0-9]{1,12}", job):
        raise EpilogError("--slurm-epilog: SLURM_JOB_ID is not set to a job id (is this "
                          f"Slurm's Epilog=?): {job[:40]!r}")
    raw = environ.get("SLURM_JOB_GPUS", "").strip()
    if not raw:
        return job, ()
    if not re.fullmatch(r"[0-9]{1,2}(,[0-9]{1,2})*", raw):
        raise EpilogError(f"--slurm-epilog: SLURM_JOB_GPUS is not GPU indexes: {raw[:40]!r}")
    return job, tuple(sorted({int(g) for g in raw.split(",")}))


def prepare(args: argparse.Namespace, environ: Mapping[str, str]) -> tuple[str, ...] | None:
    """Set ``args`` for the epilog (this node, no prompt, the job's leftovers); the job's
    GPUs, or None where it had none (nothing to do)."""
    if args.hosts or args.hosts_file or args.demo:
        raise EpilogError("--slurm-epilog runs on the node itself: no HOST, no --demo")
    job, gpus = job_of(environ)
    args.yes = True
    args.owner = OwnerRef(KIND, job)
    args.gpus = gpus
    return tuple(map(str, gpus)) if gpus else None


def tool(name: str, environ: Mapping[str, str]) -> str | None:
    found = shutil.which(name, path=environ.get("PATH") or None)
    if found:
        return found
    for directory in TOOL_DIRS:
        candidate = os.path.join(directory, name)
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def drain(job: str, why: str, term: Terminal, environ: Mapping[str, str]) -> bool:
    """Drain this node with gpudash's reason; False (said) where it could not. The command
    is the drain action's own (``slurm_node.node_argv``): one node, the reason one line
    and quoted for scontrol."""
    node = environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
    scontrol = tool("scontrol", environ)
    reason = one_line(f"gpudash: job {job} left GPU memory: {why}")[:REASON_MAX].rstrip()
    if scontrol is None:
        term.error(f"could not drain {node}: no scontrol found (PATH or {TOOL_DIRS[0]})")
        return False
    try:
        argv = [scontrol, *node_argv(DRAIN, node, reason)[1:]]
    except ValueError as exc:
        term.error(f"could not drain {node}: {exc}")
        return False
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=DRAIN_TIMEOUT_S,
                              env={"PATH": os.path.dirname(scontrol)}, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        term.error(f"could not drain {node}: {exc}")
        return False
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        term.error(f"could not drain {node}: scontrol said: {said[0] if said else done.returncode}")
        return False
    term.error(f"drained {node}: {reason}")
    return True


def verdict(code: int, job: str, term: Terminal, environ: Mapping[str, str]) -> int:
    """The epilog's exit: the reap's, with the node drained where its memory is not back
    (anything but success after signals were planned)."""
    if code == Exit.OK:
        return code
    why = {Exit.NOT_FREED: "not back after the reap",
           Exit.UNKNOWN: "the reap's outcome is unknown",
           Exit.INTERRUPTED: "the reap was interrupted",
           Exit.NOT_AUDITED: "the reap was refused (no audit record)"}.get(
               Exit(code) if code in Exit._value2member_map_ else Exit.INTERNAL,
               f"the reap failed (exit {code})")
    drain(job, why, term, environ)
    return code
