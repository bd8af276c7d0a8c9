"""Memory no process holds, per GPU: how much, what was checked on the host to say so,
and whether a GPU reset may give it back (and if not, why not).

Memory can stay used on a GPU with no process in NVML's list: a driver-level leak, a
context torn down mid-kernel, a holder the collector cannot see (another PID namespace,
hidepid). Only memory and the process list are proof (a stuck GPU's utilisation may stay
high), so what is said here rests on them and on what the collector could read: NVML's
process list, the ``/dev/nvidia*`` files of every process, which processes it sees.
"""

from __future__ import annotations

from gpudash.domain.model import UNREADABLE, Gpu, HostSnapshot, Process
from gpudash.domain.triage import unattributed_mib
from gpudash.domain.units import gib
from gpudash.record import record

NOTABLE_MIB = 256  # less than this unexplained is driver noise, not worth a line
DEVICE_SCAN_MIN_MIB = 1024  # the collector reads device files only past this (DEV_SLACK_MIB)

_LIST = {
    "denied": "NVML refused this login its process list (run with --sudo or as root)",
    "unsupported": "the driver cannot list this GPU's processes",
    "error": "NVML's process list failed",
}
_PID_VIEW = {
    "hidepid": "/proc is mounted with hidepid: other users' processes are hidden from this "
               "login (run with --sudo or as root)",
    "namespace": "the collector runs in a child PID namespace and sees only its processes "
                 "(run gpudash on the host itself)",
}


@record
class Unheld:
    """One GPU's memory that no listed process accounts for."""

    gpu: int
    mib: int  # used memory no process the driver lists accounts for
    checks: tuple[str, ...]  # what was checked on the host, a line each
    holders: tuple[str, ...]  # who holds the GPU all the same (a listed process, a file)
    blockers: tuple[str, ...]  # why a GPU reset is not for it; (): nothing holds it
    notes: tuple[str, ...]  # what a reset's plan must say (persistence mode)

    @property
    def resettable(self) -> bool:
        return not self.blockers


def _name(p: Process) -> str:
    return f"pid {p.pid} ({p.name or '?'}, {p.user or '?'})"


def _holders(snapshot: HostSnapshot, gpu: int) -> tuple[list[str], list[str]]:
    """Who holds ``gpu``: the processes NVML lists on it, and those holding its device
    file that NVML does not list."""
    listed, files = [], []
    for p in snapshot.processes:
        if gpu in p.device_gpus:
            files.append(f"{_name(p)} holds /dev/nvidia{gpu} (not listed by the driver)")
        elif gpu in p.gpu_memory_mib:
            mib = p.gpu_memory_mib[gpu]
            why = f": {UNREADABLE.get(p.unreadable, p.unreadable)}" if p.unreadable else ""
            listed.append(f"{_name(p)} holds {gib(mib) if mib is not None else 'memory'} "
                          f"on GPU {gpu}{why}")
    return listed, files


def _checks(snapshot: HostSnapshot, g: Gpu, mib: int, listed: list[str], files: list[str]
            ) -> tuple[list[str], list[str]]:
    """(what was checked, a line each; why a reset is not proven safe)."""
    checks: list[str] = []
    blockers: list[str] = []
    if g.process_list == "read":
        checks.append(f"NVML's process list: read; it lists {len(listed)} process(es) on it"
                      if listed else "NVML's process list: read; it lists no process on it")
    elif g.process_list is None:
        checks.append("NVML's process list: not said by this host's collector")
        blockers.append("whether NVML lists a process on it is not known")
    else:
        checks.append(f"NVML's process list: not read: {_LIST[g.process_list]}")
        blockers.append(_LIST[g.process_list])
    scan = g.device_scan
    if scan == "clear":
        checks.append(f"/dev/nvidia{g.index}: every process's open files and mappings "
                      "read; none holds it")
    elif scan == "held":
        checks.append(f"/dev/nvidia{g.index}: held by {len(files)} process(es) NVML does "
                      "not list")
    elif scan == "partial":
        checks.append(f"/dev/nvidia{g.index}: no holder found, but some processes' open "
                      "files were not readable (run with --sudo or as root)")
        blockers.append("not every process's open files could be read")
    elif mib <= DEVICE_SCAN_MIN_MIB:
        checks.append(f"/dev/nvidia{g.index}: not scanned (under "
                      f"{gib(DEVICE_SCAN_MIN_MIB)} unexplained)")
        blockers.append(f"its device files were not scanned (under "
                        f"{gib(DEVICE_SCAN_MIN_MIB)} unexplained)")
    else:
        checks.append(f"/dev/nvidia{g.index}: not scanned yet")
        blockers.append("its device files were not scanned yet")
    view = snapshot.pid_view
    if view == "full":
        checks.append("PIDs: the collector sees every process")
    elif view is None:
        checks.append("PIDs: which processes the collector sees is not said")
        blockers.append("which processes the collector sees is not known")
    else:
        checks.append(f"PIDs: {_PID_VIEW[view]}")
        blockers.append(_PID_VIEW[view])
    return checks, blockers


def unheld_memory(snapshot: HostSnapshot, at_least_mib: int = NOTABLE_MIB
                  ) -> dict[int, Unheld]:
    """Per GPU with at least ``at_least_mib`` used that no listed process accounts for:
    how much, what was checked, and whether a reset may give it back."""
    out: dict[int, Unheld] = {}
    for index, mib in unattributed_mib(snapshot).items():
        g = snapshot.gpu(index)
        if g is not None and mib >= at_least_mib:
            out[index] = unheld_on(snapshot, g, mib)
    return out


def unheld_on(snapshot: HostSnapshot, g: Gpu, mib: int | None) -> Unheld:
    """GPU ``g``'s memory no process holds (``mib``; None: unknown, a holder's memory is
    not known) and whether a reset may give it back."""
    listed, files = _holders(snapshot, g.index)
    checks, unproven = _checks(snapshot, g, mib or 0, listed, files)
    # the reason that matters first: the GPU is lost, someone holds it, nothing to give back
    blockers = [*([g.error] if g.error else []), *listed, *files]
    if mib is None or mib < NOTABLE_MIB:
        blockers.append("no memory that no process holds to give back")
    blockers += unproven
    if g.mig_mode != "off":
        blockers.append("MIG is enabled: a reset ends every MIG instance's work"
                        if g.mig_mode == "on" else "whether MIG is enabled is not known")
    if g.display_active != "off":
        blockers.append("a display is active on it (the console's GPU)"
                        if g.display_active == "on" else "whether a display is on it is not known")
    notes = []
    if g.persistence_mode == "on":
        notes.append("persistence mode is on: where nvidia-persistenced keeps the GPU open "
                     "the driver refuses the reset (\"In use by another client\"); gpudash "
                     "leaves the mode as it is")
    elif g.persistence_mode == "off":
        notes.append("persistence mode is off: the driver may unload the GPU's state once "
                     "the reset is done; its first use then takes longer")
    return Unheld(g.index, mib or 0, tuple(checks), tuple(listed + files), tuple(blockers),
                  tuple(notes))


def reset_candidate(snapshot: HostSnapshot) -> int | None:
    """The GPU a reset is offered for when none is picked: the one with the most memory
    no process holds, a resettable one first; None: no GPU has any."""
    unheld = unheld_memory(snapshot)
    if not unheld:
        return None
    return max(unheld.values(), key=lambda u: (u.resettable, u.mib, -u.gpu)).gpu
