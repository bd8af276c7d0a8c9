"""What each field of the ``--json`` snapshot (``render.jsondoc``) means, in words.

One entry per field of each object of the document, keyed by the object's path
(``hosts[].gpus[]``: each GPU of each host). docs/reference/JSON.md is generated from this
table and from real documents (``python -m gpudash.cli.reference``); its test fails when
the document has a field this table does not describe, or this table describes a field
the document no longer has. Add the field's meaning here when you add it to the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

_NA = " (null: N/A)"

_FIELDS: dict[str, dict[str, str]] = {
    "": {
        "schema": "the document's schema number: fields are only ever added within it",
        "hosts": "one object per host, in the order given; a host that could not be read "
        "too, with its error",
    },
    "hosts[]": {
        "name": "the host as given (or as a glob found it)",
        "error": "only on a host that could not be read (exit 3): why; its lists are empty "
        "and nothing else is written",
        "taken_at": "when the host took the snapshot, epoch seconds of the host's clock",
        "boot_id": "the host's `/proc/sys/kernel/random/boot_id`: a pid's start time is "
        "only its identity within one boot" + _NA,
        "source": "where the GPU facts came from: `nvml`, `nvidia-smi`, `shell` (no python3 "
        "on the host: degraded), `none` (no NVML and no nvidia-smi: degraded, the reason "
        "in `errors`, exit 1) or `demo`",
        "degraded": "true when the collector is degraded: no python3 on the host, or no "
        "NVML and no nvidia-smi (`source` says which)",
        "errors": "what the collector could not read, one line each",
        "can_act": "whether actions can be sent to this host",
        "cannot_act_reason": "why not, when `can_act` is false" + _NA,
        "cpu_pct": "the host's CPU use, % of all its CPUs" + _NA,
        "mem_used_mib": "the host's RAM in use, MiB" + _NA,
        "mem_total_mib": "the host's RAM, MiB" + _NA,
        "pid_view": "which processes the collector sees: `full`, `hidepid` (/proc mounted "
        "so: other users' hidden from a login that is not root), `namespace` (a child PID "
        "namespace sees only its own)" + _NA,
        "collector_cpu_s": "CPU time the collector and the programs it ran used on the host "
        "since it started (re-read every 10 s)" + _NA,
        "gpus": "the GPUs, as the driver reports them",
        "processes": "the processes that hold GPU memory, and the rest of their units",
        "units": "the systemd units those processes belong to",
        "containers": "what `docker inspect` / `podman inspect` said of the containers the "
        "processes' cgroups name",
        "pods": "the Kubernetes pods the processes' cgroups name",
        "owners": "who owns the processes (a unit, a container, a pod, a session, nobody): "
        "group processes by these, not by `unit`",
    },
    "hosts[].gpus[]": {
        "index": "the GPU's index as the driver numbers it",
        "uuid": "the GPU's UUID (`GPU-…`)" + _NA,
        "name": "the product name" + _NA,
        "memory_total_mib": "memory in all, MiB" + _NA,
        "memory_used_mib": "memory in use, MiB" + _NA,
        "memory_free_mib": "total less used, MiB" + _NA,
        "memory_reserved_mib": "memory the driver reserves, MiB" + _NA,
        "unattributed_mib": "used memory no listed process accounts for, MiB (null where a "
        "holder's memory is unknown)",
        "utilization_pct": "GPU utilisation, %" + _NA,
        "temperature_c": "temperature, °C" + _NA,
        "power_w": "power draw, W" + _NA,
        "power_limit_w": "power limit, W" + _NA,
        "error": "why the GPU could not be read (`GPU is lost`): its row stays, its values "
        "are null",
        "process_list": "whether NVML's list of its compute processes was read: `read`, or "
        "why not (`denied`, `unsupported`, `error`)" + _NA,
        "device_scan": "while memory on it is unexplained (1 GiB or more), what the scan of "
        "every process's `/dev/nvidia*` files and mappings found: `clear` (nobody NVML does "
        "not list), `held` (someone: in `processes` with `device_gpus`), `partial` (some "
        "processes' files not readable); null: not scanned",
        "mig_mode": "MIG mode: `on` or `off`" + _NA,
        "display_active": "whether a display is active on it (the console's GPU): `on` or "
        "`off`" + _NA,
        "persistence_mode": "persistence mode: `on` or `off`" + _NA,
        "unheld": "memory no process holds on it (256 MiB or more unattributed), and what "
        "was checked on the host to say so; null where there is none",
    },
    "hosts[].gpus[].unheld": {
        "mib": "used memory no listed process accounts for, MiB",
        "checks": "what was checked, one line each: NVML's process list, the `/dev/nvidia*` "
        "scan, which processes the collector sees",
        "holders": "who holds the GPU all the same: a process NVML lists on it (one it "
        "cannot read too), one holding its device file",
        "blockers": "why `gpudash reset` will not reset it, one line each, the one that "
        "matters first; empty: nothing holds it",
        "resettable": "true when `blockers` is empty: `gpudash reset HOST --gpu N` plans it",
        "notes": "what its reset plan says besides (persistence mode)",
    },
    "hosts[].processes[]": {
        "pid": "process id",
        "ppid": "parent process id" + _NA,
        "start_ticks": "start time in clock ticks since boot (`/proc/PID/stat` field 22): "
        "with `pid`, the process's identity; every signal is checked against it" + _NA,
        "started_at": "start time, epoch seconds (its age)" + _NA,
        "state": "`R`, `S`, `D`, `Z`, `T`, `I` as in `/proc/PID/stat`" + _NA,
        "user": "its user" + _NA,
        "name": "comm (untrusted host text)",
        "cmdline": "its command line (untrusted host text, at most 4 KiB, cut with "
        "`…[truncated]`)",
        "cgroup": "its cgroup (`/system.slice/vllm-minimax-m25.service`)" + _NA,
        "unit": "its systemd unit (`vllm-minimax-m25.service`, `session-4.scope`, a "
        "container's `docker-<id>.scope`)" + _NA,
        "owner": "the `key` of its entry of `owners`",
        "gpu_memory_mib": "GPU memory it holds per GPU index (a string), MiB; null where "
        "the driver does not say (a device holder)",
        "cpu_pct": "% of one CPU since the collector last read it" + _NA,
        "rss_mib": "resident memory, MiB" + _NA,
        "sm_util_pct": "share of the GPU's SM time it used since the last sample (NVML's "
        "per-process samples; the most on any of its GPUs); 0 when the driver sampled "
        "nothing for it; null where the driver cannot tell (nvidia-smi, older drivers)",
        "device_gpus": "GPUs whose `/dev/nvidia<N>` it holds open or mapped while the "
        "driver does not list it (a device holder)",
        "pgid": "its process group (a model server's processes share one)" + _NA,
        "container_runtime": "what its cgroup says of its container: `docker`, `podman` or "
        "`cri` (a Kubernetes pod's)" + _NA,
        "container_id": "the container's id, from its cgroup; null in a pod (schema 3: the "
        "pod is the owner)" + _NA,
        "pod_uid": "the Kubernetes pod's UID, from its cgroup" + _NA,
        "user_uid": "under a user's own systemd (`user@UID.service`): that user's uid" + _NA,
        "user_unit": "and the unit there" + _NA,
        "unreadable": "listed by the driver, not readable on the host: `gone`, `hidden`, "
        "`denied` or `namespace`" + _NA,
        "claim": "`KIND:KEY`: the owner its cgroup names (`container:docker/ID`, "
        "`container:podman/ID`, `pod:UID`, `slurm job:1234`; schema 3: containers and "
        "pods too)" + _NA,
        "flags": "its triage flags (`ORPHAN`, `RESPAWNED`, …; see the values below)",
        "orphan": "why it is ORPHAN, in words; null when it is not",
    },
    "hosts[].units[]": {
        "name": "the unit's name",
        "active_state": "`active`, `inactive`, `failed`, `activating`, `deactivating`" + _NA,
        "sub_state": "`running`, `dead`, `auto-restart`, …" + _NA,
        "unit_file_state": "`enabled`, `disabled`, `masked`, `static`" + _NA,
        "restart": "`Restart=`: `no`, `always`, `on-failure`, …" + _NA,
        "kill_mode": "`KillMode=`: `control-group`, `process`, `mixed`, `none`" + _NA,
        "n_restarts": "`NRestarts`: automatic restarts since it was last started by "
        "hand" + _NA,
        "main_pid": "its main process (null when systemd reports 0)",
        "control_group": "its cgroup" + _NA,
        "description": "its `Description=`" + _NA,
        "timeout_stop_s": "`TimeoutStopSec`, seconds (null: infinity, or not reported)",
        "restart_s": "`RestartSec`, seconds (null: not reported)",
        "start_limit_interval_s": "`StartLimitIntervalSec`, seconds (0: no start limit; "
        "null: not reported)",
        "start_limit_burst": "`StartLimitBurst`" + _NA,
        "exec_start": "its first `ExecStart`'s argv, joined by spaces" + _NA,
        "send_sigkill": "`SendSIGKILL`: `yes`/`no`" + _NA,
        "cuda_visible_devices": "`CUDA_VISIBLE_DEVICES` from its `Environment=`" + _NA,
    },
    "hosts[].containers[]": {
        "id": "the full container id, as the cgroup path names it",
        "runtime": "`docker` or `podman`",
        "name": "its name" + _NA,
        "image": "its image" + _NA,
        "state": "the runtime's (`running`, `exited`, `restarting`, `paused`, `created`, "
        "`dead`), or `removed`: the runtime said there is no such container any more; "
        "null: not inspected",
        "restart_policy": "`no`, `always`, `unless-stopped`, `on-failure`" + _NA,
        "restart_count": "restarts the runtime made by itself" + _NA,
        "main_pid": "its main process (null when it is not running)",
        "health": "`none` or its health check's status" + _NA,
        "init": "`yes`/`no`: run with `--init`" + _NA,
        "pid_mode": "its PID namespace: `host`, `private`, `container:ID`" + _NA,
        "port": "the host TCP port it publishes (its lowest)" + _NA,
    },
    "hosts[].pods[]": {
        "uid": "the pod's UID, from the cgroup path",
        "namespace": "its namespace, where `crictl pods` answers" + _NA,
        "name": "its name, where `crictl pods` answers" + _NA,
    },
    "hosts[].owners[]": {
        "key": "the owner's key: a unit's name, `docker:NAME`, `podman:NAME`, "
        "`pod:NAMESPACE/NAME` (`pod:UID` where `crictl` does not answer), `slurm:JOBID`, "
        "`no unit`",
        "kind": "`service`, `user service`, `container`, `pod`, `slurm job`, `session`, "
        "`scope` or `no unit`",
        "unit": "its systemd unit (a container's `docker-<id>.scope`)" + _NA,
        "container_id": "a container's id" + _NA,
        "runtime": "a container's runtime" + _NA,
        "pod_uid": "a pod's UID" + _NA,
        "capabilities": "what gpudash can do to it: `stop`, `disable` (for a container: "
        "restart policy off), `remove`, `start`, `reclaim`",
        "respawner": "who brings a killed main process back (`systemd (Restart=always)`, "
        "`docker (restart policy always)`, `the kubelet`); null: nobody",
        "flags": "the owner's flags (as the processes', for the owner as a whole)",
        "gpu_memory_mib": "GPU memory its processes hold per GPU index (a string), MiB",
        "pids": "its processes",
        "warnings": "what to know before acting on it, one line each",
        "lint": "its configuration findings (the unit lint, the container lint): the "
        "settings that set the trap",
        "facts": "what the host says of an owner of a kind with no field above (a Slurm "
        "job's user, partition, state, allocated GPUs), by name; {} for the others",
    },
    "hosts[].owners[].lint[]": {
        "setting": "the setting as systemd (or the container's runtime) names it",
        "why": "what it does, in words",
        "fix": "the directives `gpudash fix` writes to remove it (`[Service] "
        "KillMode=mixed`); empty for a container or a unit's own code",
    },
}

FIELDS: Mapping[str, Mapping[str, str]] = MappingProxyType(
    {obj: MappingProxyType(fields) for obj, fields in _FIELDS.items()})
