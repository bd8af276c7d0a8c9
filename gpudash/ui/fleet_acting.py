"""Acting from the fleet table: the orphans of every host it shows with orphans reaped
(ctrl+o), or one unit reclaimed on every host shown (ctrl+r: a model taken off a rack).
Each host is planned on its own, one dialog lists every plan, then host after host, each
planned again from a fresh sample, audited and proven as ``gpudash reap HOST...`` (or
``reclaim``) does; each host's row says where it stands, and its verdict is its row's Last
action and an Action log entry.

The action session (``gpudash.session``) is the one every action goes through; this only
walks it over several hosts. A host whose plan changed while the dialog was read is not
reaped (its row says so): the operator confirmed another plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpudash.engine import (
    ActionKind,
    ActionPlan,
    PlanError,
    Progress,
    Selection,
    replan,
    unit_of,
    unit_ref,
)
from gpudash.protocol.source import SourceError
from gpudash.record import record
from gpudash.session import lifecycle
from gpudash.session.controller import outcome_line
from gpudash.session.lifecycle import Ended
from gpudash.ui.screens import ConfirmModal
from gpudash.ui.widgets.action_log import entry_title

if TYPE_CHECKING:
    from textual.app import App

    from gpudash.ui.state import Dashboard

@record
class Batch:
    """One action over several hosts."""

    kind: ActionKind
    selection: Selection
    title: str  # the notices' (no host text: a notice's title is not shown literally)
    verb: str  # "reap": "nothing to reap"
    done: str  # "reaped": "not reaped" (a host left alone)

    @property
    def heading(self) -> str:
        """The dialog's title (shown as a Text: literally)."""
        unit = unit_of(self.selection)
        return self.title if unit is None else f"Reclaim {unit} on the hosts shown"


REAP = Batch(ActionKind.REAP, Selection(), "Reap the orphans of the hosts shown", "reap",
             "reaped")
TITLE = REAP.title


def reclaim(unit: str) -> Batch:
    """``unit`` stopped, disabled and its leftovers reaped on every host shown."""
    return Batch(ActionKind.RECLAIM, Selection(owner=unit_ref(unit)),
                 "Reclaim a unit on the hosts shown", "reclaim", "reclaimed")


def units_held(state: Dashboard, hosts: Sequence[int]) -> list[tuple[str, int, int]]:
    """(unit, hosts, MiB) of every system service holding GPU memory on ``hosts``, the
    most widespread first: what ctrl+r offers."""
    found: dict[str, tuple[int, int]] = {}
    for index in hosts:
        triage = state.views[index].triage
        for group in () if triage is None else triage.groups:
            if group.service is not None and group.total_gpu_memory_mib > 0:
                count, mib = found.get(group.key, (0, 0))
                found[group.key] = (count + 1, mib + group.total_gpu_memory_mib)
    return sorted(((u, n, m) for u, (n, m) in found.items()), key=lambda x: (-x[1], -x[2], x[0]))


async def plans_of(state: Dashboard, hosts: Sequence[int], batch: Batch = REAP
                   ) -> tuple[list[tuple[int, ActionPlan]], list[tuple[str, str]]]:
    """(each host's plan, (host, why not) of the others), on the samples on screen."""
    plans: list[tuple[int, ActionPlan]] = []
    skipped: list[tuple[str, str]] = []
    for index in hosts:
        view = state.views[index]
        if view.snapshot is None:
            skipped.append((view.name, "no sample yet"))
            continue
        request = lifecycle.Request(batch.kind, batch.selection, snapshot=view.snapshot)
        plan = await lifecycle.prepare(request, view.source.control, view.name, _NoPorts())
        if isinstance(plan, Ended):
            skipped.append((view.name, plan.why))
        else:
            plans.append((index, plan))
    return plans, skipped


def dialog_lines(state: Dashboard, plans: Sequence[tuple[int, ActionPlan]],
                 skipped: Sequence[tuple[str, str]], batch: Batch = REAP) -> list[str]:
    """Every host's plan, one after the other, under its name; then who is left alone."""
    lines: list[str] = [f"{len(plans)} host(s), one after the other, each proven:", ""]
    for index, plan in plans:
        lines.append(f"== {state.views[index].name}")
        lines += [f"  {line}" for line in plan.describe(state.exec_options.term_timeout)]
        lines.append("")
    if skipped:
        lines.append(f"Not {batch.done}:")
        lines += [f"  {name}: {why}" for name, why in skipped]
    return lines


