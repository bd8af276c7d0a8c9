"""A GPU reset (``nvidia-smi --gpu-reset -i N``): the memory no process holds given back.

Planned only where nothing holds the GPU: no process in NVML's list (an unreadable one
counts), no process with its ``/dev/nvidia*`` file, every process visible to the
collector and every one's files read; not where MIG is enabled (a reset ends every
instance's work) nor where a display is on it. Refused otherwise, with the reason (the
holder named). Proven as any freeing action: the GPU's used memory back to what its
processes account for (none: its baseline), within the slack.
"""

from __future__ import annotations

from gpudash.domain.model import Gpu, HostSnapshot
from gpudash.domain.triage import unattributed_mib
from gpudash.domain.unheld import NOTABLE_MIB, Unheld, unheld_on
from gpudash.domain.units import gib
from gpudash.engine.plan import ActionPlan, PlanError, Selection
from gpudash.engine.planners import left_alone, new_plan
from gpudash.engine.spec import ActionSpec
from gpudash.engine.steps import GpuReset

TITLE = "Reset GPU (memory no process holds)"


def reset_refusal(snapshot: HostSnapshot, sel: Selection) -> str | None:
    """Why GPU ``sel.gpu`` may not be reset now (the first reason), or None."""
    try:
        _unheld(snapshot, sel)
    except PlanError as exc:
        return str(exc)
    return None


def _unheld(snapshot: HostSnapshot, sel: Selection) -> tuple[Gpu, Unheld]:
    if sel.gpu is None:
        raise PlanError("select the unattributed row (memory no process holds)")
    g = snapshot.gpu(sel.gpu)
    if g is None:
        raise PlanError(f"{snapshot.host} has no GPU {sel.gpu}")
    unheld = unheld_on(snapshot, g, unattributed_mib(snapshot).get(g.index))
    if unheld.blockers:
        raise PlanError(f"GPU {g.index} not reset: {unheld.blockers[0]}",
                        tuple(f"GPU {g.index} not reset: {b}" for b in unheld.blockers))
    return g, unheld


def plan_gpu_reset(spec: ActionSpec, snapshot: HostSnapshot, sel: Selection) -> ActionPlan:
    g, unheld = _unheld(snapshot, sel)
    # back to baseline: what its processes hold (none) and the driver's own, which a
    # GPU nobody uses shows too (under NOTABLE_MIB: the unattributed row's threshold)
    back = max(0, unheld.mib - NOTABLE_MIB)
    notes = (f"nothing holds GPU {g.index} ({'; '.join(unheld.checks)})",
             f"proven when GPU {g.index}'s used memory is back to its baseline: under "
             f"{gib(NOTABLE_MIB)} (the driver's own) once nothing holds it",
             *unheld.notes,
             "a reset clears the GPU's whole state (its ECC volatile counts too); every "
             "other GPU is left as it is")
    return new_plan(spec, snapshot, Selection(gpu=g.index), f"GPU {g.index}",
                    steps=(GpuReset(g.index, g.uuid),),
                    expected_free_mib={g.index: back}, notes=notes,
                    untouched=left_alone(snapshot, ()))
