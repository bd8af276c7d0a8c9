"""The demo's Slurm node: the escaped-scheduler incident (sglang #23627, one layer over).

alice's job 4117 ran SGLang with data parallelism on GPUs 0-3 and ended four minutes ago;
the server she had started from an ssh login during the job (no ``pam_slurm_adopt``) lost
its launcher, and its DP schedulers, re-parented to PID 1, still hold ~90 GiB on each of
those GPUs. Slurm has since given GPUs 0-3 to bob's job 4118, whose training is loading
its weights: it is about to run out of memory. carol's job 4116 runs on GPUs 4-7, as it
should. What the host's collector would send: each job process's claim, and the jobs'
facts as ``scontrol`` says them (the wire's ``owners``). Its slurmctld takes ``scancel``
and a drain or resume of the node (``gpudash drain --demo``, ``N`` on demo-gpu07 of
``gpudash --demo --demo-hosts 7``).
"""

from __future__ import annotations

from typing import Protocol

from gpudash.demo.incident import MINIMAX
from gpudash.demo.sim import HostSimulation
from gpudash.domain.owners import OwnerCapability, rules_of
from gpudash.domain.owners.slurm_node import DRAIN, node_argv
from gpudash.protocol.source import CommandResult


class SlurmNode(Protocol):
    """What a Slurm scenario needs of a demo host (``DemoHost`` is one)."""

    name: str
    sim: HostSimulation

    async def systemctl(self, verb: str, unit: str) -> CommandResult: ...

KIND = "slurm job"
ESCAPED_MIB = 92_160  # each DP scheduler's share of its GPU
LOADING_MIB = 6_144  # bob's training, a minute into loading
EVAL_MIB = 61_440
SESSION = "session-12.scope"


async def play(host: SlurmNode) -> None:
    """Bring ``host`` to the moment the next job is about to run out of memory."""
    await host.systemctl("stop", MINIMAX)  # a Slurm node: no model served by systemd
    await host.systemctl("disable", MINIMAX)
    # nothing of the incident's host is left, not even memory on its way back: as if
    # the node had been drained and rebooted before these jobs
    host.sim.processes.clear()
    host.sim._releases.clear()  # the demo's own world
    node = host.name
    scope = f"{node}_slurmstepd.scope"
    epoch = host.sim.boot_epoch + host.sim.now()
    for dp in range(4):
        host.sim.spawn(ppid=1, user="alice", name=f"sglang::scheduler_DP{dp}",
                   cmdline=f"sglang::scheduler_DP{dp}", unit=SESSION, age=1500,
                   gpu_memory_mib={dp: ESCAPED_MIB}, cpu_pct=0.0, rss_mib=9000)
    train = host.sim.spawn(ppid=1, user="bob", name="python", unit=scope, age=60,
                       cmdline="python train.py --model llama-3-70b --fsdp 4",
                       cpu_pct=180.0, rss_mib=24_000,
                       gpu_memory_mib={g: LOADING_MIB for g in range(4)})
    train.claim = f"{KIND}:4118"
    for g in range(4, 8):
        p = host.sim.spawn(ppid=1, user="carol", name="python", unit=scope, age=3600,
                       cmdline=f"python -m lm_eval --device cuda:{g - 4}", cpu_pct=99.0,
                       gpu_memory_mib={g: EVAL_MIB})
        p.claim = f"{KIND}:4116"
    host.sim.owners = {KIND: {
        "": {"node": node, "node_state": "MIXED"},
        "4116": {"user": "carol", "uid": 1003, "name": "eval-harness", "state": "RUNNING",
                 "partition": "gpu", "gpus": [4, 5, 6, 7]},
        # ended: scontrol no longer says its GPUs; the collector remembers them
        "4117": {"user": "alice", "uid": 1001, "name": "sglang-dp4", "state": "COMPLETED",
                 "partition": "gpu", "end_time": int(epoch - 240), "gpus": [0, 1, 2, 3]},
        "4118": {"user": "bob", "uid": 1002, "name": "llama-ft", "state": "RUNNING",
                 "partition": "gpu", "gpus": [0, 1, 2, 3]},
    }}


def command(host: SlurmNode, kind: str, verb: str, key: str, refused: str | None
            ) -> CommandResult:
    """An owner kind's command on the demo host: ``scancel JOB``, as its rules build it;
    slurmd ends the job's processes (their memory comes back at the driver's pace) and
    Slurm says the job CANCELLED."""
    rules = rules_of(kind)
    try:
        argv = None if rules is None else rules.command(OwnerCapability(verb), key)
    except ValueError:
        argv = None
    if argv is None:
        return CommandResult((kind, verb, key), 2, f"refused: {kind} has no {verb!r}")
    if refused is not None:
        return CommandResult(argv, 1, refused)
    jobs = host.sim.owners.get(KIND, {})
    job = jobs.get(key)
    if job is None or job.get("state") not in ("RUNNING", "SUSPENDED"):
        return CommandResult(argv, 1, f"scancel: error: Kill job error on job id {key}: "
                                      "Job/step already completing or completed")
    # a new object: the stream's patches skip what is the same object as before
    host.sim.owners = {KIND: {**jobs, key: {**job, "state": "CANCELLED"}}}
    for p in [p for p in host.sim.processes.values() if p.claim == f"{KIND}:{key}"]:
        host.sim.die(p)
    return CommandResult(argv, 0, "")


def node_state(host: SlurmNode, verb: str, node: str, reason: str | None,
               refused: str | None) -> CommandResult:
    """``scontrol update NodeName=NODE State=DRAIN|RESUME``, as the demo's slurmctld takes
    it: the node's state and reason change (its jobs run on: a drain ends none)."""
    try:
        argv = node_argv(verb, node, reason)
    except ValueError as exc:
        return CommandResult(("scontrol", "update"), 2, f"refused: {exc}")
    if refused is not None:
        return CommandResult(argv, 1, refused)
    section = host.sim.owners.get(KIND, {})
    here = section.get("")
    if here is None:
        return CommandResult(argv, 127, "scontrol: command not found (this demo host is no "
                                        "Slurm node)")
    if here.get("node") != node:
        return CommandResult(argv, 1, "slurm_update error: Invalid node name specified")
    drained = bool(here.get("drain"))
    if verb != DRAIN and not drained:
        return CommandResult(argv, 1, "slurm_update error: Invalid node state specified")
    busy = any(j.get("state") == "RUNNING" for k, j in section.items() if k)
    base = "MIXED" if busy else "IDLE"
    now = {k: v for k, v in here.items() if k not in ("drain", "reason", "node_state")}
    if verb == DRAIN:
        now.update(node_state=f"{base}+DRAIN", drain=True, reason=reason)
    else:
        now.update(node_state=base, drain=False)
    # a new object: the stream's patches skip what is the same object as before
    host.sim.owners = {KIND: {**section, "": now}}
    return CommandResult(argv, 0, "")