async def reap_hosts(app: App[int], state: Dashboard, hosts: Sequence[int]) -> None:
    """Plan, ask once, and reap ``hosts`` one after the other (the fleet's key)."""
    await act_on_hosts(app, state, hosts, REAP)


async def act_on_hosts(app: App[int], state: Dashboard, hosts: Sequence[int],
                       batch: Batch) -> None:
    """Plan ``batch`` on each of ``hosts``, ask once, then act host after host."""
    if state.running or state.read_only:
        why = "read-only mode" if state.read_only else "another action is running"
        app.notify(f"{why}; nothing done", title=batch.title, severity="warning")
        return
    plans, skipped = await plans_of(state, hosts, batch)
    if not plans:
        said = "; ".join(f"{n}: {why}" for n, why in skipped) or "no host shown"
        app.notify(f"nothing to {batch.verb} ({said})", title=batch.title, markup=False)
        return
    keys = (state.key_of("confirm.yes"), state.key_of("confirm.no"),
            state.key_of("confirm.escape"))
    lines = dialog_lines(state, plans, skipped, batch)
    if not await app.push_screen_wait(ConfirmModal(batch.heading, lines, keys)):
        for index, plan in plans:
            state.log_action(state.views[index].name, _title(plan),
                             "cancelled: nothing was done", None)
        return
    state.running = True
    total = len(plans)
    for n, (index, plan) in enumerate(plans, 1):  # every row says where it stands
        state.show_running(state.views[index].name, _title(plan), f"queued ({n} of {total})")
    try:
        for n, (index, plan) in enumerate(plans, 1):
            await _act_one(app, state, index, plan, f"{n} of {total}", batch)
    finally:
        state.running = False


async def _act_one(app: App[int], state: Dashboard, index: int, plan: ActionPlan,
                   turn: str, batch: Batch) -> None:
    view = state.views[index]
    control = view.source.control
    title = _title(plan)
    state.show_running(view.name, title, f"planning again on a fresh sample ({turn})")
    try:  # what the operator confirmed, on the host as it is now
        plan, changes = replan(plan, await control.sample())
    except (PlanError, SourceError) as exc:
        state.log_action(view.name, title, f"not {batch.done}: {exc}", False)
        return
    if changes:
        state.log_action(view.name, title, f"not {batch.done}: the host changed while the plan "
                         "was read (" + "; ".join(changes) + ")", False)
        return
    running = state.controller.begin(plan, index, act=True)
    outcome = await state.controller.run(
        running, control, on_progress=lambda p: state.show_running(
            view.name, title, f"{doing(p)} ({turn})"),
        on_audit_error=lambda why: app.notify(why, title="Audit", severity="warning"))
    state.controller.finished(index, outcome.report, outcome.error)
    if outcome.report is None:
        state.log_action(view.name, title, f"failed: {outcome.error}", False)
        return
    state.log_action(view.name, title, outcome_line(outcome.report),
                     outcome.report.verdict == "confirmed", outcome.report.describe()[1:])


def doing(progress: Progress) -> str:
    """A host's progress in a few words, for its fleet row."""
    alive = f", {len(progress.alive_pids)} alive" if progress.alive_pids else ""
    kill = (f", KILL in {progress.term_left_s:.0f} s" if progress.term_left_s is not None
            else "")
    return f"{progress.phase}{alive}{kill}"


def _title(plan: ActionPlan) -> str:
    return entry_title(plan.kind.value, plan.subject)


class _NoPorts:
    """A reap or reclaim asks nothing while it is planned (only a start picks a model)."""

    asks = True

    async def confirm(self, plan: ActionPlan, lines: list[str]) -> bool | None:
        raise AssertionError("a fleet action is confirmed once, for every host")

    async def pick(self, source: str, candidates: Sequence[lifecycle.Candidate],
                   enable: bool) -> lifecycle.Picked | None:
        return None
