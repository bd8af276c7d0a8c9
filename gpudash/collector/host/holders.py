"""Device-file holders: processes that keep GPU memory through ``/dev/nvidia*`` without
NVML listing them."""

from __future__ import annotations

import os
import re
import time
from typing import TYPE_CHECKING, Any

from .parsing import parse_stat
from .procfs import STAT_BYTES

if TYPE_CHECKING:
    from .protocol import Json


DEV_DIR_ENV = "GPUDASH_NVIDIA_DEV_DIR"  # where the NVIDIA device files are; default /dev
DEV_SLACK_MIB = 1024  # used memory beyond the listed holders' that needs no explaining
DEV_SCAN_BUDGET_S = 0.00025  # time a sample may spend on the rotating scan
DEV_RESCAN_MIN_S = 2.0  # full scans on a changed shortfall are at least this far apart


class DeviceHolders:
    """Processes that keep GPU memory through ``/dev/nvidia*`` without NVML listing them.

    A child forked from a CUDA process (a compile worker, a dataloader) inherits its device
    files, as fds and as mappings, and keeps the memory alive after the process NVML listed
    is gone (nvitop #134: "No Such Process" holding 32 GiB; ``lsof /dev/nvidia*`` finds it).
    A process that holds ``<dev>/nvidia<minor>`` open or mapped, is not listed by NVML and is
    not this collector is such a holder of the GPU with that minor number, shown (``dev``,
    memory unknown) on those of its GPUs whose memory is unexplained: a CUDA child often
    holds every visible GPU's file. nvidiactl and nvidia-uvm name no GPU and do not count.
    Driver daemons and monitoring agents that open the per-GPU files (nvidia-persistenced,
    DCGM) are found too while a GPU is short: their units are up, so they are never orphans.

    Reading every process's fds and maps costs tens of ms, so it runs only while some
    GPU's used memory exceeds what its listed holders account for by more than
    ``DEV_SLACK_MIB`` (a GPU with a holder of unknown memory cannot tell, and never asks).
    When that shortfall changes (at most every ``DEV_RESCAN_MIN_S`` unless a request asks),
    every process's fds are read at once (~60 ms for 1,100 processes), and its maps only if
    a short GPU is still unexplained (~130 ms in all); in between, processes are re-read in
    rotation within ``DEV_SCAN_BUDGET_S`` a sample.
    """

    def __init__(self, proc: str = "/proc", dev_dir: str | None = None, gpus: Any = None) -> None:
        self.proc = proc
        dev = (dev_dir or os.environ.get(DEV_DIR_ENV) or "/dev").rstrip("/")
        self.prefix = dev + "/nvidia"  # then digits: one GPU's device file
        self.prefix_b = self.prefix.encode()
        self.maps_re = re.compile(rb" " + re.escape(self.prefix_b) + rb"(\d+)$", re.M)
        self.reader = gpus  # NVML handles map device minors to indices (else minor = index)
        self.minor_index: dict[int, int] | None = None
        self.me = os.getpid()
        self.found: dict[int, tuple[int, tuple[int, ...]]] = {}  # pid -> (start, minors)
        self.queue: list[int] = []  # pids the rotating scan has still to read
        self.scanned_for: object = None  # the shortfall the last full scan looked at
        self.full_at = -DEV_RESCAN_MIN_S
        self.denied = 0  # processes whose fds the last full scan could not read
        self.was_denied = False  # the last process read had unreadable fds
        self.memo: tuple[Any, Any, tuple[tuple[int, int], ...]] = (None, None, ())
        self.outs: dict[int, tuple[Json, Json]] = {}
        # per short GPU, what the last sample's scan says of its device files: "held" (a
        # process NVML does not list has them), "partial" (none found, but some processes'
        # fds were not readable), "clear" (every process's fds and maps read: nobody)
        self.verdicts: dict[int, str] = {}

    def shortfall(self, gpus: list[Json], holders: dict[int, dict[int, int]]) -> tuple[
        tuple[int, int], ...
    ]:
        """(GPU, MiB) for each GPU whose used memory its listed holders leave unexplained."""
        used = [(g["index"], g.get("memory_used_mib")) for g in gpus]
        if self.memo[0] is holders and self.memo[1] == used:
            return self.memo[2]
        listed: dict[int, int] = {}
        unknown: set[int] = set()
        for mem in holders.values():
            for gpu, mib in mem.items():
                if mib < 0:
                    unknown.add(gpu)
                else:
                    listed[gpu] = listed.get(gpu, 0) + mib
        short = tuple(
            (gpu, mib - listed.get(gpu, 0))
            for gpu, mib in used
            if mib is not None and gpu not in unknown and mib - listed.get(gpu, 0) > DEV_SLACK_MIB
        )
        self.memo = (holders, used, short)
        return short

    def sample(
        self, gpus: list[Json], holders: dict[int, dict[int, int]], read: Any, force: bool
    ) -> tuple[dict[str, Json], str | None]:
        """Wire dicts of the device holders to add to this sample (keyed by pid), and a
        problem to report. ``read`` is ``ProcReader.read``; dicts are reused while unchanged."""
        short = self.shortfall(gpus, holders)
        self.verdicts = {}
        if not short:
            if self.found or self.queue or self.scanned_for is not None:
                self.found, self.queue, self.outs, self.scanned_for = {}, [], {}, None
                self.denied = 0
            return {}, None
        now = time.monotonic()
        short_gpus = {gpu for gpu, _mib in short}
        # a request (force) lifts the rate limit; an unchanged shortfall was scanned already
        if short != self.scanned_for and (force or now - self.full_at >= DEV_RESCAN_MIN_S):
            self._full_scan(short_gpus, holders)
            self.scanned_for, self.full_at = short, now
        else:
            self._rotate(holders)
        procs: dict[str, Json] = {}
        for pid, (start, minors) in list(self.found.items()):
            if pid in holders:
                continue  # NVML lists it now: its memory is attributed
            indices = [i for i in self._indices(minors) if i in short_gpus]
            if not indices:
                continue  # it holds no GPU whose memory needs explaining
            info = read(pid)
            if info is None or info.get("start_ticks") != start:
                del self.found[pid]  # gone, or the pid names another process now
                continue
            last = self.outs.get(pid)
            if last is None or last[0] is not info or last[1]["device_gpus"] != indices:
                out = dict(info)
                out["gpu_memory_mib"] = {str(i): -1 for i in indices}
                out["device_gpus"] = indices
                last = self.outs[pid] = (info, out)
            procs[str(pid)] = last[1]
        for pid in [p for p in self.outs if str(p) not in procs]:
            del self.outs[pid]
        scanned = {gpu for gpu, _mib in self.scanned_for} if isinstance(
            self.scanned_for, tuple) else set()
        held = {g for out in procs.values() for g in out["device_gpus"]}
        for gpu in sorted(short_gpus & scanned):
            self.verdicts[gpu] = ("held" if gpu in held else "partial" if self.denied
                                  else "clear")
        problem = None
        if self.denied:
            problem = (
                f"memory on GPU {', '.join(str(g) for g in sorted(short_gpus))} has no listed "
                f"holder and the open files of {self.denied} processes are not readable "
                "without root (--sudo): some of its holders may not be shown"
            )
        return procs, problem

    def _pids(self) -> list[int]:
        try:
            return [int(e) for e in os.listdir(self.proc) if e.isdigit() and int(e) != self.me]
        except OSError:
            return []

    def _full_scan(self, short: set[int], listed: dict[int, Any]) -> None:
        """Every process NVML does not list: fds, then maps if fds leave a GPU unexplained."""
        found: dict[int, tuple[int, tuple[int, ...]]] = {}
        pids = [pid for pid in self._pids() if pid not in listed]
        denied = 0
        for pid in pids:
            self.was_denied = False
            hit = self._held(pid, maps=False)
            denied += self.was_denied
            if hit is not None:
                found[pid] = hit
        self.denied = denied
        covered = {self._index(m) for _start, minors in found.values() for m in minors}
        if not short <= covered:  # no fd explains a short GPU: look for mappings too
            for pid in pids:
                if pid not in found:
                    hit = self._held(pid, maps=True, fds=False)
                    if hit is not None:
                        found[pid] = hit
        self.found, self.queue = found, []

    def _rotate(self, listed: dict[int, Any]) -> None:
        """Re-read processes NVML does not list, the next ones in turn, within the budget."""
        if not self.queue:
            self.queue = self._pids()
        deadline = time.perf_counter() + DEV_SCAN_BUDGET_S
        first = True  # one at least, however slow the host: the rotation always moves on
        while self.queue and (first or time.perf_counter() < deadline):
            first = False
            pid = self.queue.pop()
            if pid in listed:
                continue
            hit = self._held(pid, maps=True)
            if hit is not None:
                self.found[pid] = hit
            else:
                self.found.pop(pid, None)

    def _held(self, pid: int, maps: bool, fds: bool = True) -> tuple[int, tuple[int, ...]] | None:
        """(start ticks, minors) of the per-GPU device files ``pid`` has open or mapped.

        Everything is read through one ``/proc/PID`` directory fd, which keeps naming the
        process it was opened on: if the pid is reused meanwhile the reads fail."""
        try:
            base = os.open(f"{self.proc}/{pid}", os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return None
        try:
            minors: set[int] = set()
            if fds:
                minors |= self._fd_minors(base)
            if maps and not minors:
                minors |= self._map_minors(base)
            if not minors:
                return None
            fd = os.open("stat", os.O_RDONLY, dir_fd=base)
            try:
                parsed = parse_stat(os.read(fd, STAT_BYTES).decode("utf-8", "replace"))
            finally:
                os.close(fd)
            return None if parsed is None else (parsed[3], tuple(sorted(minors)))
        except OSError:
            return None
        finally:
            os.close(base)

    def _fd_minors(self, base: int) -> set[int]:
        minors: set[int] = set()
        try:
            fd_dir = os.open("fd", os.O_RDONLY | os.O_DIRECTORY, dir_fd=base)
        except PermissionError:
            self.was_denied = True
            return minors
        try:
            prefix, cut = self.prefix, len(self.prefix)
            for name in os.listdir(fd_dir):
                try:
                    target = os.readlink(name, dir_fd=fd_dir)
                except OSError:
                    continue
                if target.startswith(prefix) and target[cut:].isdigit():
                    minors.add(int(target[cut:]))
        finally:
            os.close(fd_dir)
        return minors

    def _map_minors(self, base: int) -> set[int]:
        try:
            fd = os.open("maps", os.O_RDONLY, dir_fd=base)
        except OSError:
            return set()
        try:
            chunks = []
            while True:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(fd)
        data = b"".join(chunks)
        if self.prefix_b not in data:
            return set()
        return {int(m) for m in self.maps_re.findall(data)}

    def _index(self, minor: int) -> int:
        if self.minor_index is None:
            self.minor_index = {}
            nvml: Any = getattr(self.reader, "nvml", None)
            for index, handle in enumerate(getattr(self.reader, "handles", ())):
                try:
                    self.minor_index[int(nvml.nvmlDeviceGetMinorNumber(handle))] = index
                except Exception:  # noqa: BLE001 - no minor from the driver: minor = index
                    continue
        return self.minor_index.get(minor, minor)

    def _indices(self, minors: tuple[int, ...]) -> list[int]:
        return sorted({self._index(m) for m in minors})
