"""One snapshot of the host: GPUs, their holders and the holders' units, containers and
pods, bounded by the protocol's limits (``protocol.merge_patch`` is the patch between
two of them)."""

from __future__ import annotations

import os
import pwd
import subprocess
import time
from typing import TYPE_CHECKING, Any

from .claims import Claims
from .containers import ContainerReader, PodReader
from .gpus import gpu_reader
from .holders import DeviceHolders
from .hoststats import HostStats, load_psutil, read_boot_id
from .parsing import unit_cgroup
from .procs import ProcReader
from .protocol import (
    ANCESTRY_DEPTH,
    CMDLINE_BUDGET,
    CMDLINE_SHORT,
    CONTAINER,
    CONTAINER_KEY_FIELDS,
    ERROR_MAX,
    MAX_ERRORS,
    MAX_GPUS,
    MAX_PROCS,
    MAX_UNITS,
    POD,
    POD_KEY_FIELDS,
    PROTOCOL,
    TEXT_MAX,
    kind_owners,
)
from .text import cap_text
from .units import UnitReader

if TYPE_CHECKING:
    from .protocol import Json


def login_name() -> str:
    """Who this collector runs as, for messages; a uid without a passwd entry is a login too."""
    uid = os.geteuid()
    try:
        return repr(pwd.getpwuid(uid).pw_name)
    except KeyError:  # containers run arbitrary uids
        return f"uid {uid} (no passwd entry)"


def act_permission(sudo: bool) -> tuple[bool, str | None]:
    """Whether this login can stop units and signal other users' processes."""
    if os.geteuid() == 0:
        return True, None
    user = cap_text(login_name(), TEXT_MAX)
    if sudo:
        try:
            ok = (
                subprocess.run(["sudo", "-n", "true"], capture_output=True, timeout=10).returncode
                == 0
            )
        except (OSError, subprocess.SubprocessError):
            ok = False
        if ok:
            return True, None
        return False, f"login {user} cannot run `sudo -n` (needs a NOPASSWD rule)"
    return False, f"login {user} is not root; rerun with --sudo (needs a NOPASSWD rule)"


def _bounded_errors(errors: list[str]) -> list[str]:
    """Distinct errors, each within ERROR_MAX, at most MAX_ERRORS of them."""
    unique = [cap_text(e, ERROR_MAX) for e in dict.fromkeys(errors)]
    if len(unique) > MAX_ERRORS:
        more = len(unique) - (MAX_ERRORS - 1)
        unique[MAX_ERRORS - 1 :] = [f"... and {more} more errors"]
    return unique


