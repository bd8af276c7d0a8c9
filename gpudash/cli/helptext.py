"""What each command's --help says of it: its description and its examples (one source:
the parsers in ``args`` read them)."""

from __future__ import annotations

DESCRIPTIONS = {
    "reclaim": "Stop and disable a unit (or stop a container and turn its restart policy "
    "off), reap what is left of it, wait until its GPU memory is back, print a per-GPU "
    "report. Exit 0 only if confirmed free.",
    "reap": "Signal every orphaned process that holds GPU memory on each HOST (of one "
    "unit or container, if named): left from an earlier run of a service, escaped from a "
    "container, or a model server's engine and workers whose API server is gone. Each "
    "host is planned, confirmed, signalled (TERM, then KILL) only if each process is "
    "still the one planned, and followed until its memory is back. Exit 0 when every "
    "host's memory came back or it had nothing to reap.",
    "start": "Start a unit (and enable it) and follow it loading until it serves: active "
    "without restarts, memory steady, its ready URL answering on the host. A crash loop "
    "is stopped and explained by its log line. Exit 0 only if serving.",
    "fix": "Remove the cause of the trap from a unit's configuration: write one drop-in of "
    "gpudash's own (/etc/systemd/system/UNIT.d/50-gpudash.conf) with the settings that "
    "remove every finding of the unit lint (KillMode, start limits, RestartSec, "
    "TimeoutStopSec, SendSIGKILL), shown first as a diff of `systemctl cat UNIT`; `systemctl "
    "daemon-reload`; then prove that `systemctl show` reports them. The unit keeps "
    "running. --revert removes exactly that file. Exit 0 only if confirmed.",
    "exporter": "Follow the hosts and expose their triage as Prometheus metrics: GPU memory "
    "used/total, orphaned memory per GPU and unit, restarts, crash loops, link up. Only "
    "looks (every host read-only). Runs until SIGTERM or Ctrl+C.",
    "reset": "Give back the memory no process holds on one GPU (a driver-level leak): "
    "nvidia-smi --gpu-reset -i N, planned only where nothing holds the GPU (no process in "
    "NVML's list, none with its /dev/nvidia file, every process visible), MIG is off and no "
    "display is on it; refused with the reason otherwise (the process that holds it, "
    "named). Exit 0 only if the GPU's memory came back to its baseline.",
    "drain": "Drain the host's Slurm node with a reason, for the operator who decides it "
    "is unhealthy: Slurm starts no new job there and lets the running ones finish (a drain "
    "ends none of them; the plan names them). The reason Slurm is given says gpudash and "
    "who drained. Refused where the host is no Slurm node, Slurm does not answer, or the "
    "node is drained already. Exit 0 only if `scontrol show node` reports DRAIN with that "
    "reason.",
    "resume": "Resume the host's drained Slurm node: it takes jobs again (the plan names "
    "any GPU memory no running job has, which the next job would be given). Refused where "
    "the node is not drained. Exit 0 only if `scontrol show node` no longer reports DRAIN.",
    "swap": "Reclaim one model (a unit, or a container with --from-container) with proof, "
    "check the next one fits, start it and prove it serves. Exit 0 only if the old memory "
    "came back and the new model serves.",
}


EXAMPLES = {
    "": """examples:
  gpudash --demo                      the simulated incident, every key works
  gpudash root@10.1.230.174           one host over SSH (~/.ssh/config honoured)
  gpudash gpu01 gpu02 'gpu1*'         several hosts: the fleet table first
  gpudash                             this machine, no SSH""",
    "snapshot": """examples:
  gpudash snapshot --demo
  gpudash snapshot gpu01 gpu02 --json | jq '.hosts[].owners[].key'""",
    "reclaim": """examples:
  gpudash reclaim gpu01 --unit vllm-minimax-m25 --dry-run   the plan, nothing sent
  gpudash reclaim gpu01 --unit vllm-minimax-m25 --yes --json > verdict.json
  gpudash reclaim gpu01 --container vllm-embed""",
    "start": """examples:
  gpudash start gpu01 --unit vllm-kimi-k25 --enable
  gpudash start gpu01 --unit vllm-kimi-k25 --ready-url http://127.0.0.1:8001/v1/models""",
    "swap": """examples:
  gpudash swap gpu01 --from vllm-minimax-m25 --to vllm-kimi-k25 --dry-run
  gpudash swap gpu01 --from vllm-minimax-m25 --to vllm-kimi-k25 --yes --timeout 1200""",
    "fix": """examples:
  gpudash fix gpu01 --unit vllm-minimax-m25 --dry-run > fix.diff
  gpudash fix gpu01 --unit vllm-minimax-m25 --revert""",
    "reset": """examples:
  gpudash reset gpu01 --gpu 3 --dry-run              what was checked, the plan
  gpudash reset gpu01 --gpu 3 --yes --json > verdict.json""",
    "drain": """examples:
  gpudash drain gpu01 --reason "GPU 3 ECC errors" --dry-run   the plan, nothing sent
  gpudash drain gpu01 --reason "GPU 3 ECC errors" --yes --json > verdict.json""",
    "resume": """examples:
  gpudash resume gpu01 --dry-run
  gpudash resume gpu01 --yes""",
    "reap": """examples:
  gpudash reap gpu01 gpu02 --dry-run                  each host's plan, nothing sent
  gpudash reap localhost --yes --json                  a Slurm epilog or a cron job""",
}
