"""The plan of ``fix``: gpudash's drop-in of a service, with the directives that remove
every lint finding, previewed as a diff of ``systemctl cat``; or, reverting, that file
removed. Either is followed by ``systemctl daemon-reload`` and proven on a fresh
``systemctl show``.
"""

from __future__ import annotations

from dataclasses import replace

from gpudash.domain import dropin
from gpudash.domain.lint import Finding, Learned, lint_unit
from gpudash.domain.model import HostSnapshot, Unit, unit_name
from gpudash.engine.plan import ActionKind, ActionPlan, PlanError, Selection
from gpudash.engine.planners import new_plan, require_unit
from gpudash.engine.spec import SERVICE, ActionSpec, Needs, unit_of, unit_ref
from gpudash.engine.steps import DaemonReload, DropIn

REVERT_TITLE = "Revert gpudash's unit fix"
TITLE = "Fix unit config (gpudash's drop-in)"


def findings_of(unit: Unit, learned: Learned | None = None) -> tuple[Finding, ...]:
    """The lint of a unit the operator named: linted whether or not it holds memory now,
    against what gpudash saw of its stops here (the drop-in then writes the
    TimeoutStopSec its learned stop time needs, not the default)."""
    return lint_unit(unit, holds_gpu_memory=True, learned=learned)


def fixable(findings: tuple[Finding, ...]) -> tuple[Finding, ...]:
    return tuple(f for f in findings if f.fix)


def fix_fits(snapshot: HostSnapshot, sel: Selection) -> str | None:
    """Why a fix of the selected unit cannot be planned. Without ``sel.unit_text`` (the
    dashboard's precheck: the snapshot alone) whether the lint finds what gpudash's
    drop-in removes; with it, the planner's own reasons."""
    u = snapshot.unit(unit_name(unit)) if (unit := unit_of(sel)) else None
    if u is None:
        return None  # the planner says what is wrong with the name
    if sel.unit_text is None:
        if not sel.revert and not fixable(findings_of(u, sel.learned)):
            return f"nothing to fix in {u.name}: the unit lint finds nothing gpudash writes"
        return None
    try:
        plan_fix(SPEC_FOR_FITS, snapshot, sel)
    except PlanError as exc:
        return str(exc)
    return None


def plan_fix(spec: ActionSpec, snapshot: HostSnapshot, sel: Selection) -> ActionPlan:
    """Write (or with ``sel.revert`` remove) gpudash's drop-in of the selected unit."""
    u = require_unit(snapshot, unit_of(sel))
    cat = sel.unit_text
    if cat is None:
        raise PlanError(f"the configuration of {u.name} was not read (systemctl cat)")
    path = dropin.drop_in_path(u.name)
    existing = dropin.ours_in(cat, u.name)
    picked = Selection(owner=unit_ref(u.name), revert=sel.revert, unit_text=cat,
                       learned=sel.learned)
    findings = findings_of(u, sel.learned)
    notes: list[str] = []
    if sel.revert:
        if existing is None:
            raise PlanError(f"{u.name} has no drop-in of gpudash's ({path}): nothing to revert")
        settings = dropin.parse(existing)
        notes.append(f"Only {path} is removed; the unit's own files and other drop-ins stay.")
        text = None
    else:
        settings = _merged(dropin.parse(existing or ""), dropin.directives(fixable(findings)))
        wanted = dropin.render(settings)
        if not fixable(findings):
            why = ("; ".join(f.setting for f in findings) + ": not a setting gpudash writes"
                   if findings else "the unit lint finds nothing")
            raise PlanError(f"nothing to fix in {u.name}: {why}")
        if existing is not None and existing.strip() == wanted.strip():
            raise PlanError(f"{path} already sets this, yet systemd reports otherwise: "
                            "run `systemctl daemon-reload` and look again")
        text = wanted
        notes += [f"{f.setting}: {f.why}" for f in findings if not f.fix]
        notes += [f"Once in force, {f.setting}: {f.why}"
                  for f in findings_of(_configured(u, settings), sel.learned)
                  if not f.fix and f not in findings]
    notes += _when_it_applies(u, settings)
    subject = u.name
    plan = new_plan(
        spec, snapshot, picked, subject,
        steps=(DropIn(u.name, path, text), DaemonReload(u.name)),
        notes=tuple(notes),
        unit_before=u,
        preview=dropin.preview(cat, u.name, text),
        settings=settings,
    )
    if sel.revert:
        plan = replace(plan, title=f"{REVERT_TITLE}: {subject}")
    return plan


def _configured(u: Unit, settings: tuple[dropin.Directive, ...]) -> Unit:
    """``u`` as the lint will read it with the drop-in's KillMode (what the others change
    is a fixed finding, not a new one)."""
    modes = [v for _s, k, v in settings if k == "KillMode"]
    return replace(u, kill_mode=modes[-1]) if modes else u


def _merged(old: tuple[dropin.Directive, ...], new: tuple[dropin.Directive, ...]
            ) -> tuple[dropin.Directive, ...]:
    """What gpudash's file set before, with this fix's directives over it."""
    out = {(s, k): v for s, k, v in old}
    out.update({(s, k): v for s, k, v in new})
    return tuple((s, k, v) for (s, k), v in out.items())


def _when_it_applies(u: Unit, settings: tuple[dropin.Directive, ...]) -> list[str]:
    if u.is_down:
        return ["The unit is not running: every setting applies at its next start."]
    later = dropin.applies_at_next_stop(settings)
    notes = [f"{u.name} keeps running; nothing is restarted."]
    if later:
        notes.append(f"{', '.join(later)}: in force from its next stop or restart (the "
                     "running service was started with the old values).")
    rest = sorted({k for _s, k, _v in settings} - set(later))
    if rest:
        notes.append(f"{', '.join(rest)}: in force at once, after the reload.")
    return notes


SPEC_FOR_FITS = ActionSpec(ActionKind.FIX, "fix_unit", TITLE, "", "Fix", Needs.UNIT,
                           {SERVICE: plan_fix})
