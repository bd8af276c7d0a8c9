"""Will what is started fit? Checked before every start (start, restart, swap; u, R, w).

What a model takes per GPU is, in this order: its learned footprint (what it held when it
last served on this host), else what its own arguments say it will take (vLLM takes
``--gpu-memory-utilization`` × total on each of its ``--tensor-parallel-size`` GPUs;
SGLang ``--mem-fraction-static`` on ``--tp-size``), on the GPUs its unit's
``CUDA_VISIBLE_DEVICES`` names, else on the GPUs with the most room (the server's choice is
not known then: the check is the best case, so it never refuses what could fit). Every
GPU short of room is named with who holds it.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpudash.domain.model import HostSnapshot, Process, Unit
from gpudash.domain.triage import label
from gpudash.domain.units import gib
from gpudash.serving.processes import server_process

# (server, memory fraction flags, its default, tensor-parallel flags)
_ARGS = {
    "vLLM": (("--gpu-memory-utilization",), 0.9, ("--tensor-parallel-size", "-tp")),
    "SGLang": (("--mem-fraction-static",), 0.88, ("--tp-size", "--tp")),
}


@dataclass(frozen=True, slots=True)
class Need:
    """What a start needs: MiB per GPU, where known, and how that was found out."""

    mib_per_gpu: Mapping[int, int]  # GPU -> MiB; GPUs not known: see ``any_gpus``
    source: str  # "learned when it last served here", "--gpu-memory-utilization 0.9"
    any_gpus: int = 0  # > 0: this many GPUs, whichever have the room, need ``each_mib``
    each_mib: int = 0


def _flag(words: list[str], names: Iterable[str]) -> str | None:
    for i, w in enumerate(words):
        for name in names:
            if w == name and i + 1 < len(words):
                return words[i + 1]
            if w.startswith(name + "="):
                return w.split("=", 1)[1]
    return None


def estimate(unit: Unit, snapshot: HostSnapshot) -> Need | None:
    """What ``unit``'s server says it will take, from its ExecStart; None: not a server
    whose arguments say it (or the GPUs' totals are not reported)."""
    if not unit.exec_start:
        return None
    try:
        words = shlex.split(unit.exec_start)
    except ValueError:
        words = unit.exec_start.split()
    known = server_process(unit.exec_start)
    if known is None or known.server not in _ARGS:
        return None
    fraction_flags, default, tp_flags = _ARGS[known.server]
    try:
        fraction = float(_flag(words, fraction_flags) or default)
        tp = int(_flag(words, tp_flags) or 1)
    except ValueError:
        return None
    if not (0 < fraction <= 1 and 0 < tp <= len(snapshot.gpus)):
        return None
    said = f"{fraction_flags[0]} {fraction:g} × {tp} GPU(s), from its ExecStart"
    gpus = unit.visible_gpus
    totals = {g.index: g.memory_total_mib for g in snapshot.gpus}
    if gpus is not None:
        chosen = gpus[:tp]
        if any(totals.get(g) is None for g in chosen):
            return None
        return Need({g: int(fraction * (totals[g] or 0)) for g in chosen},
                    f"{said} (CUDA_VISIBLE_DEVICES={unit.cuda_visible_devices})")
    known_totals = [t for t in totals.values() if t is not None]
    if not known_totals:
        return None
    return Need({}, f"{said}; which GPUs is not said (no CUDA_VISIBLE_DEVICES)",
                any_gpus=tp, each_mib=int(fraction * min(known_totals)))


def need_of(unit: Unit, snapshot: HostSnapshot, learned: Mapping[int, int] | None
            ) -> Need | None:
    if learned:
        return Need(dict(learned), "learned when it last served here")
    return estimate(unit, snapshot)


def _holders(snapshot: HostSnapshot, gpu: int, freed: set[int]) -> str:
    staying: list[Process] = [p for p in snapshot.processes if p.pid not in freed
                              and (p.gpu_memory_mib.get(gpu) or gpu in p.device_gpus)]
    return ", ".join(f"{p.user or '?'}'s {label(p) or p.name} (pid {p.pid}) "
                     f"holds {gib(p.gpu_memory_mib.get(gpu))}" for p in staying) \
        or "nobody listed"


def check(snapshot: HostSnapshot, need: Need | None, freed_mib: Mapping[int, int],
          freed_pids: set[int]) -> tuple[list[str], list[str]]:
    """(fit lines for the plan, problems: one per GPU short of room, with its holders)
    of ``need`` beside what stays once ``freed_mib`` (per GPU) is given back."""
    if need is None:
        return ["not checked: no learned footprint, and its ExecStart does not say what "
                "it takes (it is learned when it serves)"], []
    free = {g.index: g.memory_total_mib - g.memory_used_mib + freed_mib.get(g.index, 0)
            for g in snapshot.gpus
            if g.memory_total_mib is not None and g.memory_used_mib is not None}
    if need.any_gpus:
        roomy = sorted(free, key=lambda g: (-free[g], g))[:need.any_gpus]
        short = [g for g in roomy if free[g] < need.each_mib]
        if len(roomy) == need.any_gpus and not short:
            return [f"fits: {gib(need.each_mib)} on each of {need.any_gpus} GPU(s) "
                    f"({', '.join(f'GPU{g}' for g in sorted(roomy))} have the room; "
                    f"{need.source})"], []
        enough = sum(1 for g in free if free[g] >= need.each_mib)
        problems = [f"needs {gib(need.each_mib)} on each of {need.any_gpus} GPU(s) "
                    f"({need.source}); {enough} have that much free"]
        problems += [f"GPU{g}: {gib(free[g])} will be free; {_holders(snapshot, g, freed_pids)}"
                     for g in sorted(short)]
        return [], problems
    problems = []
    for gpu, mib in sorted(need.mib_per_gpu.items()):
        if gpu not in free:
            problems.append(f"GPU{gpu}: not reported by the host")
        elif free[gpu] < mib:
            problems.append(f"GPU{gpu}: needs {gib(mib)}, {gib(free[gpu])} will be free; "
                            f"{_holders(snapshot, gpu, freed_pids)}")
    if problems:
        return [], problems
    top = max(need.mib_per_gpu.values(), default=0)
    return [f"fits: up to {gib(top)} per GPU on {len(need.mib_per_gpu)} GPU(s), "
            f"{need.source}"], []
