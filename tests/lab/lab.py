#!/usr/bin/env python3
"""Real systemd GPU hosts in containers, for end-to-end tests (see shared/LAB.md).

Each host is a ``systemd-nspawn --boot`` container whose root is an overlay over this
machine's own ``/`` (writes go to a per-host upper dir), sharing the host network, with
its own sshd on 127.0.0.1:<port> (key auth only, per-run host and client keys), the
stand-in NVIDIA driver (tests/fakegpu) installed as the system's, and the incident's
units.  Nothing here ever talks to anything but 127.0.0.1.

CLI::

    python tests/lab/lab.py up --hosts 2 [--dir D]   # boots, prints how to ssh in
    python tests/lab/lab.py status [--dir D]
    python tests/lab/lab.py down [--dir D] [--all]   # default: runs whose owner is gone

Stdlib only (pytest fixtures live in fixtures.py).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
FAKEGPU_SRC = REPO / "tests" / "fakegpu"
BASE_PREFIX = "gpudash-lab-"
DEFAULT_PARENT = Path("/var/tmp")
LOOPBACK = "127.0.0.1"  # the only address anything here ever uses
FAKEGPU_STATE = "/run/fakegpu"  # inside the container: tmpfs, so every boot starts clean
FAKEGPU_BIN = "/usr/local/bin/fakegpu"  # the lib's holders exec it as their watcher
FAKEGPU_ENV = {
    "FAKEGPU_STATE": FAKEGPU_STATE,
    "FAKEGPU_BIN": FAKEGPU_BIN,
    # the collector looks for /dev/nvidia* held by processes NVML does not list: here the
    # stand-in's device files are the ones holders open
    "GPUDASH_NVIDIA_DEV_DIR": FAKEGPU_STATE + "/dev",
}
CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PYPATH = "/opt/gpulab/py"

# A lab host starts what the lab gives it, nothing more: its own units (fakegpu-init, the
# spec's), the units of this machine's install named here, and systemd's static vendor
# wants under /lib (journald, dbus, logind, user sessions). Every other unit this
# machine's /etc enables (*.wants, *.requires, aliases: enablement lives in symlinks
# there) is dropped in the host's upper dir, and every generator is masked (they turn
# /etc/init.d, /etc/rc.local, /etc/fstab, /etc/crypttab into units). A host shares this
# machine's network: a service of the machine started inside binds its ports (a lab host
# was seen running the machine's Prometheus on *:9090), and a list of units to mask
# always lags behind what the machine installs.
WANTED_UNITS = (("multi-user.target.wants", "ssh.service"),)  # (where, unit of /lib)
ENABLEMENT_DIRS = ("etc/systemd/system", "etc/systemd/user")
GENERATOR_DIRS = {  # where systemd looks for generators -> where /etc masks them
    "etc/systemd/system-generators": (
        "etc/systemd/system-generators", "usr/local/lib/systemd/system-generators",
        "usr/lib/systemd/system-generators", "lib/systemd/system-generators"),
    "etc/systemd/user-generators": (
        "etc/systemd/user-generators", "usr/local/lib/systemd/user-generators",
        "usr/lib/systemd/user-generators", "lib/systemd/user-generators"),
}


def enabled_links(root: Path) -> dict[str, str]:
    """Symlinks under ``root``'s /etc/systemd/{system,user} that enable or name a unit
    (every one but masks, which point at /dev/null): path (from root) -> target."""
    out = {}
    for rel in ENABLEMENT_DIRS:
        for d, dirs, files in os.walk(root / rel):
            for name in (*dirs, *files):
                p = Path(d, name)
                if p.is_symlink() and (target := os.readlink(p)) != "/dev/null":
                    out[str(p.relative_to(root))] = target
    return out


def drop_machine_units(root: Path) -> None:
    """Drop what this machine enables and mask its generators, in a host's merged root
    (a lower file removed there is whited out in the upper dir; the machine is untouched)."""
    for rel in enabled_links(root):
        (root / rel).unlink()
    for masks, dirs in GENERATOR_DIRS.items():
        names = {n for d in dirs if (root / d).is_dir() for n in os.listdir(root / d)}
        (root / masks).mkdir(parents=True, exist_ok=True)
        for n in names:
            p = root / masks / n
            if p.is_symlink() or p.exists():
                p.unlink()
            p.symlink_to("/dev/null")


class LabUnavailable(RuntimeError):
    """This machine cannot run the lab (not root, no systemd-nspawn, ...)."""


class LabError(RuntimeError):
    """The lab failed to do something it should be able to do."""


# --------------------------------------------------------------------------- specs


class Unit(Protocol):
    """What a HostSpec's ``units`` hold: the lab writes ``unit_file()`` to
    /etc/systemd/system/<name>, links it into <wanted_by>.wants when ``enabled`` and waits
    for it to be active at boot. UnitSpec (the lab's stand-ins) is one; the real vLLM's
    units (tests/realvllm/scenarios.py, VllmUnit) are another."""

    @property
    def name(self) -> str: ...
    @property
    def enabled(self) -> bool: ...
    @property
    def wanted_by(self) -> str: ...
    def unit_file(self) -> str: ...


@dataclass(frozen=True)
class UnitSpec:
    """A system service in the container. ``program`` is one of payload.MAINS."""

    name: str
    description: str
    argv: tuple[str, ...]  # after /usr/bin/python3
    program: str = ""  # payload main, passed via GPULAB_PROGRAM (doc only)
    gpus: tuple[int, ...] = ()
    mib: int = 0
    restart: str = "no"
    restart_sec: float = 1.0
    kill_mode: str = "control-group"
    timeout_stop_sec: float | None = None
    enabled: bool = True
    wanted_by: str = "multi-user.target"
    env: tuple[str, ...] = ()  # more KEY=VALUE for the payload (GPULAB_STEP_S=2)

    def unit_file(self) -> str:
        env = [
            f"PYTHONPATH={PYPATH}",
            *(f"{k}={v}" for k, v in FAKEGPU_ENV.items()),
            f"GPULAB_GPUS={','.join(map(str, self.gpus))}",
            f"GPULAB_MIB={self.mib}",
            f"GPULAB_PROGRAM={self.program}",
            *self.env,
        ]
        lines = [
            "[Unit]",
            f"Description={self.description}",
            "After=network.target fakegpu-init.service",
            "Wants=fakegpu-init.service",
            "",
            "[Service]",
            "Type=simple",
            "ExecStart=/usr/bin/python3 " + " ".join(shlex.quote(a) for a in self.argv),
            *(f"Environment={shlex.quote(e)}" for e in env),
            f"Restart={self.restart}",
            f"RestartSec={self.restart_sec:g}",
            f"KillMode={self.kill_mode}",
        ]
        if self.timeout_stop_sec is not None:
            lines.append(f"TimeoutStopSec={self.timeout_stop_sec:g}")
        lines += ["", "[Install]", f"WantedBy={self.wanted_by}", ""]
        return "\n".join(lines)


@dataclass(frozen=True)
class SessionProcSpec:
    """A login user's process, started in a logind session scope after boot."""

    user: str
    argv: tuple[str, ...]  # after /usr/bin/python3
    gpus: tuple[int, ...] = (0,)
    mib: int = 1024


VLLM_MINIMAX = UnitSpec(
    name="vllm-minimax-m25.service",
    description="vLLM OpenAI server - MiniMax-M2.5 (TP8)",
    argv=(
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "MiniMax-M2.5",
        "--tensor-parallel-size",
        "8",
        "--host",
        LOOPBACK,
        "--port",
        "8000",
    ),
    program="vllm",
    gpus=(0, 1, 2, 3, 4, 5, 6, 7),
    mib=96801,
    restart="always",
    restart_sec=1,
    kill_mode="process",
)
SGLANG_KIMI = UnitSpec(
    name="sglang-kimi.service",
    description="SGLang server - Kimi-K2 (TP2)",
    argv=(
        "-m",
        "sglang.launch_server",
        "--model-path",
        "moonshotai/Kimi-K2-Instruct",
        "--tp",
        "2",
        "--host",
        LOOPBACK,
        "--port",
        "30000",
    ),
    program="sglang",
    gpus=(6, 7),
    mib=512,
    restart="on-failure",
    restart_sec=2,
)
EMBED_SERVER = UnitSpec(
    name="embed-server.service",
    description="Embedding server - bge-m3",
    argv=("-m", "embed_server", "--model", "BAAI/bge-m3", "--port", "8090"),
    program="embed",
    gpus=(5,),
    mib=512,
    restart="on-failure",
    restart_sec=2,
    kill_mode="control-group",
    timeout_stop_sec=10,
)
ALICE_KERNEL = SessionProcSpec(
    user="alice",
    argv=(
        "-m",
        "ipykernel_launcher",
        "-f",
        "/home/alice/.local/share/jupyter/runtime/kernel-4b1e2f.json",
    ),
    gpus=(0,),
    mib=1024,
)
DEFAULT_UNITS = (VLLM_MINIMAX, SGLANG_KIMI, EMBED_SERVER)
# The next models (payload.model_main: they really load, and answer /health once loaded).
# Kimi fits once MiniMax is gone; DeepSeek wants all of every GPU, and alice's kernel holds
# 1 GiB of GPU0: vLLM's free-memory check fails, exit 1, Restart=always: a crash loop.
VLLM_KIMI = UnitSpec(
    name="vllm-kimi-k25.service",
    description="vLLM OpenAI server - Kimi-K2.5 INT4 (TP8)",
    argv=("-m", "vllm.entrypoints.openai.api_server", "--model", "moonshotai/Kimi-K2.5",
          "--tensor-parallel-size", "8", "--host", LOOPBACK, "--port", "8001"),
    program="model",
    gpus=(0, 1, 2, 3, 4, 5, 6, 7),
    mib=88064,
    restart="always",
    restart_sec=1,
    enabled=False,
)
VLLM_DEEPSEEK = UnitSpec(
    name="vllm-deepseek-v3.service",
    description="vLLM OpenAI server - DeepSeek-V3 (TP8)",
    argv=("-m", "vllm.entrypoints.openai.api_server", "--model", "deepseek-ai/DeepSeek-V3",
          "--tensor-parallel-size", "8", "--host", LOOPBACK, "--port", "8002"),
    program="model",
    gpus=(0, 1, 2, 3, 4, 5, 6, 7),
    mib=97000,
    restart="always",
    restart_sec=1,
    enabled=False,
)
SWAP_UNITS = (*DEFAULT_UNITS, VLLM_KIMI, VLLM_DEEPSEEK)


@dataclass(frozen=True)
class HostSpec:
    units: tuple[Unit, ...] = DEFAULT_UNITS  # UnitSpec, or any other Unit
    session_procs: tuple[SessionProcSpec, ...] = (ALICE_KERNEL,)
    gpus: int = 8
    gpu_name: str = "NVIDIA RTX PRO 6000 Blackwell"
    total_mib: int = 97887
    teardown_ms: int | None = None
    users: tuple[str, ...] = ("operator", "alice")
    # a real dockerd can run inside (shared/LAB.md): all capabilities, no seccomp filter,
    # cgroup v2 inside; docker.service is not enabled: start_docker() starts it
    docker: bool = False
    # the same boot without docker's files: all capabilities, no seccomp filter, cgroup v2
    # inside (tests/lab/slurm.py: slurmstepd loads an eBPF device filter and makes cgroups)
    privileged: bool = False
    # a directory laid over this machine's / beneath the host's upper dir: a test stands
    # in for more of the machine's own configuration with it (a unit it enables, ...)
    machine_layer: str | None = None


# overlay-on-overlay and iptables are not there; /proc/sys is read-only
DOCKER_DAEMON_JSON = (
    '{"storage-driver": "vfs", "iptables": false, "ip-forward": false, "bridge": "none"}\n'
)
DOCKER_IMAGE = "gpulab/base:1"  # docker import of a tarball made on the spot
PODMAN_IMAGE = "localhost/gpulab/base:1"
# the hybrid cgroup layout leaves cgroup v2 without controllers: podman must not set a
# pids limit there (runc: "openat2 .../pids.max: no such file")
PODMAN_RUN_ARGS = ("--pids-limit=0",)
PODMAN_STORAGE_CONF = (
    '[storage]\ndriver = "vfs"\nrunroot = "/run/containers/storage"\n'
    'graphroot = "/var/lib/containers/storage"\n'
)
_ROOTFS_TAR = (  # a rootfs of symlinks into the host's /usr, on stdout as a tar
    "set -e; d=$(mktemp -d); cd $d; mkdir -p usr etc proc sys dev tmp run root; "
    "for l in bin sbin lib lib64; do ln -s usr/$l $l; done; "
    "touch etc/group; echo 'root:x:0:0:root:/root:/bin/sh' > etc/passwd; "
)
# what a container of the lab runs with: the host's /usr (python3, the stand-in driver),
# the stand-in's state, and the host's procfs, so the stand-in records host PIDs as the
# real driver does (tests/fakegpu/README.md, FAKEGPU_HOST_PROC)
DOCKER_RUN_ARGS = (
    "--network", "none",
    "-v", "/usr:/usr:ro",
    "-v", f"{FAKEGPU_STATE}:{FAKEGPU_STATE}",
    "-v", "/proc:/hostproc:ro",
    *(a for k, v in FAKEGPU_ENV.items() for a in ("-e", f"{k}={v}")),
    "-e", "FAKEGPU_HOST_PROC=/hostproc",
)


# The stub modules that make `python3 -m NAME` run a payload main.
STUB_MODULES = {
    "vllm/__init__.py": "",
    "vllm/entrypoints/__init__.py": "",
    "vllm/entrypoints/openai/__init__.py": "",
    "vllm/entrypoints/openai/api_server.py": "import gpulab_payload\ngpulab_payload.vllm_main()\n",
    "sglang/__init__.py": "",
    "sglang/launch_server.py": "import gpulab_payload\ngpulab_payload.sglang_main()\n",
    "embed_server.py": "import gpulab_payload\ngpulab_payload.embed_main()\n",
    "ipykernel_launcher.py": "import gpulab_payload\ngpulab_payload.kernel_main()\n",
}

# --------------------------------------------------------------------------- helpers


def _run(cmd: list[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    cp = subprocess.run(cmd, **kw)
    if check and cp.returncode != 0:
        raise LabError(f"{shlex.join(cmd)} -> rc={cp.returncode}\n{cp.stdout}\n{cp.stderr}")
    return cp


def check_available() -> None:
    """Raise LabUnavailable with the reason if this machine cannot run the lab."""
    if sys.platform != "linux":
        raise LabUnavailable("lab needs Linux")
    if os.geteuid() != 0:
        raise LabUnavailable("lab needs root (systemd-nspawn, overlay mounts)")
    for tool in ("systemd-nspawn", "nsenter", "ssh", "ssh-keygen", "mount", "umount"):
        if not shutil.which(tool):
            raise LabUnavailable(
                f"lab needs {tool} (apt-get install systemd-container "
                "openssh-server openssh-client util-linux)"
            )
    if not Path("/usr/sbin/sshd").exists():
        raise LabUnavailable("lab needs /usr/sbin/sshd (apt-get install openssh-server)")
    if not Path("/lib/systemd/systemd").exists():
        raise LabUnavailable("lab needs systemd installed on this machine's root")
    if not Path("/sys/fs/cgroup").is_dir() or not os.listdir("/sys/fs/cgroup"):
        raise LabUnavailable("lab needs a cgroup hierarchy mounted at /sys/fs/cgroup")
    problem = overlay_problem()
    if problem:
        raise LabUnavailable(problem)


def tmp_binds() -> list[str]:
    """This checkout and its Python, where they live under /tmp: a lab host's root is
    this machine's / but its /tmp is its own (nspawn mounts a tmpfs there), and a host
    runs gpudash from the checkout (the Slurm epilog, the exporter unit)."""
    out: list[str] = []
    for p in (REPO, Path(sys.prefix).resolve(), Path(sys.executable).resolve().parent):
        if p.is_relative_to("/tmp") and not any(p.is_relative_to(q) for q in out):
            out.append(str(p))
    return out


def overlay_problem(filesystems: Path = Path("/proc/filesystems")) -> str | None:
    """Why overlay mounts cannot work here, or None.

    /proc/filesystems lists overlay only once its module is loaded, which on a fresh
    machine happens at the first overlay mount: so try one for real before giving up.
    """
    if "overlay" in filesystems.read_text():
        return None
    if shutil.which("modprobe"):
        subprocess.run(["modprobe", "overlay"], capture_output=True, timeout=30)
    probe = Path(tempfile.mkdtemp(prefix="gpudash-overlay-probe-"))
    try:
        for d in ("lower", "upper", "work", "merged"):
            (probe / d).mkdir()
        opts = f"lowerdir={probe / 'lower'},upperdir={probe / 'upper'},workdir={probe / 'work'}"
        cp = subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o", opts, str(probe / "merged")],
            capture_output=True, text=True, timeout=30,
        )
        if cp.returncode != 0:
            return f"lab needs overlayfs (a test mount failed: {cp.stderr.strip()[:200]})"
        subprocess.run(["umount", str(probe / "merged")], capture_output=True, timeout=30)
        return None
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


# The ports the lab's services listen on ("--port N" in a UnitSpec's argv) are moved by an
# offset of the host's own: lab hosts share this machine's network, so two hosts running
# MiniMax (a module's three hosts, a helper's lab beside CI's) both wanted 127.0.0.1:8000,
# one of them silently did without, and its swap's rollback was proven by the other's
# answer (refused, rightly: "who answers cannot be told"). ``LabHost.port(8000)`` says
# where a host's own listens.
PORT_OFFSET_STEP = 20
PORT_AVOID = frozenset({9090, 9093, 9100, 9835, 6817, 6818, 6819})  # prometheus & co, slurm


def spec_ports(units: tuple[Unit, ...]) -> set[int]:
    """The ports the lab's stand-in units are given (``--port N``)."""
    out: set[int] = set()
    for u in units:
        argv = getattr(u, "argv", ())
        out |= {int(argv[i + 1]) for i, a in enumerate(argv[:-1]) if a == "--port"}
    return out


PORT_LOW, PORT_HIGH = 1025, 60999  # where a moved port may land


def pick_port_offset(ports: set[int], taken: set[int]) -> int:
    """An offset that puts every one of ``ports`` on a free port of this machine, clear of
    other hosts' (``taken``) and of well-known services', at least 1000 away (up or down:
    the real vLLM's units are given free ports already, as high as 60333 was seen, and an
    offset only upwards found none for them)."""
    import random

    if not ports:
        return 0
    lo = -((min(ports) - PORT_LOW) // PORT_OFFSET_STEP)  # (steps down, then up, that fit)
    hi = (PORT_HIGH - max(ports)) // PORT_OFFSET_STEP
    steps = [k for k in range(lo, hi + 1) if abs(k) >= 50]
    random.shuffle(steps)  # (two labs on one machine seldom pick the same)
    for k in steps:
        offset = PORT_OFFSET_STEP * k
        moved = {p + offset for p in ports}
        if not moved & (taken | PORT_AVOID) and not any(port_listening(p) for p in moved):
            return offset
    raise LabError(f"no free ports for a lab host's services {sorted(ports)}")


def moved_ports(unit: Unit, offset: int) -> Unit:
    """``unit`` with its ``--port N`` moved by ``offset`` (a UnitSpec; others as they are)."""
    if not isinstance(unit, UnitSpec) or not offset:
        return unit
    argv = list(unit.argv)
    for i, a in enumerate(argv[:-1]):
        if a == "--port":
            argv[i + 1] = str(int(argv[i + 1]) + offset)
    return replace(unit, argv=tuple(argv))


def port_listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex((LOOPBACK, port)) == 0


def mounts_under(path: Path) -> list[str]:
    p = str(path).rstrip("/") + "/"
    out = []
    for line in Path("/proc/mounts").read_text().splitlines():
        mp = line.split()[1].encode().decode("unicode_escape")
        if mp == p[:-1] or mp.startswith(p):
            out.append(mp)
    return out


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # zombies count as dead
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            txt = Path(f"/proc/{pid}/task/{t}/children").read_text()
            out += [int(x) for x in txt.split()]
    except OSError:
        pass
    return out


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def _cgroup_roots() -> list[Path]:
    """Hierarchies where nspawn puts its payload/supervisor cgroups (next to its own)."""
    cg = Path("/sys/fs/cgroup")
    if (cg / "cgroup.procs").exists():  # pure cgroup v2
        return [cg]
    return [cg / h for h in ("systemd", "unified") if (cg / h / "cgroup.procs").exists()]


def _cgroup_dirs(tag: str) -> list[Path]:
    return [r / tag for r in _cgroup_roots()]


def _cgroup_pids(tag: str) -> set[int]:
    pids: set[int] = set()
    for top in _cgroup_dirs(tag):
        for d, _, files in os.walk(top):
            if "cgroup.procs" in files:
                try:
                    pids |= {int(x) for x in Path(d, "cgroup.procs").read_text().split()}
                except OSError:
                    pass
    return pids


def _kill_cgroup(tag: str, timeout: float = 10) -> int:
    """SIGKILL every process in a host's cgroups until none is left; returns how many."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        pids = {p for p in _cgroup_pids(tag) if _pid_alive(p)}
        if not pids:
            return len(killed)
        if time.monotonic() > deadline:
            raise LabError(f"processes of {tag} do not die: {sorted(pids)}")
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
                killed.add(p)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def _remove_cgroups(tag: str) -> None:
    """rmdir a lab cgroup subtree bottom-up (only empty cgroups can go)."""
    for top in _cgroup_dirs(tag):
        if not top.is_dir():
            continue
        for _ in range(50):
            dirs = sorted(
                (Path(d) for d, _, _ in os.walk(top)), key=lambda p: len(p.parts), reverse=True
            )
            for d in dirs:
                try:
                    d.rmdir()
                except OSError:
                    pass
            if not top.exists():
                break
            time.sleep(0.05)


def fakegpu_dir(build_parent: Path = DEFAULT_PARENT) -> Path:
    """Build tests/fakegpu (once per source state) and return the dir with its outputs."""
    explicit = os.environ.get("GPUDASH_FAKEGPU_DIR")
    if explicit:
        d = Path(explicit)
        if not (d / "fakegpu").exists():
            raise LabError(f"GPUDASH_FAKEGPU_DIR={d} has no fakegpu binary")
        return d
    if not (FAKEGPU_SRC / "Makefile").exists():
        raise LabError(f"{FAKEGPU_SRC}/Makefile missing: the stand-in driver is not in this tree")
    # the stand-in's own build (tests/fakegpu/harness.py): make, one at a time across
    # processes (the lab tests run on several workers, each with its own Lab); nvml.h comes
    # from the nvidia-nvml-dev wheel in the interpreter running the tests (the venv)
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpudash_fakegpu_harness",
                                                  FAKEGPU_SRC / "harness.py")
    assert spec is not None and spec.loader is not None
    harness = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(harness)
    try:
        return harness.build(FAKEGPU_SRC / "build")
    except RuntimeError as e:
        raise LabError(str(e)) from None


# --------------------------------------------------------------------------- host


@dataclass
class LabHost:
    lab: Lab
    index: int
    spec: HostSpec
    name: str  # hostname inside: gpuhostK
    alias: str  # ssh alias in ssh_config: labhostK
    ssh_port: int
    dir: Path
    nspawn: subprocess.Popen | None = None
    nspawn_pid: int | None = None
    pid1: int | None = None  # container's PID 1 as this machine sees it
    boot_seconds: float | None = None
    port_offset: int = 0  # its services' ports, moved (see PORT_OFFSET_STEP)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def port(self, port: int) -> int:
        """Where this host's service given ``--port port`` in its spec listens."""
        return port + self.port_offset

    # paths --------------------------------------------------------------
    @property
    def root_dir(self) -> Path:
        return self.dir / "root"

    @property
    def upper_dir(self) -> Path:
        return self.dir / "upper"

    @property
    def cgroup_tag(self) -> str:
        return f"{self.lab.base_dir.name}.{self.name}"

    @property
    def console_log(self) -> Path:
        return self.dir / "console.log"

    @property
    def ssh_config_path(self) -> Path:
        return self.lab.ssh_config_path

    @property
    def known_hosts_path(self) -> Path:
        return self.lab.known_hosts_path

    @property
    def client_key_path(self) -> Path:
        return self.lab.client_key_path

    @property
    def host_key_path(self) -> Path:
        return self.dir / "ssh_host_ed25519_key"

    def ssh_argv(self, *cmd: str, user: str | None = None) -> list[str]:
        """argv for the real ssh client: ``ssh -F cfg [user@]alias CMD...``."""
        target = f"{user}@{self.alias}" if user else self.alias
        return ["ssh", "-F", str(self.ssh_config_path), target, *cmd]

    def ssh(
        self, *cmd: str, user: str | None = None, timeout: float = 20, check: bool = False
    ) -> subprocess.CompletedProcess:
        return _run(
            self.ssh_argv(*cmd, user=user), check=check, timeout=timeout, stdin=subprocess.DEVNULL
        )

    # filesystem setup ---------------------------------------------------
    def _mount(self) -> None:
        for d in ("upper", "work", "root"):
            (self.dir / d).mkdir(parents=True, exist_ok=True)
        if not mounts_under(self.root_dir):
            opts = f"lowerdir={self._lower()},upperdir={self.upper_dir},workdir={self.dir / 'work'}"
            _run(["mount", "-t", "overlay", "overlay", "-o", opts, str(self.root_dir)])

    def _lower(self) -> str:
        """This machine's /, or with a spec's machine_layer: / with the layer over it (an
        overlay of its own, the host's lower: overlayfs refuses a layer inside another)."""
        if not self.spec.machine_layer:
            return "/"
        machine = self.dir / "machine"
        if not mounts_under(machine):
            for d in ("machine", "machine-upper", "machine-work"):
                (self.dir / d).mkdir(exist_ok=True)
            shutil.copytree(self.spec.machine_layer, self.dir / "machine-upper", symlinks=True,
                            dirs_exist_ok=True)
            opts = (f"lowerdir=/,upperdir={self.dir / 'machine-upper'},"
                    f"workdir={self.dir / 'machine-work'}")
            _run(["mount", "-t", "overlay", "overlay", "-o", opts, str(machine)])
        return str(machine)

    def _write(self, rel: str, text: str, mode: int = 0o644) -> Path:
        p = self.root_dir / rel.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.is_symlink():
            p.unlink()
        p.write_text(text)
        os.chmod(p, mode)
        return p

    def _symlink(self, rel: str, target: str) -> None:
        p = self.root_dir / rel.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.is_symlink() or p.exists():
            p.unlink()
        p.symlink_to(target)

    def _provision(self) -> None:
        """Write everything the container needs into its root (goes to the upper dir)."""
        r, spec = self.root_dir, self.spec
        # identity
        self._write("/etc/hostname", self.name + "\n")
        self._write(
            "/etc/hosts",
            f"127.0.0.1\tlocalhost\n127.0.1.1\t{self.name}\n"
            "::1\tlocalhost ip6-localhost ip6-loopback\n",
        )
        (r / "etc/machine-id").unlink(missing_ok=True)
        self._write("/etc/machine-id", uuid.uuid4().hex + "\n", 0o444)
        # systemd: only what the lab gives (WANTED_UNITS), the boot target, env, speed
        drop_machine_units(r)
        self._symlink("/etc/systemd/system/default.target", "/lib/systemd/system/multi-user.target")
        for wants, unit in WANTED_UNITS:
            self._symlink(f"/etc/systemd/system/{wants}/{unit}", f"/lib/systemd/system/{unit}")
        if spec.docker:
            self._write("/etc/docker/daemon.json", DOCKER_DAEMON_JSON)
        self._write(
            "/etc/systemd/system.conf.d/gpulab.conf",
            "[Manager]\n"
            "DefaultEnvironment=" + " ".join(f'"{k}={v}"' for k, v in FAKEGPU_ENV.items()) + "\n"
            "DefaultTimeoutStartSec=30s\n",
        )
        self._write("/etc/systemd/journald.conf.d/gpulab.conf", "[Journal]\nStorage=volatile\n")
        self._write("/etc/environment", "".join(f"{k}={v}\n" for k, v in FAKEGPU_ENV.items()))
        # stand-in driver
        fg = self.lab.fakegpu_dir
        libdir = r / "usr/lib/x86_64-linux-gnu"
        libdir.mkdir(parents=True, exist_ok=True)
        shutil.copy2(fg / "libnvidia-ml.so.1", libdir / "libnvidia-ml.so.1")
        shutil.copy2(fg / "nvidia-smi", r / "usr/bin/nvidia-smi")
        (r / "usr/local/bin").mkdir(parents=True, exist_ok=True)
        shutil.copy2(fg / "fakegpu", r / FAKEGPU_BIN.lstrip("/"))
        # the lib finds its watcher next to itself when FAKEGPU_BIN is not set
        self._symlink("/usr/lib/x86_64-linux-gnu/fakegpu", FAKEGPU_BIN)
        _run(["chroot", str(r), "/sbin/ldconfig"])
        teardown = f" --teardown-ms {spec.teardown_ms}" if spec.teardown_ms is not None else ""
        self._write(
            "/etc/systemd/system/fakegpu-init.service",
            (
                "[Unit]\nDescription=Stand-in NVIDIA driver state\nDefaultDependencies=no\n"
                "After=local-fs.target\nBefore=sysinit.target\n\n"
                "[Service]\nType=oneshot\nRemainAfterExit=yes\n"
                f"Environment=FAKEGPU_STATE={FAKEGPU_STATE}\n"
                f"ExecStart=/usr/local/bin/fakegpu init --gpus {spec.gpus} "
                f"--name {shlex.quote(spec.gpu_name)} --total-mib {spec.total_mib}{teardown}\n"
                # nvidia-smi & the lib must be readable by everyone: open up the state dir
                f"ExecStartPost=/bin/chmod -R a+rwX {FAKEGPU_STATE}\n\n"
                "[Install]\nWantedBy=sysinit.target\n"
            ),
        )
        self._symlink(
            "/etc/systemd/system/sysinit.target.wants/fakegpu-init.service",
            "/etc/systemd/system/fakegpu-init.service",
        )
        # payload programs
        self._write(f"{PYPATH}/gpulab_payload.py", (HERE / "payload.py").read_text())
        for rel, text in STUB_MODULES.items():
            self._write(f"{PYPATH}/{rel}", text)
        (r / "opt/gpulab/bin").mkdir(parents=True, exist_ok=True)
        names = ["embed-worker", "ipykernel-cuda"]
        for i in range(8):
            names += [f"VLLM::Worker_TP{i}", f"sglang::scheduler_DP0_TP{i}_EP{i}"]
        for n in names:
            self._symlink(f"/opt/gpulab/bin/{n}", "/usr/local/bin/fakegpu")
        # units
        for u in spec.units:
            self._write(f"/etc/systemd/system/{u.name}",
                        moved_ports(u, self.port_offset).unit_file())
            link = f"/etc/systemd/system/{u.wanted_by}.wants/{u.name}"
            if u.enabled:
                self._symlink(link, f"/etc/systemd/system/{u.name}")
        # users
        for user in spec.users:
            if _run(["chroot", str(r), "getent", "passwd", user], check=False).returncode:
                grp = _run(["chroot", str(r), "getent", "group", user], check=False).returncode == 0
                _run(
                    [
                        "chroot",
                        str(r),
                        "useradd",
                        "-m",
                        "-s",
                        "/bin/bash",
                        "-p",
                        "*",
                        *(["-g", user] if grp else []),
                        user,
                    ]
                )
        # sshd
        ak = r / "etc/ssh/gpulab_authorized_keys"
        ak.mkdir(parents=True, exist_ok=True)
        pub = self.lab.client_key_path.with_suffix(".pub").read_text()
        for user in ("root", *spec.users):
            self._write(f"/etc/ssh/gpulab_authorized_keys/{user}", pub)
        shutil.copy2(self.host_key_path, r / "etc/ssh/gpulab_host_ed25519_key")
        os.chmod(r / "etc/ssh/gpulab_host_ed25519_key", 0o600)
        shutil.copy2(
            self.host_key_path.with_suffix(".pub"), r / "etc/ssh/gpulab_host_ed25519_key.pub"
        )
        self._write(
            "/etc/ssh/sshd_config",
            (
                f"# gpudash lab: loopback only, key auth only\n"
                f"Port {self.ssh_port}\nListenAddress {LOOPBACK}\n"
                "HostKey /etc/ssh/gpulab_host_ed25519_key\n"
                "AuthorizedKeysFile /etc/ssh/gpulab_authorized_keys/%u\n"
                "PermitRootLogin prohibit-password\nPubkeyAuthentication yes\n"
                "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                "UsePAM yes\nUseDNS no\nPrintMotd no\nX11Forwarding no\nAllowTcpForwarding yes\n"
                "AcceptEnv LANG LC_*\nSubsystem sftp /usr/lib/openssh/sftp-server\n"
                "MaxStartups 100:30:200\nMaxSessions 50\n"
            ),
        )
        # sshd_config.d snippets of this machine would come first and win: hide them
        dd = r / "etc/ssh/sshd_config.d"
        if dd.is_dir():
            for f in dd.iterdir():
                f.unlink()

    # lifecycle ----------------------------------------------------------
    def boot(self, timeout: float = 60) -> float:
        """Start the container (again) and wait until it is up; returns seconds taken."""
        with self._lock:
            if self.nspawn_pid and _pid_alive(self.nspawn_pid):
                raise LabError(f"{self.name} is already running")
            t0 = time.monotonic()
            self._mount()
            log = open(self.console_log, "ab")
            env = {"PATH": CONTAINER_PATH, "LANG": "C.UTF-8", "SYSTEMD_LOG_COLOR": "0"}
            if self.spec.docker or self.spec.privileged:  # runc, slurmstepd: cgroup v2 inside
                env |= {"SYSTEMD_SECCOMP": "0", "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1"}
            # nspawn --keep-unit puts the container's cgroups (payload/, supervisor/) next
            # to its own: give every host its own cgroup so containers never share one.
            _remove_cgroups(self.cgroup_tag)
            moves = []
            for d in _cgroup_dirs(self.cgroup_tag):
                d.mkdir(exist_ok=True)
                moves.append(f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))}")
            nspawn = [
                "systemd-nspawn",
                "-D",
                str(self.root_dir),
                "--boot",
                f"--machine={self.name}",
                "-q",
                "--register=no",
                "--keep-unit",
                "--console=read-only",
                *(["--capability=all"] if self.spec.docker or self.spec.privileged else []),
                *(f"--bind-ro={p}" for p in tmp_binds()),
            ]
            self.nspawn = subprocess.Popen(
                ["/bin/sh", "-c", " && ".join([*moves, 'exec "$@"']), "sh", *nspawn],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
            )
            log.close()
            self.nspawn_pid = self.nspawn.pid
            self.pid1 = None
            self.lab._save_state()
            try:
                self._wait_pid1(t0 + timeout)
                self.lab._save_state()
                self.wait_running(timeout=max(1.0, t0 + timeout - time.monotonic()))
                self._start_session_procs()
            except Exception as e:
                tail = self.console_log.read_text(errors="replace")[-2000:]
                raise LabError(f"{self.name} did not boot: {e}\n--- console:\n{tail}") from e
            self.boot_seconds = time.monotonic() - t0
            return self.boot_seconds

    def _wait_pid1(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.nspawn.poll() is not None:
                raise LabError(f"systemd-nspawn exited rc={self.nspawn.returncode}")
            # nspawn's child is still "systemd-nspawn" until it execs the container's
            # init; only take it once it is systemd in its own PID namespace
            for c in _children(self.nspawn_pid):
                cl = _cmdline(c)
                try:
                    comm = Path(f"/proc/{c}/comm").read_text().strip()
                    own_ns = os.readlink(f"/proc/{c}/ns/pid") != os.readlink("/proc/self/ns/pid")
                except OSError:
                    continue
                if comm == "systemd" and own_ns and cl and cl[0].endswith("/systemd"):
                    self.pid1 = c
                    return
            time.sleep(0.02)
        raise LabError("container PID 1 did not appear")

    def wait_running(self, timeout: float = 60, units: bool = True) -> None:
        """Wait for is-system-running (running/degraded), sshd listening, units active."""
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            cp = self.exec(["systemctl", "is-system-running"], check=False)
            state = cp.stdout.strip()
            if state in ("running", "degraded"):
                break
            time.sleep(0.1)
        else:
            raise LabError(f"{self.name}: is-system-running={state!r} after {timeout}s")
        while not port_listening(self.ssh_port):
            if time.monotonic() > deadline:
                raise LabError(f"{self.name}: sshd not listening on {self.ssh_port}")
            time.sleep(0.05)
        if units:
            for u in self.spec.units:
                if not u.enabled:
                    continue
                while self.unit_show(u.name, ["ActiveState"])["ActiveState"] != "active":
                    if time.monotonic() > deadline:
                        raise LabError(f"{self.name}: {u.name} not active")
                    time.sleep(0.05)

    def _start_session_procs(self) -> None:
        for sp in self.spec.session_procs:
            inner = (
                f"cd ~ && mkdir -p .local/share/jupyter/runtime && "
                f"PYTHONPATH={PYPATH} FAKEGPU_STATE={FAKEGPU_STATE} FAKEGPU_BIN={FAKEGPU_BIN} "
                f"GPULAB_GPUS={','.join(map(str, sp.gpus))} GPULAB_MIB={sp.mib} "
                f"setsid -f /usr/bin/python3 {shlex.join(sp.argv)} "
                f"</dev/null >/dev/null 2>&1"
            )
            # runuser -l goes through PAM (pam_systemd): logind puts it in session-N.scope
            self.exec(["runuser", "-l", sp.user, "-c", inner])
        deadline = time.monotonic() + 10
        for sp in self.spec.session_procs:
            pat = " ".join(sp.argv)
            while not self.pids_of(pat):
                if time.monotonic() > deadline:
                    raise LabError(f"{self.name}: session process {pat} did not start")
                time.sleep(0.05)

    def power_off(self, timeout: float = 15) -> None:
        """Pull the plug: SIGKILL the container's PID 1, every process in it dies at once."""
        with self._lock:
            if self.pid1 and _pid_alive(self.pid1):
                try:
                    os.kill(self.pid1, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if self.nspawn is not None:
                try:
                    self.nspawn.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.nspawn.kill()
                    self.nspawn.wait(5)
            elif self.nspawn_pid and _pid_alive(self.nspawn_pid):
                deadline = time.monotonic() + timeout
                while _pid_alive(self.nspawn_pid) and time.monotonic() < deadline:
                    time.sleep(0.05)
                if _pid_alive(self.nspawn_pid):
                    os.kill(self.nspawn_pid, signal.SIGKILL)
            # backstop: nothing of this host may survive, whatever PID 1 was
            _kill_cgroup(self.cgroup_tag)
            self.nspawn = None
            self.nspawn_pid = None
            self.pid1 = None
            _remove_cgroups(self.cgroup_tag)
            self.lab._save_state()

    def reboot_hard(self) -> float:
        self.power_off()
        return self.boot()

    def destroy(self) -> None:
        self.power_off()
        _umount_all(self.dir)
        if mounts_under(self.dir):
            raise LabError(f"still mounted under {self.dir}: {mounts_under(self.dir)}")
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def running(self) -> bool:
        return bool(self.pid1 and _pid_alive(self.pid1))

    # inside the container ----------------------------------------------
    def exec(
        self,
        cmd: list[str],
        check: bool = True,
        timeout: float = 30,
        env: dict[str, str] | None = None,
        **kw,
    ) -> subprocess.CompletedProcess:
        """Run cmd inside the container (all of PID 1's namespaces) as root."""
        if not self.pid1:
            raise LabError(f"{self.name} is not running")
        e = {
            "PATH": CONTAINER_PATH,
            "LANG": "C.UTF-8",
            **FAKEGPU_ENV,
            "SYSTEMD_PAGER": "",
            "SYSTEMD_COLORS": "0",
            "HOME": "/root",
            **(env or {}),
        }
        argv = [
            "nsenter",
            "-t",
            str(self.pid1),
            "-a",
            "env",
            "-i",
            *(f"{k}={v}" for k, v in e.items()),
            *cmd,
        ]
        kw.setdefault("stdin", subprocess.DEVNULL)
        return _run(argv, check=check, timeout=timeout, **kw)

    def sh(self, script: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
        return self.exec(["bash", "-c", script], check=check, **kw)

    def spawn(self, cmd: list[str]) -> None:
        """Start a long-running helper inside, detached (nsenter ... setsid -f CMD)."""
        self.exec(
            ["setsid", "-f", *cmd],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            capture_output=False,
        )

    def start_docker(self, timeout: float = 60) -> None:
        """Start dockerd inside and import the lab's image (a rootfs of symlinks into the
        host's /usr, which every container bind-mounts read-only)."""
        if not self.spec.docker:
            raise LabError(f"{self.name} was not booted for docker (HostSpec(docker=True))")
        self.systemctl("start", "docker.service")
        deadline = time.monotonic() + timeout
        while self.exec(["/usr/bin/docker", "info"], check=False).returncode:
            if time.monotonic() > deadline:
                log = self.exec(["journalctl", "-u", "docker", "-n", "40", "--no-pager"],
                                check=False).stdout
                raise LabError(f"{self.name}: dockerd did not answer:\n{log}")
            time.sleep(0.2)
        self.sh(_ROOTFS_TAR + f"tar -c . | /usr/bin/docker import - {DOCKER_IMAGE} >/dev/null; "
                "cd /; rm -rf $d")

    def start_podman(self) -> None:
        """Podman (daemonless) inside a docker-capable host: vfs storage, the lab image."""
        if not self.spec.docker:
            raise LabError(f"{self.name} was not booted for containers (HostSpec(docker=True))")
        self._write("/etc/containers/storage.conf", PODMAN_STORAGE_CONF)
        self.sh(_ROOTFS_TAR + "tar -c . | /usr/bin/podman import - gpulab/base:1 >/dev/null; "
                "cd /; rm -rf $d", timeout=120)

    def podman(self, *args: str, check: bool = True, timeout: float = 60
               ) -> subprocess.CompletedProcess:
        return self.exec(["/usr/bin/podman", *args], check=check, timeout=timeout)

    def docker(self, *args: str, check: bool = True, timeout: float = 60
               ) -> subprocess.CompletedProcess:
        return self.exec(["/usr/bin/docker", *args], check=check, timeout=timeout)

    def systemctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.exec(["systemctl", "--no-pager", *args], check=check)

    def unit_show(self, unit: str, props: list[str] | tuple[str, ...]) -> dict[str, str]:
        cp = self.exec(["systemctl", "show", unit, *(f"--property={p}" for p in props)])
        out = {}
        for line in cp.stdout.splitlines():
            k, _, v = line.partition("=")
            out[k] = v
        return out

    def pids_of(self, pattern: str) -> list[int]:
        """PIDs (in the container's PID namespace) whose full command line matches, in
        two looks 0.2 s apart.  A holder's fork that has not yet exec'd its watcher (the
        stand-in driver double-forks ``fakegpu-watch``) carries the holder's command line
        for a moment: one look once found it beside the holder."""
        first = self._pgrep(pattern)
        if not first:
            return []
        time.sleep(0.2)
        return sorted(set(first) & set(self._pgrep(pattern)))

    def _pgrep(self, pattern: str) -> list[int]:
        cp = self.exec(["pgrep", "-f", "--", pattern], check=False)
        return [int(x) for x in cp.stdout.split()]

    def proc(self, pid: int) -> dict[str, str] | None:
        """pid, ppid, stat, user, comm, cgroup, args of one process; None if gone."""
        cp = self.exec(["ps", "-o", "ppid=,stat=,user=,comm=", "-p", str(pid)], check=False)
        if cp.returncode or not cp.stdout.strip():
            return None
        ppid, stat, user, comm = cp.stdout.split(None, 3)
        cg = self.exec(["cat", f"/proc/{pid}/cgroup", f"/proc/{pid}/cmdline"], check=False)
        lines = cg.stdout.split("\n")
        cgroup = next((ln.split(":", 2)[2] for ln in lines if ln.startswith("0::")), "")
        if not cgroup:
            cgroup = next((ln.split(":", 2)[2] for ln in lines if ":name=systemd:" in ln), "")
        args = lines[-1].replace("\0", " ").strip() if lines else ""
        return {
            "pid": str(pid),
            "ppid": ppid,
            "stat": stat,
            "user": user,
            "comm": comm.strip(),
            "cgroup": cgroup,
            "args": args,
        }

    def alive(self, pid: int) -> bool:
        p = self.proc(pid)
        return p is not None and not p["stat"].startswith("Z")

    def gpu_used_mib(self) -> list[int]:
        cp = self.exec(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"])
        return [int(x.strip()) for x in cp.stdout.splitlines() if x.strip()]

    def grant_sudo(self, user: str = "operator") -> None:
        # sudo resets the environment; the stand-in driver (unlike a real one) needs its
        # FAKEGPU_* variables, so the rule keeps them or NVML under sudo sees no GPU.
        keep = " ".join(FAKEGPU_ENV)
        self._write(
            f"/etc/sudoers.d/gpulab-{user}",
            f'Defaults:{user} env_keep += "{keep}"\n{user} ALL=(ALL) NOPASSWD: ALL\n',
            0o440,
        )

    def revoke_sudo(self, user: str = "operator") -> None:
        (self.root_dir / f"etc/sudoers.d/gpulab-{user}").unlink(missing_ok=True)

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "alias": self.alias,
            "index": self.index,
            "ssh_port": self.ssh_port,
            "dir": str(self.dir),
            "nspawn_pid": self.nspawn_pid,
            "pid1": self.pid1,
        }


# --------------------------------------------------------------------------- lab


def _umount_all(path: Path) -> None:
    for _ in range(20):
        mps = sorted(mounts_under(path), key=len, reverse=True)
        if not mps:
            return
        for mp in mps:
            subprocess.run(["umount", mp], capture_output=True)
        if mounts_under(path):
            time.sleep(0.1)
    for mp in sorted(mounts_under(path), key=len, reverse=True):
        subprocess.run(["umount", "-l", mp], capture_output=True)


class Lab:
    """One run: a base dir holding the client key, ssh_config, known_hosts and hosts."""

    def __init__(
        self,
        base_dir: str | os.PathLike | None = None,
        *,
        keep: bool = False,
        fakegpu: str | os.PathLike | None = None,
    ):
        check_available()
        if base_dir is None:
            base_dir = (
                DEFAULT_PARENT
                / f"{BASE_PREFIX}{time.strftime('%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
            )
        self.base_dir = Path(base_dir).resolve()
        if self.base_dir == Path("/") or len(self.base_dir.parts) < 3:
            raise LabError(f"refusing base dir {self.base_dir}")
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.keep = keep
        self.hosts: list[LabHost] = []
        self._next_index = 1
        self._lock = threading.RLock()
        self._fakegpu = Path(fakegpu) if fakegpu else None
        self.client_key_path = self.base_dir / "client_ed25519"
        self.ssh_config_path = self.base_dir / "ssh_config"
        self.known_hosts_path = self.base_dir / "known_hosts"
        if not self.client_key_path.exists():
            _run(
                [
                    "ssh-keygen",
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    "gpudash-lab-client",
                    "-f",
                    str(self.client_key_path),
                ]
            )
        self._save_state()
        if not keep:
            atexit.register(self.stop)

    @property
    def fakegpu_dir(self) -> Path:
        if self._fakegpu is None:
            self._fakegpu = fakegpu_dir()
        return self._fakegpu

    # state file, for `lab.py down/status` --------------------------------
    def _save_state(self) -> None:
        with self._lock:
            st = {
                "owner_pid": None if self.keep else os.getpid(),
                "hosts": [h.as_dict() for h in self.hosts],
                "ssh_config": str(self.ssh_config_path),
            }
            tmp = self.base_dir / "lab.json.tmp"
            tmp.write_text(json.dumps(st, indent=1))
            tmp.replace(self.base_dir / "lab.json")

    def _write_ssh_files(self) -> None:
        cfg, kh = [], []
        for h in self.hosts:
            cfg.append(
                f"Host {h.alias} {h.name}\n  HostName {LOOPBACK}\n  Port {h.ssh_port}\n"
                f"  User root\n  IdentityFile {self.client_key_path}\n  IdentitiesOnly yes\n"
                f"  UserKnownHostsFile {self.known_hosts_path}\n  GlobalKnownHostsFile /dev/null\n"
                "  StrictHostKeyChecking yes\n  CheckHostIP no\n  BatchMode yes\n"
                "  ConnectTimeout 5\n  LogLevel ERROR\n"
            )
            key = " ".join(h.host_key_path.with_suffix(".pub").read_text().split()[:2])
            kh.append(f"[{LOOPBACK}]:{h.ssh_port},{h.alias},{h.name} {key}")
        self.ssh_config_path.write_text("\n".join(cfg))
        self.known_hosts_path.write_text("\n".join(kh) + "\n")

    # hosts ----------------------------------------------------------------
    def add_host(self, spec: HostSpec | None = None) -> LabHost:
        """Create and provision a host (not booted)."""
        with self._lock:
            i = self._next_index
            self._next_index += 1
            ports = {h.ssh_port for h in self.hosts}
            port = _free_port()
            while port in ports:
                port = _free_port()
            the_spec = spec or HostSpec()
            wanted = spec_ports(the_spec.units)
            taken = {h.port(p) for h in self.hosts for p in spec_ports(h.spec.units)}
            h = LabHost(
                lab=self,
                index=i,
                spec=the_spec,
                name=f"gpuhost{i}",
                alias=f"labhost{i}",
                ssh_port=port,
                dir=self.base_dir / f"host{i}",
                port_offset=pick_port_offset(wanted, taken | {port}) if wanted else 0,
            )
            h.dir.mkdir(parents=True, exist_ok=True)
            _run(
                [
                    "ssh-keygen",
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    h.name,
                    "-f",
                    str(h.host_key_path),
                ]
            )
            self.hosts.append(h)
            self._write_ssh_files()
            self._save_state()
        _ = self.fakegpu_dir
        h._mount()
        h._provision()
        return h

    def start(self, specs: list[HostSpec] | int = 1, timeout: float = 90) -> list[LabHost]:
        """Create and boot hosts in parallel; ``specs`` may be a count (default specs)."""
        if isinstance(specs, int):
            specs = [HostSpec() for _ in range(specs)]
        _ = self.fakegpu_dir  # build once, before the threads
        hosts = [self.add_host(s) for s in specs]
        with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as ex:
            futs = [ex.submit(h.boot, timeout) for h in hosts]
            errors = []
            for f in futs:
                try:
                    f.result()
                except Exception as e:  # noqa: BLE001
                    errors.append(e)
        if errors:
            raise errors[0]
        return hosts

    def remove(self, host: LabHost) -> None:
        host.destroy()
        with self._lock:
            if host in self.hosts:
                self.hosts.remove(host)
            self._write_ssh_files()
            self._save_state()

    def stop(self) -> None:
        """Kill every host, unmount, remove the run dir. Safe to call more than once."""
        errors = []
        for h in list(self.hosts):
            try:
                h.destroy()
            except Exception as e:  # noqa: BLE001
                errors.append(e)
        self.hosts.clear()
        _umount_all(self.base_dir)
        if self.base_dir.exists() and not mounts_under(self.base_dir):
            shutil.rmtree(self.base_dir, ignore_errors=True)
        try:
            atexit.unregister(self.stop)
        except Exception:  # noqa: BLE001
            pass
        if errors:
            raise errors[0]

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# --------------------------------------------------------------------------- cleanup of stale runs


def reap_stale(parent: Path = DEFAULT_PARENT) -> list[str]:
    """Clean up runs of test sessions that died without teardown (their owner pid is gone).

    Runs started by ``lab.py up`` (no owner) and runs of live sessions are left alone.
    """
    did = []
    for base in list_runs(parent):
        owner = _run_state(base).get("owner_pid")
        if owner and not _pid_alive(owner):
            did += cleanup_run(base)
    return did


def list_runs(parent: Path = DEFAULT_PARENT) -> list[Path]:
    """Run dirs, plus runs that only left cgroups behind (their dir is gone)."""
    runs = {p for p in parent.glob(BASE_PREFIX + "*") if p.is_dir()}
    for root in _cgroup_roots():
        for d in root.glob(BASE_PREFIX + "*.*"):
            runs.add(parent / d.name.split(".")[0])
    return sorted(runs)


def _run_state(base: Path) -> dict:
    try:
        return json.loads((base / "lab.json").read_text())
    except (OSError, ValueError):
        return {}


def cleanup_run(base: Path) -> list[str]:
    """Kill everything of a (stale) run, unmount, remove its dir. Returns what it did."""
    base = base.resolve()
    did = []
    st = _run_state(base)
    nspawns = {h.get("nspawn_pid") for h in st.get("hosts", []) if h.get("nspawn_pid")}
    # also find nspawn processes by their -D argument (state file may be stale)
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            cl = _cmdline(int(p.name))
            if (
                cl
                and cl[0].endswith("systemd-nspawn")
                and any(a.startswith(str(base) + "/") for a in cl)
            ):
                nspawns.add(int(p.name))
    for np in nspawns:
        cl = _cmdline(np)
        if not (cl and cl[0].endswith("systemd-nspawn") and any(str(base) in a for a in cl)):
            continue  # pid reused by something else
        for c in _children(np):
            try:
                os.kill(c, signal.SIGKILL)
                did.append(f"killed container pid1 {c}")
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while _pid_alive(np) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _pid_alive(np):
            os.kill(np, signal.SIGKILL)
            did.append(f"killed nspawn {np}")
    for root in _cgroup_roots():
        for d in root.glob(base.name + ".*"):
            n = _kill_cgroup(d.name)
            if n:
                did.append(f"killed {n} processes in cgroup {d.name}")
            _remove_cgroups(d.name)
            did.append(f"removed cgroup {d.name}" if not d.exists() else f"cgroup {d} busy")
    if mounts_under(base):
        did.append(f"unmounted {mounts_under(base)}")
        _umount_all(base)
    if mounts_under(base):
        did.append(f"STILL MOUNTED {mounts_under(base)}")
        return did
    if any(_cgroup_pids(d.name) for r in _cgroup_roots() for d in r.glob(base.name + ".*")):
        did.append("STILL RUNNING processes, run dir kept")
        return did
    shutil.rmtree(base, ignore_errors=True)
    did.append(f"removed {base}")
    return did


# --------------------------------------------------------------------------- CLI


def _cli(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lab.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="boot N hosts and leave them running")
    up.add_argument("--hosts", type=int, default=1)
    up.add_argument("--dir", type=Path)
    st = sub.add_parser("status", help="list runs and their hosts")
    st.add_argument("--dir", type=Path)
    dn = sub.add_parser("down", help="tear down runs (default: those whose owner is gone)")
    dn.add_argument("--dir", type=Path)
    dn.add_argument("--all", action="store_true", help="also runs of live test sessions")
    a = ap.parse_args(argv)

    if a.cmd == "up":
        lab = Lab(a.dir, keep=True)
        t0 = time.monotonic()
        try:
            hosts = lab.start(a.hosts)
        except Exception:
            lab.stop()
            raise
        print(f"{len(hosts)} host(s) up in {time.monotonic() - t0:.1f}s; run dir {lab.base_dir}")
        for h in hosts:
            print(
                f"  {h.alias} ({h.name}): ssh -F {lab.ssh_config_path} {h.alias}   "
                f"[port {h.ssh_port}, boot {h.boot_seconds:.1f}s]"
            )
        print(f"down: python {Path(__file__)} down --dir {lab.base_dir}")
        return 0
    runs = [a.dir.resolve()] if a.dir else list_runs()
    if a.cmd == "status":
        for base in runs:
            s = _run_state(base)
            owner = s.get("owner_pid")
            dead = "" if not owner or _pid_alive(owner) else " (dead)"
            print(f"{base}  owner={owner or 'cli'}{dead}")
            for h in s.get("hosts", []):
                up_ = "up" if _pid_alive(h.get("pid1")) else "down"
                sshd = "listening" if port_listening(h["ssh_port"]) else "-"
                print(f"  {h['alias']} {h['name']} port={h['ssh_port']} {up_} sshd={sshd}")
            if mounts_under(base):
                print(f"  mounts: {len(mounts_under(base))}")
        if not runs:
            print("no lab runs")
        return 0
    rc = 0
    for base in runs:
        owner = _run_state(base).get("owner_pid")
        if owner and _pid_alive(owner) and not (a.all or a.dir) and owner != os.getpid():
            print(f"{base}: owned by live pid {owner}, skipped (use --all)")
            continue
        did = cleanup_run(base)
        print(f"{base}: " + "; ".join(did))
        if any(d.startswith("STILL") for d in did):
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(_cli())
