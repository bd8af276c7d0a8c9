"""Acting on a plan, or re-verifying one: the engine's two entry points.

A ``Run`` (``gpudash.engine.run``) carries the plan out and proves it; these say which
kind of run and hand back its report.
"""

from __future__ import annotations

from gpudash.engine.options import REVERIFY, ExecOptions, ProgressFn, ReverifyPolicy
from gpudash.engine.plan import ActionPlan
from gpudash.engine.report import ActionReport
from gpudash.engine.run import Run
from gpudash.protocol.source import HostControl

__all__ = ["REVERIFY", "ExecOptions", "ProgressFn", "ReverifyPolicy", "execute", "reverify"]


async def execute(
    plan: ActionPlan,
    control: HostControl,
    options: ExecOptions | None = None,
    progress: ProgressFn | None = None,
    *,
    report: ActionReport | None = None,
) -> ActionReport:
    """Carry out ``plan`` and follow the memory until it is confirmed back or explained.

    Pass ``report`` to keep hold of it if the task is cancelled: it is then marked
    ``interrupted`` with everything sent so far, and ``CancelledError`` propagates.
    """
    run = Run(plan, control, options or ExecOptions(), progress, report)
    return await run.go(act=True)


async def reverify(
    plan: ActionPlan,
    control: HostControl,
    options: ExecOptions | None = None,
    progress: ProgressFn | None = None,
    *,
    report: ActionReport | None = None,
) -> ActionReport:
    """After a link loss left ``plan``'s outcome unknown: follow the memory again, act never.

    Nothing is re-sent: a signal that may or may not have arrived is not repeated on a
    guess. The report says what the host shows now, per GPU and per pinned process.
    """
    run = Run(plan, control, options or ExecOptions(), progress, report)
    result = await run.go(act=False)
    result.reverified = True
    if not result.unknown:
        result.summary = "re-verified after reconnecting: " + result.summary
    return result
