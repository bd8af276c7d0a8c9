"""The host itself: its boot id, CPU and memory (``psutil`` where importable, else
``/proc``), and the collector's own CPU time."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from .procfs import _read
from .protocol import BOOT_ID, MIB

if TYPE_CHECKING:
    from .protocol import Json


HOST_STATS_S = 1.0  # the host's CPU % and RAM are re-read at most this often (seconds)
OWN_CPU_S = 10.0  # the collector's own CPU time, this often: a changed field costs wire bytes


def read_boot_id(proc: str = "/proc") -> str | None:
    """This boot's id: a (pid, start ticks) identity holds within one boot only."""
    text = (_read(proc + "/sys/kernel/random/boot_id", 128) or "").strip()
    return text if BOOT_ID.fullmatch(text) else None


def load_psutil() -> Any:
    """The host's psutil, or None: the collector never needs it (see ``HostStats``)."""
    try:
        import psutil  # type: ignore[import-untyped]
    except Exception:  # noqa: BLE001 - absent, or broken on this host: /proc serves
        return None
    return psutil


class HostStats:
    """The host's CPU busy (% of all CPUs since the last read) and RAM in use (total less
    available), from psutil where the host has it, else from ``/proc/stat`` and
    ``/proc/meminfo`` computed the way psutil does on Linux."""

    def __init__(self, psutil: Any = None, proc: str = "/proc", own_thread: bool = False
                 ) -> None:
        self.psutil = psutil
        self.proc = proc
        self.last: tuple[float, float] | None = None  # (busy, total) CPU time, /proc path
        self.primed = False
        self.read_at = -HOST_STATS_S
        self.own_read_at = -OWN_CPU_S
        self.own_cpu_s: float | None = None
        # run in a thread of gpudash's own process: its own CPU is that thread's
        self.own_thread = own_thread
        self.values: Json = {}

    @property
    def uses_psutil(self) -> bool:
        return self.psutil is not None

    def read(self) -> Json:
        """{"cpu_pct", "mem_used_mib", "mem_total_mib", "collector_cpu_s"}: the same
        values (and dict) for ``HOST_STATS_S`` after each reading (a CPU % over less than
        that is noise). ``collector_cpu_s``: CPU seconds this collector and the programs it
        waited for (systemctl, nvidia-smi) used since it started, every ``OWN_CPU_S``."""
        now = time.monotonic()
        if now - self.read_at < HOST_STATS_S:
            return self.values
        self.read_at = now
        cpu = self._cpu_psutil() if self.psutil is not None else self._cpu_proc()
        used, total = self._mem_psutil() if self.psutil is not None else self._mem_proc()
        primed, self.primed = self.primed, True
        if now - self.own_read_at >= OWN_CPU_S:
            self.own_read_at = now
            t = os.times()
            mine = time.thread_time() if self.own_thread else t[0] + t[1]
            self.own_cpu_s = round(mine + t[2] + t[3], 2)
        self.values = {
            "cpu_pct": round(cpu, 1) if primed and cpu is not None else None,
            "mem_used_mib": used,
            "mem_total_mib": total,
            "collector_cpu_s": self.own_cpu_s,
        }
        return self.values

    def _cpu_psutil(self) -> float | None:
        try:
            return float(self.psutil.cpu_percent(interval=None))
        except Exception:  # noqa: BLE001 - a host's psutil may fail where /proc works
            return self._cpu_proc()

    def _mem_psutil(self) -> tuple[int | None, int | None]:
        try:
            mem = self.psutil.virtual_memory()
            return (mem.total - mem.available) // MIB, mem.total // MIB
        except Exception:  # noqa: BLE001
            return self._mem_proc()

    def _cpu_proc(self) -> float | None:
        """psutil.cpu_percent: busy = all but idle and iowait; guest is inside user."""
        line = (_read(self.proc + "/stat", 512) or "").split("\n", 1)[0].split()
        if len(line) < 9 or line[0] != "cpu":
            return None
        try:
            ticks = [float(x) for x in line[1:9]]  # user nice system idle iowait irq softirq steal
        except ValueError:
            return None
        total = sum(ticks)
        busy = total - ticks[3] - ticks[4]
        last, self.last = self.last, (busy, total)
        if last is None or total <= last[1]:
            return None if last is None else 0.0
        return min(100.0, max(0.0, 100.0 * (busy - last[0]) / (total - last[1])))

    def _mem_proc(self) -> tuple[int | None, int | None]:
        fields: dict[str, int] = {}
        for line in (_read(self.proc + "/meminfo", 8192) or "").splitlines():
            key, _, value = line.partition(":")
            parts = value.split()
            if parts and parts[0].isdigit():
                fields[key] = int(parts[0]) * 1024
        total = fields.get("MemTotal")
        if total is None:
            return None, None
        available = fields.get("MemAvailable")
        if available is None:  # kernel < 3.14: psutil estimates the same way
            kinds = ("MemFree", "Active(file)", "Inactive(file)", "SReclaimable")
            available = sum(fields.get(k, 0) for k in kinds)
        return (total - min(total, available)) // MIB, total // MIB
