"""A real Slurm 22.05 in a lab host (shared/slurm/README.md's recipe, verified there).

One node, named as the lab host (``gpuhostK``), runs Debian's munged, slurmctld and slurmd
(this machine's packages: tests/run.sh installs them) over the lab's overlay root, with
``gres gpu:4`` on ``/dev/nvidia0..3`` char nodes (no driver behind them) and the
stand-in driver's 4 GPUs, whose memory the jobs' processes hold. Every port is on
127.0.0.1 (``CommunicationParameters=NoCtldInAddrAny,NoInAddrAny``, the node name resolves
to it), chosen free at provisioning. Users alice and bob; ``Epilog=`` is EPILOG, a file a
test may replace at any time (``SlurmHost.set_epilog``).

Cgroup mode: Slurm's ``cgroup/v2`` plugin with ``proctrack/cgroup`` and
``ConstrainDevices=yes``, the host booted with cgroup v2 inside and all capabilities (the
eBPF device filter needs them: ``HostSpec(privileged=True)``). This machine's kernel also
has cgroup v1 hierarchies mounted (a hybrid layout), so ``/proc/self/cgroup`` lists them
besides ``0::``, and 22.05's plugin then fatal()s ("Hybrid mode is not supported"):
cgv2only.c (beside this file, compiled here with gcc at the first boot) is preloaded into
slurmd and its slurmstepds and shows them only the ``0::`` line. On a pure cgroup v2
machine it changes nothing. v2 rather than the recipe's v1 mode: it boots to an idle node
in half the time (0.3-0.5 s against 1.4-1.8 s), it is what current sites run, and it
needs no v1 hierarchy of this machine made writable inside the host.

Stdlib only, like lab.py (the pytest fixture is ``slurm_host`` in fixtures.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def _lab() -> Any:
    """tests/lab/lab.py as module ``gpudash_lab`` (the one fixtures.py loads)."""
    if "gpudash_lab" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "gpudash_lab", Path(__file__).resolve().parent / "lab.py")
        assert spec and spec.loader
        mod = importlib.util.module_from_spec(spec)
        sys.modules["gpudash_lab"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["gpudash_lab"]


labmod = _lab()
HERE = Path(__file__).resolve().parent
SHIM_SOURCE = HERE / "cgv2only.c"
SHIM_PATH = "/usr/local/lib/gpulab/cgv2only.so"  # inside the host
GPUS = 4
GPU_NAME = "NVIDIA H100 80GB HBM3"
TOTAL_MIB = 81559
USERS = ("alice", "bob")
PARTITION = "gpu"
EPILOG = "/etc/slurm/epilog.sh"
TRAIN = "/opt/gpulab/slurm/train.py"  # the jobs' payload: holds stand-in memory on one GPU
# gpudash's host-side Slurm reader, run inside by the host's own python3
READER = labmod.REPO / "gpudash" / "collector" / "host" / "slurm.py"
READER_DIR = "/opt/gpulab/gpudash"
SLURM_LOG_DIR = "/var/log/slurm"
NEEDS = ("/usr/sbin/slurmd", "/usr/sbin/slurmctld", "/usr/sbin/munged", "/usr/bin/scontrol",
         "/usr/bin/sbatch", "/etc/munge/munge.key")

# the default epilog: what it was given, and that it ran; a test replaces it (set_epilog)
DEFAULT_EPILOG = f"""#!/bin/sh
{{ echo "== epilog uid $(id -u)"; cat /proc/$$/cgroup; env | sort; }} \\
  >{SLURM_LOG_DIR}/epilog.$SLURM_JOB_ID.log 2>&1
exit 0
"""

TRAIN_PY = """\
# a stand-in CUDA training process: holds stand-in GPU memory on one GPU until it dies
import ctypes, os, sys, time
gpu, mib = int(sys.argv[1]), int(sys.argv[2])
if ctypes.CDLL("libnvidia-ml.so.1").fakegpu_hold(gpu, mib) != 0:
    sys.exit("fakegpu_hold(%d) failed" % gpu)
print("pid %d holds %d MiB on GPU %d" % (os.getpid(), mib, gpu), flush=True)
while True:
    time.sleep(3600)
"""


STOP = "/home/alice/stop-"  # + job id: a train_script job ends when it appears


def stop_file(job: int) -> str:
    return f"{STOP}{job}"


def train_script(gpus: int = 2, mib: int = 30000, name: str = "train") -> str:
    """A batch script: one holder per GPU Slurm gives it, as torchrun would, until
    stop_file(job) appears (then the script ends and Slurm ends what is left of the job:
    COMPLETED). The node's GPU indexes are in SLURM_JOB_GPUS (CUDA_VISIBLE_DEVICES is
    renumbered 0..n-1 under ConstrainDevices=yes)."""
    return f"""#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --gres=gpu:{gpus}
