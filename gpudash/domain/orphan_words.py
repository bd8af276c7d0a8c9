"""Orphans in words: what the orphaned subtrees of an owner were, one line per cause (the
unit panel's warnings and a plan's notes say the same)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpudash.domain.model import Process
from gpudash.domain.owners import Orphan
from gpudash.domain.owners.service import what
from gpudash.domain.tree import ProcessTree
from gpudash.domain.units import gib


def orphan_summaries(procs: Sequence[Process], orphans_of: Mapping[int, Orphan],
                     tree: ProcessTree) -> list[str]:
    """What the orphaned subtrees among ``procs`` were, in words, one line per cause: the
    top process of each, what happened to it, and what it and the orphans under it hold
    ("VLLM::EngineCore 3703 lost its API server (pid 3700 gone); it and 1 more hold
    58.6 GiB")."""
    by_cause: dict[str, list[int]] = {}
    held: dict[str, int] = {}
    for p in procs:
        o = orphans_of.get(p.pid)
        if o is None:
            continue
        if o.root not in by_cause.get(o.cause, ()):
            by_cause.setdefault(o.cause, []).append(o.root)
        held[o.cause] = held.get(o.cause, 0) + p.total_gpu_memory_mib
    lines = []
    for cause, roots in by_cause.items():
        members = sum(1 for p in procs if (o := orphans_of.get(p.pid)) and o.cause == cause)
        tops = [tree.by_pid[r] for r in roots if r in tree.by_pid]
        if len(tops) == 1:
            more = members - 1
            who = f"it and {more} more hold" if more else "it holds"
            lines.append(f"{what(tops[0])} {cause}; {who} {gib(held[cause])}")
        else:
            names = ", ".join(what(t) for t in tops[:3]) + (", ..." if len(tops) > 3 else "")
            lines.append(f"{members} processes ({names}) {cause.removeprefix('is ')}; "
                         f"they hold {gib(held[cause])}")
    return lines