class HostCollector:
    """Produces one wire snapshot per call to ``sample``."""

    def __init__(
        self,
        sudo: bool = False,
        nvml_source: str | None = None,
        proc: ProcReader | None = None,
        units: UnitReader | None = None,
        gpus: Any = None,
        source: str = "nvml",
        stats: HostStats | None = None,
        containers: ContainerReader | None = None,
    ) -> None:
        if gpus is None:
            gpus, source = gpu_reader(nvml_source)
        self.gpus = gpus
        self.source = source
        self.proc = proc or ProcReader()
        self.units = units or UnitReader()
        self.containers = containers or ContainerReader(sudo)
        self.pods = PodReader(sudo)
        self.claims = Claims(self.proc.proc)
        self.stats = stats or HostStats(load_psutil(), self.proc.proc)
        self.boot_id = read_boot_id(self.proc.proc)
        self.can_act, self.reason = act_permission(sudo)
        self.watched: set[str] = set()
        self.watched_containers: dict[str, str] = {}  # id -> runtime
        # processes signalled on gpudash's request: listed in every snapshot until they
        # are gone, so that "not listed" means "gone" for them whatever they hold
        self.signalled: dict[int, int] = {}  # pid -> its start ticks
        self.holding: dict[int, tuple[Json, dict[int, int], Json, str, int | None]] = {}
        self.devices = DeviceHolders(self.proc.proc, gpus=gpus)
        # which processes this collector can see: a child PID namespace sees only its
        # own, hidepid hides other users' from all but root
        self.pid_view = ("namespace" if self.proc.nested else
                         "hidepid" if self.proc.hidepid and os.geteuid() != 0 else "full")
        host = os.uname().nodename if hasattr(os, "uname") else "localhost"
        self.host = cap_text(host, TEXT_MAX)

    def _signalled(self, procs: dict[str, Json]) -> None:
        for pid, start in sorted(self.signalled.items()):
            if str(pid) in procs:
                continue
            info = self.proc.read(pid) if len(procs) < MAX_PROCS else None
            if info is None or info.get("start_ticks") != start or info.get("state") == "Z":
                del self.signalled[pid]  # gone (dead, or its pid is another process's)
            else:
                procs[str(pid)] = info

    def _ancestry(self, procs: dict[str, Json], holders: list[int], errors: list[str]) -> None:
        """List the live parents (up to ``ANCESTRY_DEPTH`` levels) and the process-group
        leader of every GPU holder: whether a model server's API server is still there
        is told by them."""
        read = self.proc.read
        wanted: list[int] = []
        for pid in holders:
            info = procs.get(str(pid))
            if info is None:
                continue
            pgid = info.get("pgid")
            if isinstance(pgid, int) and pgid > 1 and pgid != pid:
                wanted.append(pgid)
            ppid = info.get("ppid")
            for _ in range(ANCESTRY_DEPTH):
                if not isinstance(ppid, int) or ppid <= 1:
                    break
                parent = procs.get(str(ppid))
                if parent is None:
                    if len(procs) >= MAX_PROCS:
                        errors.append("parents of GPU holders not all listed: "
                                      f"a snapshot lists {MAX_PROCS} processes")
                        return
                    parent = read(ppid)
                    if parent is None:
                        break
                    procs[str(ppid)] = parent
                ppid = parent.get("ppid")
        for pgid in wanted:
            if str(pgid) in procs or len(procs) >= MAX_PROCS:
                continue
            leader = read(pgid)
            if leader is not None and leader.get("pgid") == pgid:
                procs[str(pgid)] = leader

    def sample(self, force_units: bool = False) -> Json:
        """One wire snapshot. Its process dicts are shared with later snapshots while they
        do not change (so ``merge_patch`` skips them by identity): never mutate them."""
        taken_at = time.time()
        if force_units:
            self.proc.stale_all()
        gpus, holders, errors = self.gpus.read()
        errors = list(errors)
        if len(gpus) > MAX_GPUS:
            errors.append(f"{len(gpus) - MAX_GPUS} GPUs beyond the first {MAX_GPUS} not listed")
            gpus = gpus[:MAX_GPUS]
        self.proc.begin_sample()  # after the driver's lists: any exit before now is seen
        procs: dict[str, Json] = {}
        before = self.holding
        holding: dict[int, tuple[Json, dict[int, int], Json, str, int | None]] = {}
        self.holding = holding
        sm_util: dict[int, int] = getattr(self.gpus, "sm_util", {})
        read = self.proc.read
        listed: Any = holders.items()
        if len(holders) > MAX_PROCS:  # absurd, but a snapshot must stay bounded
            listed = sorted(holders.items())[:MAX_PROCS]
            errors.append(f"{len(holders) - MAX_PROCS} GPU processes beyond {MAX_PROCS} not listed")
        for pid, mem in listed:
            # In a child PID namespace the driver's pids (the host's) name other processes
            # here, or none: never read them as if they were the holders.
            info = None if self.proc.nested else read(pid)
            last = before.get(pid)
            sm = sm_util.get(pid)
            if (last is not None and last[0] is info and (last[1] is mem or last[1] == mem)
                    and last[4] == sm):
                holding[pid] = last  # unchanged: the same dict (merge_patch skips it)
                procs[last[3]] = last[2]
                continue
            if info is None:  # listed by the driver, not readable here: say why
                info = {"pid": pid, "unreadable": self.proc.unreadable(pid)}
            out = dict(info)
            out["gpu_memory_mib"] = {str(k): v for k, v in mem.items()}
            if sm is not None:
                out["sm_util_pct"] = sm
            name = str(pid)
            holding[pid] = (info, mem, out, name, sm)
            procs[name] = out
        found, problem = self.devices.sample(gpus, holders, read, force_units)
        procs.update(found)  # holders through /dev/nvidia* that NVML does not list
        for gpu in gpus:  # what the scan of the device files says of a short GPU
            verdict = self.devices.verdicts.get(gpu["index"])
            if verdict is not None:
                gpu["device_scan"] = verdict
        if problem:
            errors = errors + [problem]
        owners: dict[str, str] = {}
        for info in list(procs.values()):
            unit = info.get("unit")
            if unit and "cgroup" in info:
                owners[unit] = unit_cgroup(info["cgroup"], unit)
        membership = []
        for unit, cgroup in sorted(owners.items()):
            pids = self.proc.members(cgroup)
            membership.append((unit, tuple(sorted(pids))))
            unlisted = 0
            for pid in sorted(pids):
                if str(pid) not in procs:
                    if len(procs) >= MAX_PROCS:
                        unlisted += 1
                        continue
                    info = self.proc.read(pid)
                    if info is not None:
                        procs[str(pid)] = info
            if unlisted:
                errors.append(
                    f"{unlisted} processes of {unit} not listed (a snapshot lists {MAX_PROCS})"
                )
        self._ancestry(procs, list(holding) + [int(k) for k in found], errors)
        self._signalled(procs)
        self.proc.forget_unseen()
        if self.proc.squeezed:
            errors.append(
                f"cmdlines of {self.proc.squeezed} processes cut to {CMDLINE_SHORT} bytes:"
                f" all long cmdlines share {CMDLINE_BUDGET >> 10} KiB"
            )
        names = set(owners) | self.watched
        if len(names) > MAX_UNITS:
            errors.append(f"{len(names) - MAX_UNITS} units beyond {MAX_UNITS} not listed")
            names = set(sorted(owners)[:MAX_UNITS])
            names |= set(sorted(self.watched)[: MAX_UNITS - len(names)])
        key = (tuple(membership), tuple(sorted(self.watched)))
        units, unit_errors = self.units.read(names, key, force_units)
        seen: dict[str, str] = {}
        pod_uids: set[str] = set()
        me = os.geteuid() if hasattr(os, "geteuid") else 0
        for info in procs.values():
            kind, _, named = str(info.get("claim") or "").partition(":")
            if kind == CONTAINER and info.get("user_uid", me) == me:
                # a rootless container of another user is not in this runtime's store:
                # asked here, it would answer "no such container"
                runtime, _, cid = named.partition("/")
                seen[cid] = runtime
            elif kind == POD:
                pod_uids.add(named)
        for cid, runtime in self.watched_containers.items():
            seen.setdefault(cid, runtime)
        containers, container_errors = self.containers.read(seen, force_units)
        described, owner_errors = self.claims.read(procs, force_units)
        if containers:
            described[CONTAINER] = kind_owners(containers, CONTAINER_KEY_FIELDS)
        pods = self.pods.read(pod_uids, force_units)
        if pods:
            described[POD] = kind_owners(pods, POD_KEY_FIELDS)
        unit_errors = unit_errors + container_errors + owner_errors
        snap: Json = {
            "v": PROTOCOL,
            "host": self.host,
            "taken_at": round(taken_at, 3),
            "source": self.source,
            "errors": _bounded_errors(errors + unit_errors),
            "can_act": self.can_act,
            "gpus": {str(g["index"]): g for g in gpus},
            "procs": procs,
            "units": {u["name"]: u for u in units},
        }
        if described:
            snap["owners"] = described
        if self.source == "none":
            snap["degraded"] = True
        if self.boot_id is not None:
            snap["boot_id"] = self.boot_id
        snap["pid_view"] = self.pid_view
        for stat, value in self.stats.read().items():
            if value is not None:
                snap[stat] = value
        if self.reason:
            snap["cannot_act_reason"] = cap_text(self.reason, ERROR_MAX)
        return snap
