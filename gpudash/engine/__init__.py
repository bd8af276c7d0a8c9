"""The action engine: plan, execute, verify.

``actions`` is the registry of every action's ``spec`` (title, key, what it needs,
precheck, planner: ``planners`` and ``container_plans``); ``plan`` and ``steps`` are what
a plan is; ``run`` carries it out through ``HostControl`` (with ``options``) and follows
the memory against the goals ``proof`` picks, reading a started unit's ``journal``;
``verdict`` explains what is left; ``report`` is what came of it. Nothing here knows of
Textual: the dashboard, the CLI and tests drive it the same way.
"""

from gpudash.engine.actions import (
    ACTION_TITLES,
    PROCESS_ACTIONS,
    SPECS,
    SPECS_BY_NAME,
    UNIT_ACTIONS,
    ActionSpec,
    Needs,
    plan_action,
    replan,
    selected_owner,
    selection_for,
)
from gpudash.engine.execute import (
    REVERIFY,
    ExecOptions,
    ProgressFn,
    ReverifyPolicy,
    execute,
    reverify,
)
from gpudash.engine.plan import (
    STARTING,
    ActionKind,
    ActionPlan,
    Phase,
    PlanError,
    Selection,
    Serving,
    plan_changes,
)
from gpudash.engine.report import ActionReport, GpuOutcome, Leftover, Progress, unit_state
from gpudash.engine.spec import container_of, container_ref, unit_of, unit_ref
from gpudash.engine.steps import Signal, Step, Systemctl
from gpudash.engine.target import Target

__all__ = [
    "ACTION_TITLES",
    "PROCESS_ACTIONS",
    "REVERIFY",
    "ReverifyPolicy",
    "SPECS",
    "SPECS_BY_NAME",
    "STARTING",
    "Phase",
    "Serving",
    "UNIT_ACTIONS",
    "ActionKind",
    "ActionPlan",
    "ActionReport",
    "ActionSpec",
    "ExecOptions",
    "GpuOutcome",
    "Leftover",
    "Needs",
    "PlanError",
    "Progress",
    "ProgressFn",
    "Selection",
    "Signal",
    "Step",
    "Systemctl",
    "Target",
    "container_of",
    "container_ref",
    "execute",
    "plan_action",
    "plan_changes",
    "replan",
    "reverify",
    "selected_owner",
    "selection_for",
    "unit_of",
    "unit_ref",
    "unit_state",
]
