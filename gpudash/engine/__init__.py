"""The action engine: plan, execute, verify.

``plan`` builds the exact plan from one snapshot; ``run`` carries it out through
``HostControl`` and follows the memory; ``report`` is what came of it. Nothing here knows
of Textual: the dashboard, the CLI and tests drive it the same way.
"""

from gpudash.engine.plan import (
    ACTION_TITLES,
    PROCESS_ACTIONS,
    UNIT_ACTIONS,
    ActionKind,
    ActionPlan,
    PlanError,
    Step,
    Target,
    plan_action,
    plan_changes,
    replan,
)
from gpudash.engine.report import ActionReport, GpuOutcome, Leftover, Progress, unit_state
from gpudash.engine.run import ExecOptions, ProgressFn, execute, reverify

__all__ = [
    "ACTION_TITLES",
    "PROCESS_ACTIONS",
    "UNIT_ACTIONS",
    "ActionKind",
    "ActionPlan",
    "ActionReport",
    "ExecOptions",
    "GpuOutcome",
    "Leftover",
    "PlanError",
    "Progress",
    "ProgressFn",
    "Step",
    "Target",
    "execute",
    "plan_action",
    "plan_changes",
    "replan",
    "reverify",
    "unit_state",
]