#SBATCH --output=/home/alice/slurm-%j.out
export FAKEGPU_STATE={labmod.FAKEGPU_STATE} FAKEGPU_BIN={labmod.FAKEGPU_BIN}
echo "job $SLURM_JOB_ID: SLURM_JOB_GPUS=$SLURM_JOB_GPUS CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
for g in ${{SLURM_JOB_GPUS//,/ }}; do
  python3 {TRAIN} $g {mib} &
done
until [ -e {STOP}$SLURM_JOB_ID ]; do sleep 0.2; done
"""


def check_available() -> None:
    """Raise LabUnavailable with the reason if the Slurm lab cannot run here."""
    labmod.check_available()
    missing = [p for p in NEEDS if not Path(p).exists()]
    if missing:
        raise labmod.LabUnavailable(
            f"the Slurm lab needs {', '.join(missing)} (apt-get install slurmd slurmctld "
            "slurm-client munge: tests/run.sh does)")
    if not shutil.which("gcc"):
        raise labmod.LabUnavailable("the Slurm lab needs gcc (its cgroup shim is compiled)")


def slurm_spec() -> Any:
    return labmod.HostSpec(units=(), session_procs=(), gpus=GPUS, gpu_name=GPU_NAME,
                           total_mib=TOTAL_MIB, users=USERS, privileged=True)


def build_shim(lab: Any) -> Path:
    """cgv2only.so, compiled once per lab run."""
    out = lab.base_dir / "cgv2only.so"
    if not out.exists():
        tmp = out.with_suffix(".tmp")
        labmod._run(["gcc", "-O2", "-Wall", "-Wextra", "-shared", "-fPIC", "-o", str(tmp),
                     str(SHIM_SOURCE), "-ldl"])
        tmp.replace(out)
    return out


def slurm_conf(node: str, ctld_port: int, slurmd_port: int) -> str:
    return f"""# gpudash lab: one node, every port on 127.0.0.1
ClusterName=gpulab
SlurmctldHost={node}({labmod.LOOPBACK})
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
AuthType=auth/munge
CredType=cred/munge
SlurmUser=slurm
SlurmdUser=root
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile={SLURM_LOG_DIR}/slurmctld.log
SlurmdLogFile={SLURM_LOG_DIR}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait=2
UnkillableStepTimeout=10
MessageTimeout=10
Epilog={EPILOG}
GresTypes=gpu
NodeName={node} NodeAddr={labmod.LOOPBACK} CPUs=2 RealMemory=4000 Gres=gpu:{GPUS} State=UNKNOWN
PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


CGROUP_CONF = """CgroupPlugin=cgroup/v2
ConstrainCores=no
ConstrainRAMSpace=no
ConstrainDevices=yes
"""

_MKNODS = "; ".join(
    [f"[ -e /dev/nvidia{i} ] || mknod -m 666 /dev/nvidia{i} c 195 {i}" for i in range(GPUS)]
    + ["[ -e /dev/nvidiactl ] || mknod -m 666 /dev/nvidiactl c 195 255"])
DEVNODES_UNIT = f"""[Unit]
Description=gpudash lab: /dev/nvidia* char nodes for Slurm's gres (no driver behind them)
DefaultDependencies=no
After=local-fs.target
Before=sysinit.target slurmd.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c '{_MKNODS}'

[Install]
WantedBy=sysinit.target
"""


@dataclass
class SlurmHost:
    """A booted lab host running Slurm, and what the tests do with it."""

    host: Any  # lab.LabHost
    ctld_port: int
    slurmd_port: int
    boot_seconds: float = 0.0  # nspawn start -> the node IDLE

    @property
    def node(self) -> str:
        return str(self.host.name)

    # Slurm's own tools, inside --------------------------------------------
    def scontrol(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.host.exec(["scontrol", *args], check=check, timeout=20)

    def node_state(self) -> str:
        """The node's State in slurmctld (``IDLE``, ``MIXED+DRAIN``, ``IDLE*`` ...). Not
        sinfo's: after a job cancelled while it started, sinfo said ``mixed`` for 30 s and
        more while the node was ``State=IDLE CPUAlloc=0`` and took the next job."""
        cp = self.scontrol("show", "node", "-o", self.node, check=False)
        m = re.search(r" State=(\S+)", cp.stdout)
        return m.group(1) if m and cp.returncode == 0 else ""

    def wait_idle(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        state = ""
        while (state := self.node_state()) != "IDLE":
            if time.monotonic() > deadline:
                logs = self.host.exec(
                    ["sh", "-c", "squeue -h -t all -o '%i %T %N'; scontrol show node -o; "
                     f"tail -n 20 {SLURM_LOG_DIR}/slurmctld.log {SLURM_LOG_DIR}/slurmd.log; "
                     "systemctl --failed --no-pager"],
                    check=False).stdout
                raise labmod.LabError(f"{self.node}: node {state or 'unknown'!r}, not idle "
                                      f"after {timeout}s\n{logs}")
            time.sleep(0.1)

    def sbatch(self, script: str, user: str = "alice") -> int:
        """Submit ``script`` as ``user`` from their home; the job id."""
        path = f"/home/{user}/job-{time.monotonic_ns()}.sbatch"
        self.host._write(path, script, 0o644)
        self.host.exec(["chown", f"{user}:{user}", path])
        cp = self.host.exec(["runuser", "-u", user, "--", "sh", "-c",
                             f"cd ~ && sbatch --parsable {shlex.quote(path)}"])
        return int(cp.stdout.strip().split(";")[0])

    def job_state(self, job_id: int) -> str:
        """JobState (RUNNING, COMPLETING, COMPLETED, ...), or "" once slurmctld forgot it."""
        cp = self.scontrol("show", "job", "-o", str(job_id), check=False)
        m = re.search(r"\bJobState=(\S+)", cp.stdout)
        return m.group(1) if m else ""

    def wait_job(self, job_id: int, *states: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        state = ""
        while (state := self.job_state(job_id)) not in states:
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} is {state or 'gone'!r}, not one of "
                                     f"{states} after {timeout}s")
            time.sleep(0.1)
        return state

    def submit_train(self, gpus: int = 2, mib: int = 30000, timeout: float = 30
                     ) -> tuple[int, dict[int, int]]:
        """A batch job holding ``mib`` on each of ``gpus`` GPUs, once it holds them: its id
        and {pid of each holder: its GPU index}."""
        job = self.sbatch(train_script(gpus, mib))
        self.wait_job(job, "RUNNING", timeout=timeout)
        holders = labmod_wait(lambda: self._holders_of(job, gpus), timeout,
                              f"job {job}'s {gpus} holders")
        return job, holders

    def _holders_of(self, job: int, n: int) -> dict[int, int] | None:
        found = {pid: gpu for pid, gpu in self.compute_apps().items()
                 if f"/job_{job}/" in self.cgroup_text(pid)}
        return found if len(found) == n else None

    # GPUs and processes inside -------------------------------------------
    def compute_apps(self) -> dict[int, int]:
        """{pid: GPU index} of the stand-in's compute processes (nvidia-smi, as a site's
        epilog reads it)."""
        bus = self.host.exec(["nvidia-smi", "--query-gpu=index,pci.bus_id",
                              "--format=csv,noheader"]).stdout
        index = {b.strip(): int(i) for i, b in (ln.split(",") for ln in bus.splitlines() if ln)}
        apps = self.host.exec(["nvidia-smi", "--query-compute-apps=pid,gpu_bus_id",
                               "--format=csv,noheader"]).stdout
        return {int(p): index[b.strip()] for p, b in
                (ln.split(",") for ln in apps.splitlines() if ln.strip())}

    def cgroup_text(self, pid: int) -> str:
        """/proc/PID/cgroup as the host sees it ("" once the process is gone)."""
        cp = self.host.exec(["cat", f"/proc/{pid}/cgroup"], check=False)
        return cp.stdout if cp.returncode == 0 else ""

    def pids_of_user(self, user: str) -> list[int]:
        cp = self.host.exec(["pgrep", "-u", user], check=False)
        return sorted(int(x) for x in cp.stdout.split())

    def escape_over_ssh(self, gpu: int, mib: int, user: str = "alice") -> int:
        """``user`` logs in over ssh (no pam_slurm_adopt: outside every job) and leaves a
        daemon holding ``mib`` on ``gpu``; its pid."""
        tag = f"escape-{time.monotonic_ns()}"
        cmd = (f"FAKEGPU_STATE={labmod.FAKEGPU_STATE} FAKEGPU_BIN={labmod.FAKEGPU_BIN} "
               f"setsid -f python3 {TRAIN} {gpu} {mib} {tag} </dev/null >/dev/null 2>&1")
        cp = self.host.ssh(cmd, user=user, timeout=30)
        if cp.returncode:
            raise labmod.LabError(f"ssh {user}@{self.node}: rc={cp.returncode} {cp.stderr}")
        # the holder itself: its ssh shell and `setsid -f` name the same arguments while
        # they end (two pids were matched once, with three lab modules at a time)
        [pid] = labmod_wait(lambda: self.host.pids_of(f"^python3 {TRAIN} {gpu} {mib} {tag}"),
                            10, "the ssh login's holder")
        labmod_wait(lambda: pid in self.compute_apps(), 10, f"pid {pid} holding GPU {gpu}")
        return pid

    def finish(self, job: int) -> None:
        """Let a train_script job end by itself (its script returns: COMPLETED)."""
        self.host.exec(["runuser", "-u", "alice", "--", "touch", stop_file(job)])

    def read_facts(self) -> dict[str, Any]:
        """gpudash's reader (gpudash/collector/host/slurm.py) run inside by the host's
        python3 with no environment at all (as an Epilog: no PATH): {"jobs": read_jobs(),
        "node": read_node()}."""
        self.host._write(f"{READER_DIR}/gpudash_slurm.py", READER.read_text())
        code = (f"import json, sys; sys.path.insert(0, {READER_DIR!r}); "
                "import gpudash_slurm as s; "
                "print(json.dumps({'jobs': s.read_jobs(), 'node': s.read_node()}))")
        cp = self.host.exec(["env", "-i", "/usr/bin/python3", "-c", code], timeout=60)
        facts: dict[str, Any] = json.loads(cp.stdout)
        return facts

    def set_epilog(self, script: str) -> None:
        """Replace the Epilog (slurmd runs the file anew for every job)."""
        self.host._write(EPILOG, script, 0o755)


def labmod_wait(pred: Any, timeout: float, what: str) -> Any:
    """Poll ``pred`` until truthy; LabError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := pred()):
        if time.monotonic() > deadline:
            raise labmod.LabError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)
    return value


def provision(host: Any, shim: Path) -> tuple[int, int]:
    """Write Slurm's configuration into a provisioned (not booted) host; its two ports."""
    ctld_port = labmod._free_port()
    slurmd_port = labmod._free_port()
    while slurmd_port in (ctld_port, host.ssh_port):
        slurmd_port = labmod._free_port()
    node = host.name
    # NoInAddrAny binds the daemons to what the node name resolves to
    host._write("/etc/hosts", f"127.0.0.1\tlocalhost {node}\n"
                              "::1\tlocalhost ip6-localhost ip6-loopback\n")
    host._write("/etc/slurm/slurm.conf", slurm_conf(node, ctld_port, slurmd_port))
    host._write("/etc/slurm/cgroup.conf", CGROUP_CONF)
    host._write("/etc/slurm/gres.conf", f"AutoDetect=off\nNodeName={node} Name=gpu "
                                        f"File=/dev/nvidia[0-{GPUS - 1}]\n")
    host._write(EPILOG, DEFAULT_EPILOG, 0o755)
    host._write("/etc/systemd/system/gpulab-devnodes.service", DEVNODES_UNIT)
    host._symlink("/etc/systemd/system/sysinit.target.wants/gpulab-devnodes.service",
                  "/etc/systemd/system/gpulab-devnodes.service")
    # the machine's own links to these were dropped with the rest (lab.drop_machine_units)
    for unit in ("munge", "slurmctld", "slurmd"):
        host._symlink(f"/etc/systemd/system/multi-user.target.wants/{unit}.service",
                      f"/lib/systemd/system/{unit}.service")
    dest = host.root_dir / SHIM_PATH.lstrip("/")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(shim, dest)
    host._write("/etc/systemd/system/slurmd.service.d/gpulab-cgv2only.conf",
                f"[Service]\nEnvironment=LD_PRELOAD={SHIM_PATH}\n")
    host._write(TRAIN, TRAIN_PY, 0o644)
    return ctld_port, slurmd_port


def start(lab: Any, timeout: float = 90) -> SlurmHost:
    """Add, provision and boot a Slurm host; returns once its node is idle."""
    check_available()
    shim = build_shim(lab)
    host = lab.add_host(slurm_spec())
    try:
        ctld_port, slurmd_port = provision(host, shim)
        t0 = time.monotonic()
        host.boot(timeout)
        sh = SlurmHost(host, ctld_port, slurmd_port)
        sh.wait_idle(timeout=max(5.0, t0 + timeout - time.monotonic()))
        sh.boot_seconds = time.monotonic() - t0
        return sh
    except BaseException:
        lab.remove(host)
        raise


if __name__ == "__main__":  # boot one, print how to reach it, wait for Enter
    the_lab = labmod.Lab()
    try:
        sh = start(the_lab)
        print(f"{sh.node} idle after {sh.boot_seconds:.2f}s; pid1 {sh.host.pid1}; "
              f"ssh -F {sh.host.ssh_config_path} alice@{sh.host.alias}")
        print(f"inside: nsenter -t {sh.host.pid1} -a sinfo")
        if os.isatty(0):
            input("Enter tears it down ")
    finally:
        the_lab.stop()
