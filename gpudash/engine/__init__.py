"""The action engine: plan, execute, verify.

``actions`` is the registry of every action's ``spec`` (title, key, what it needs,
precheck, planner: ``planners`` and ``container_plans``); ``plan`` and ``steps`` are what
a plan is; ``run`` carries it out through ``HostControl`` (with ``options``) and follows
the memory against the goals ``proof`` picks, reading a started unit's ``journal``;
``verdict`` explains what is left; ``report`` is what came of it. Nothing here knows of
Textual: the dashboard, the CLI and tests drive it the same way.

Its names are read from their modules when first asked for (PEP 562): the dashboard at
rest plans and shows, and loads the run (``run``, ``run_io``, ``verdict``, the proofs)
only when an action is carried out.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from gpudash.engine.carry_out import execute, reverify
    from gpudash.engine.options import REVERIFY, ExecOptions, ProgressFn, ReverifyPolicy
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

_WHERE = {
    "actions": "ACTION_TITLES PROCESS_ACTIONS SPECS SPECS_BY_NAME UNIT_ACTIONS ActionSpec "
               "Needs plan_action replan selected_owner selection_for",
    "carry_out": "execute reverify",
    "options": "REVERIFY ExecOptions ProgressFn ReverifyPolicy",
    "plan": "STARTING ActionKind ActionPlan Phase PlanError Selection Serving plan_changes",
    "report": "ActionReport GpuOutcome Leftover Progress unit_state",
    "spec": "container_of container_ref unit_of unit_ref",
    "steps": "Signal Step Systemctl",
    "target": "Target",
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names.split()}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:  # a submodule (``from gpudash.engine import fit``) is imported so
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # asked once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULE_OF))

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
