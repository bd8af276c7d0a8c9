"""What the demo's driver says beyond its processes: memory no process holds (a leak, set
by a test or a scenario), each GPU's MIG, display and persistence mode, what the
collector checked of unexplained memory, and ``nvidia-smi --gpu-reset`` as the driver
does it: refused, in nvidia-smi's words, while anything holds the GPU, else the leak is
given back."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudash.protocol.source import CommandResult

if TYPE_CHECKING:
    from gpudash.demo.records import Json
    from gpudash.demo.sim import HostSimulation

DEV_SLACK_MIB = 1024  # the collector scans device files past this much unexplained


class DemoDriver:
    """A GPU's leak and modes, and the reset; the rest is the simulation's."""

    def __init__(self) -> None:
        self.leaks: dict[int, int] = {}  # GPU -> MiB used that no process holds
        self.mig: set[int] = set()  # GPUs with MIG enabled
        self.display: set[int] = set()  # GPUs a display is on

    def dress(self, wire: Json, sim: HostSimulation) -> Json:
        """``wire`` (the simulation's snapshot, fresh) with the leaks in the GPUs' used
        memory, their modes, and what the collector checked."""
        wire["pid_view"] = "full"
        files = {g for p in sim.processes.values() for g, mib in p.device_mib.items() if mib}
        for key, gpu in wire["gpus"].items():
            index = int(key)
            leak = self.leaks.get(index, 0)
            gpu["memory_used_mib"] += leak
            gpu["process_list"] = "read"
            gpu["mig_mode"] = "on" if index in self.mig else "off"
            gpu["display_active"] = "on" if index in self.display else "off"
            gpu["persistence_mode"] = "on"
            if index in files:
                gpu["device_scan"] = "held"
            elif leak > DEV_SLACK_MIB:
                gpu["device_scan"] = "clear"
        return wire

    def reset(self, sim: HostSimulation, gpu: int, refused: str | None) -> CommandResult:
        """``nvidia-smi --gpu-reset -i GPU``."""
        argv = ("nvidia-smi", "--gpu-reset", "-i", str(gpu))
        if refused is not None:
            return CommandResult(argv, 1, refused)
        if not 0 <= gpu < 8:
            return CommandResult(argv, 6, "No devices were found\n")
        bus = f"00000000:{0x18 + 0x10 * gpu:02X}:00.0"
        if any(gpu in p.gpu_memory_mib or p.device_mib.get(gpu) for p in sim.processes.values()):
            return CommandResult(argv, 255, (
                f"GPU {bus} is currently in use by another process.\n\n1 device is currently "
                "being used by one or more other processes (e.g., Fabric Manager, CUDA "
                "application, graphics application such as an X server, or a monitoring "
                "application such as another instance of nvidia-smi). Please first kill all "
                "processes using this device and all compute applications running in the "
                "system.\n"))
        self.leaks.pop(gpu, None)
        return CommandResult(argv, 0, f"GPU {bus} was successfully reset.\n")


LEAKS = {0: 4096, 3: 6144}  # the "leak" scenario's: GPU 0 beside alice's kernel, GPU 3 alone
