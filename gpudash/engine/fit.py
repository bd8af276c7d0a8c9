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

from gpudash.domain.model import HostSnapshot, Process, Unit
from gpudash.domain.owners import owner_of
from gpudash.domain.triage import label
from gpudash.domain.units import gib
from gpudash.domain.untrusted import clean
from gpudash.record import record
from gpudash.serving.processes import server_process

# (server, memory fraction flags, its default, tensor-parallel flags)
_ARGS = {
    "vLLM": (("--gpu-memory-utilization",), 0.9, ("--tensor-parallel-size", "-tp")),
    "SGLang": (("--mem-fraction-static",), 0.88, ("--tp-size", "--tp")),
}


@record
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


def _staying(snapshot: HostSnapshot, gpus: Iterable[int], freed: set[int]
             ) -> list[tuple[Process, int]]:
    """(process, GPU) of every holder that stays on ``gpus``."""
    wanted = set(gpus)
    return [(p, g) for p in snapshot.processes if p.pid not in freed
            for g in sorted(wanted) if p.gpu_memory_mib.get(g) or g in p.device_gpus]


def _gpus(indexes: list[int]) -> str:
    """``GPU0``, ``GPU1-7``, ``GPU0, GPU2``: runs of indexes written as ranges."""
    runs: list[list[int]] = []
    for g in sorted(indexes):
        if runs and g == runs[-1][-1] + 1:
            runs[-1].append(g)
        else:
            runs.append([g])
    return ", ".join(f"GPU{r[0]}" if len(r) == 1 else f"GPU{r[0]}-{r[-1]}" for r in runs)


def _amounts(per_gpu: Mapping[int, int | None]) -> str:
    """``92.5 GiB on GPU0, 94.5 GiB on each of GPU1-7``."""
    by_amount: dict[str, list[int]] = {}
    for g, mib in sorted(per_gpu.items()):
        by_amount.setdefault(gib(mib), []).append(g)
    return ", ".join(f"{amount} on {'each of ' if len(gs) > 1 else ''}{_gpus(gs)}"
                     for amount, gs in by_amount.items())


def in_the_way(snapshot: HostSnapshot, gpus: Iterable[int], freed: set[int]) -> list[str]:
    """Who keeps the room, owners first (what the operator decides about: a unit, a
    container, a login), then their processes. Host text is escaped here: each entry is
    one line."""
    staying = _staying(snapshot, gpus, freed)
    if not staying:
        return ["in the way: nobody listed (memory no listed process accounts for)"]
    owners: dict[str, dict[int, int | None]] = {}
    members: dict[str, list[str]] = {}
    for p, g in staying:
        owner = owner_of(p, snapshot)
        name = f"{clean(p.user or '?')}'s {clean(label(p) or p.name)} (pid {p.pid})"
        # owned by nobody: the process is the owner (a login: whose it is)
        who = name if owner.nobody else clean(owner.rules.holder(owner, p, name))
        held = owners.setdefault(who, {})
        held[g] = (held.get(g) or 0) + (p.gpu_memory_mib.get(g) or 0)
        if name != who and name not in members.setdefault(who, []):
            members[who].append(name)
    order = sorted(owners, key=lambda w: -sum(m or 0 for m in owners[w].values()))
    lines = ["in the way: " + "; ".join(f"{w} holds {_amounts(owners[w])}" for w in order)]
    for who in [w for w in order if members.get(w)]:
        names = members[who]
        more = f" and {len(names) - 6} more" if len(names) > 6 else ""
        lines.append(f"{who}: " + ", ".join(names[:6]) + more)
    return lines


def _short(need_mib: int, free_mib: int) -> str:
    """How much is missing, in MiB where GiB rounds the two to the same figure."""
    gap = need_mib - free_mib
    return f" (short by {gap} MiB)" if gib(need_mib) == gib(free_mib) else ""


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
        problems += [f"GPU{g}: {gib(free[g])} will be free{_short(need.each_mib, free[g])}"
                     for g in sorted(short)]
        way = in_the_way(snapshot, short, freed_pids)
        return [], way[:1] + problems + way[1:]
    problems, short_gpus = [], []
    lacking: dict[tuple[str, str], list[int]] = {}  # (needs, free) -> GPUs: said once
    for gpu, mib in sorted(need.mib_per_gpu.items()):
        if gpu not in free:
            problems.append(f"GPU{gpu}: not reported by the host")
        elif free[gpu] < mib:
            short_gpus.append(gpu)
            lacking.setdefault((gib(mib), f"{gib(free[gpu])} will be free"
                                + _short(mib, free[gpu])), []).append(gpu)
    problems += [f"{_gpus(gs)}: needs {needs}, {left}" + (" on each" if len(gs) > 1 else "")
                 for (needs, left), gs in lacking.items()]
    if problems:  # who is in the way, what is short, then the processes
        way = in_the_way(snapshot, short_gpus, freed_pids) if short_gpus else []
        return [], way[:1] + problems + way[1:]
    top = max(need.mib_per_gpu.values(), default=0)
    return [f"fits: up to {gib(top)} per GPU on {len(need.mib_per_gpu)} GPU(s), "
            f"{need.source}"], []
