"""One action from the operator's choice to its audited outcome, written once for every
front end (no Textual, no terminal here).

    prepare   what the plan needs from the host first (a swap's target and whether to
              enable it, what proves a started unit serves, the text of a unit to fix),
              then the plan
    confirm   ask; plan again from a fresh sample, so an answer given minutes later acts
              on the host as it is then; ask again when what would be sent changed
    carry out audit the intent (or nothing is sent), execute, re-verify an outcome a lost
              link left unknown (never re-sent), audit the outcome, learn the footprint
              (``gpudash.session.controller``)

A front end drives it through ``Ports``: ``confirm`` (show the lines, answer yes, no, or
None: nobody is there to ask), ``pick`` (a swap's target among ``Candidate`` units, and
whether to enable it). What ends an action before anything is sent is an ``Ended``, with
the text both front ends say; the CLI turns its kind into an exit code.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from gpudash.domain.model import HostSnapshot, SourceKind, Unit, unit_name
from gpudash.domain.owners.slurm_node import drain_reason
from gpudash.engine import (
    SPECS,
    STARTING,
    ActionKind,
    ActionPlan,
    PlanError,
    Selection,
    container_of,
    fit,
    replan,
    selected_owner,
    unit_of,
)
from gpudash.protocol.source import Capability, HostControl, ModelUnit, SourceError
from gpudash.record import record
from gpudash.session.audit import audit_path, operator
from gpudash.session.controller import serving_request
from gpudash.session.history import read_records
from gpudash.state import footprints

POLICY_TAIL_BYTES = 4 << 20  # the audit's recent part, where a policy turned off is found
MAX_REPLANS = 3  # the host keeps changing while the operator reads the plan: stop asking


class Ending(enum.Enum):
    """Why an action ended before anything was sent."""

    PLAN = "plan"  # the plan makes no sense on this host (or the host changed so)
    UNREACHABLE = "unreachable"  # the host could not be read
    NOBODY = "nobody"  # nobody to ask (no terminal) and not told to act without asking
    DECLINED = "declined"
    NOT_PICKED = "not picked"  # a swap's target picker was closed
    KEEPS_CHANGING = "keeps changing"
    BUSY = "busy"  # another action started meanwhile (the dashboard runs one at a time)


@record
class Ended:
    kind: Ending
    why: str  # one line
    lines: tuple[str, ...] = ()  # the same over several, where it has them
    # a start refused because it does not fit: this request would start it anyway (forced)
    forced: Request | None = None

    def said(self) -> list[str]:
        """What to show: its lines, else its one."""
        return list(self.lines) or [self.why]


@record
class Candidate:
    """A model unit a swap can start, as the host and the footprint store know it."""

    name: str
    state: str
    enabled: str
    port: int | None
    description: str
    footprint_mib: int | None  # learned, per GPU (the largest)
    restart: str | None = None  # the unit's Restart= (always: a failing start loops)
    ready_s: float | None = None  # learned: seconds from start to serving
    unit: ModelUnit | None = None  # as the host said it (its port: the ready URL's)
    fit: str | None = None  # whether it fits once the old model is reclaimed, in words


@record
class Picked:
    unit: str
    enable: bool
    read: ModelUnit | None = None  # the candidate's unit as the host said it


class Ports(Protocol):
    """What a front end answers for the session."""

    asks: bool  # False: act on the plan as made (``--yes``): it is only shown

    async def confirm(self, plan: ActionPlan, lines: list[str]) -> bool | None:
        """Show ``lines`` (news, then the plan) and ask. None: nobody to ask."""
        ...

    async def pick(self, source: str, candidates: Sequence[Candidate],
                   enable: bool) -> Picked | None:
        """A swap's target among ``candidates`` (``enable``: the default, as the unit
        reclaimed is). None: nothing picked."""
        ...


# --- prepare -------------------------------------------------------------------------


@record
class Request:
    """What the operator asked for, before the host was asked what the plan needs."""

    kind: ActionKind
    selection: Selection
    enable: bool | None = None  # start/swap: None: a swap keeps the old unit's; start: no
    ready_url: str | None = None  # start/swap: --ready-url
    snapshot: HostSnapshot | None = None  # plan from this one (the screen's), else fresh
    reason: str | None = None  # a drain: why, in the operator's words (--reason, the prompt)


async def prepare(request: Request, control: HostControl, host: str, ports: Ports,
                  models: Sequence[str] = ()) -> ActionPlan | Ended:
    """The plan of ``request``, from what the host says now; or why there is none."""
    try:
        if request.kind in STARTING:
            return await _prepare_start(request, control, host, ports, models)
        if request.kind is ActionKind.FIX:
            return await _prepare_fix(request, control, host)
        snapshot = request.snapshot or await control.sample()
        selection = request.selection
        if request.kind is ActionKind.DRAIN:  # Slurm's reason says gpudash and who drained
            selection = dataclasses.replace(selection, reason=drain_reason(
                operator()["operator"], request.reason))
        return SPECS[request.kind].plan(snapshot, selection)
    except PlanError as exc:
        return Ended(Ending.PLAN, str(exc), exc.lines)
    except SourceError as exc:
        return Ended(Ending.UNREACHABLE, f"{host}: {exc}")


def forced(request: Request, chosen: Selection) -> Request:
    """The request that starts ``chosen`` although it does not fit (nothing picked again:
    the swap's target is named)."""
    return dataclasses.replace(request, selection=dataclasses.replace(chosen, force=True),
                               enable=chosen.enable, ready_url=chosen.ready_url,
                               snapshot=None)


async def _prepare_start(request: Request, control: HostControl, host: str, ports: Ports,
                         models: Sequence[str]) -> ActionPlan | Ended:
    """start / restart / swap: the target (a swap's, picked when not named), its enablement,
    its ready URL and learned footprint; the host told to report it; a fresh plan."""
    sel = request.selection
    first = request.snapshot or await control.sample()
    simulated = first.source is SourceKind.DEMO
    if request.kind is not ActionKind.SWAP and container_of(sel) is not None:
        return await _prepare_container_start(request, control, first, host)
    target = sel.target if request.kind is ActionKind.SWAP else unit_of(sel)
    enable = request.enable
    read = None
    if request.kind is ActionKind.SWAP:
        if enable is None:  # a swap leaves the host as it found it: enabled if the old was
            enable = _enabled(first, unit_of(sel))
        if target is None:
            picked = await _pick(control, host, first, sel, ports, enable, models, simulated)
            if isinstance(picked, Ended):
                return picked
            target, enable, read = picked.unit, picked.enable, picked.read
    if target is None:
        raise PlanError("no unit to start")
    control.watch_unit(target)  # a unit to start must be in the snapshot it is planned from
    url, learned = await serving_request(control, host, target, ready_url=request.ready_url,
                                         simulated=simulated, models=models, read=read)
    snapshot = await control.sample()
    chosen = dataclasses.replace(
        sel, ready_url=url, footprint=learned, enable=bool(enable),
        target=target if request.kind is ActionKind.SWAP else None)
    try:
        return SPECS[request.kind].plan(snapshot, chosen)
    except PlanError as exc:
        if not exc.forceable:
            raise
        return Ended(Ending.PLAN, str(exc), exc.lines, forced(request, chosen))


async def _prepare_container_start(request: Request, control: HostControl,
                                   snapshot: HostSnapshot, host: str) -> ActionPlan:
    """start / restart of a container: what it held when it last ran here (the fit), and
    the restart policy it had before gpudash turned it off (the audit says). A stopped
    container no process names is looked up on the host first, and watched from then on."""
    sel = request.selection
    named = container_of(sel) or ""
    c = snapshot.container(named)
    if c is None and Capability.CONTAINER_LOOKUP in control.capabilities:
        found = await control.find_container(named)
        if found is None:
            raise PlanError(f"no container {named} on {host} (neither docker nor "
                            "podman knows it)")
        snapshot = await control.sample()
        c = snapshot.container(found[1])
    simulated = snapshot.source is SourceKind.DEMO
    learned = None
    policy = None
    if c is not None:
        fp = footprints.lookup(host, f"{c.runtime}:{c.label}",
                               footprints.store_path(simulated=simulated))
        learned = dict(fp.mib_per_gpu) if fp else None
        policy = policy_before(audit_path(simulated=simulated), host, c.id)
    return SPECS[request.kind].plan(snapshot, dataclasses.replace(
        sel, footprint=sel.footprint or learned, restart_policy=policy,
        ready_url=request.ready_url or sel.ready_url))


def policy_before(path: Path, host: str, container_id: str) -> str | None:
    """The restart policy ``container_id`` had before gpudash last turned it off on
    ``host`` (None: gpudash never did, or something else changed it since)."""
    records, _ = read_records(path, tail_bytes=POLICY_TAIL_BYTES)
    for rec in reversed(records):
        if rec.get("record") != "outcome" or rec.get("host") != host:
            continue
        before, after = rec.get("container_before"), rec.get("container_after")
        if not isinstance(before, dict) or before.get("id") != container_id:
            continue
        if rec.get("action") in ("start", "restart"):
            return None  # started since: nothing of gpudash's left to undo
        old = before.get("restart_policy")
        now = after.get("restart_policy") if isinstance(after, dict) else None
        if isinstance(old, str) and old != "no" and now == "no":
            return old
    return None


def _enabled(snapshot: HostSnapshot, unit: str | None) -> bool:
    found = next((u for u in snapshot.units if u.name == unit), None)
    return found is not None and (found.unit_file_state or "").startswith("enabled")


async def _pick(control: HostControl, host: str, snapshot: HostSnapshot, sel: Selection,
                ports: Ports, enable: bool, models: Sequence[str],
                simulated: bool) -> Picked | Ended:
    source = unit_of(sel) or ""
    if (named := container_of(sel)) is not None:
        owner = selected_owner(snapshot, sel)
        source = owner.describe() if owner is not None else named
    found = await candidates(control, host, models, simulated=simulated, leave_out=source)
    if not found:
        return Ended(Ending.PLAN, "no other model-server units on this host")
    found = fits_after(snapshot, sel, found, host, simulated)
    picked = await ports.pick(source, found, enable)
    if picked is None:
        return Ended(Ending.NOT_PICKED, "nothing picked: nothing done")
    read = next((c.unit for c in found if c.name == picked.unit), None)
    return dataclasses.replace(picked, read=read)  # its port is known: not asked again


def fits_after(snapshot: HostSnapshot, sel: Selection, found: list[Candidate], host: str,
               simulated: bool) -> list[Candidate]:
    """Each candidate with whether it fits once ``sel`` (the model swapped from) is
    reclaimed, as the swap's plan will check it: the picker shows it before anything."""
    try:
        reclaim = SPECS[ActionKind.RECLAIM].plan(snapshot, Selection(owner=sel.owner))
        freed, pids = dict(reclaim.expected_free_mib), {t.pid for t in reclaim.targets}
    except PlanError:
        freed, pids = {}, set()
    path = footprints.store_path(simulated=simulated)
    out = []
    for c in found:
        unit = snapshot.unit(c.name) or Unit(
            c.name, exec_start=c.unit.exec_start if c.unit else None)
        fp = footprints.lookup(host, c.name, path)
        lines, problems = fit.check(snapshot, fit.need_of(
            unit, snapshot, fp.mib_per_gpu if fp else None), freed, pids)
        short = [p for p in problems if p.startswith("GPU") or p.startswith("needs")]
        verdict = ("fits" if lines and lines[0].startswith("fits") else
                   "fit not known" if not problems else
                   "does not fit: " + (short[0] if short else problems[0]))
        out.append(dataclasses.replace(c, fit=verdict))
    return out


async def candidates(control: HostControl, host: str, models: Sequence[str], *,
                     simulated: bool, leave_out: str = "") -> list[Candidate]:
    """The model units ``host`` has (but ``leave_out``), with what was learned of each."""
    if Capability.MODEL_UNITS not in control.capabilities:
        return []
    path = footprints.store_path(simulated=simulated)
    out = []
    for m in await control.model_units(models):
        if m.name == leave_out:
            continue
        fp = footprints.lookup(host, m.name, path)
        out.append(Candidate(m.name, m.active_state or "?", m.unit_file_state or "?", m.port,
                             m.description or "",
                             max(fp.mib_per_gpu.values()) if fp else None, m.restart,
                             fp.ready_s if fp else None, m))
    return out


async def _prepare_fix(request: Request, control: HostControl, host: str) -> ActionPlan:
    """fix: ``systemctl cat`` of the unit read first (the confirm shows the diff)."""
    unit = unit_of(request.selection)
    if Capability.DROP_IN not in control.capabilities or unit is None:
        raise PlanError(f"{host}: this host cannot be given a drop-in")
    control.watch_unit(unit)
    snapshot = await control.sample()
    text = await control.unit_text(unit)
    # what was learned here: the drop-in's TimeoutStopSec is what its stop time needs
    learned = footprints.learned(host, footprints.store_path(
        simulated=snapshot.source is SourceKind.DEMO))
    return SPECS[ActionKind.FIX].plan(snapshot, dataclasses.replace(
        request.selection, unit_text=text, learned=learned.get(unit_name(unit))))


# --- confirm -------------------------------------------------------------------------


async def confirm(plan: ActionPlan, control: HostControl, ports: Ports,
                  term_timeout: float) -> ActionPlan | Ended:
    """Ask; then plan again from a fresh sample, so an answer given later never acts on a
    stale baseline; ask again (at most ``MAX_REPLANS`` times) if what would be sent
    changed meanwhile. The plan to carry out, or why nothing is done."""
    if not ports.asks:
        await ports.confirm(plan, plan.describe(term_timeout))
        return plan
    news: list[str] = []
    for _ in range(MAX_REPLANS):
        answer = await ports.confirm(plan, news + plan.describe(term_timeout))
        if answer is None:
            return Ended(Ending.NOBODY, "not a terminal and no --yes: nothing done")
        if not answer:
            return Ended(Ending.DECLINED, "declined: nothing done")
        try:
            plan, changes = replan(plan, await control.sample())
        except PlanError as exc:
            return Ended(Ending.PLAN, f"the host changed while you read the plan: {exc}; "
                         "nothing done")
        except SourceError as exc:
            return Ended(Ending.UNREACHABLE, f"the host could not be checked again: {exc}; "
                         "nothing done")
        if not changes:
            return plan
        news = ["The host changed while you read the plan:", *[f"  * {c}" for c in changes],
                "Confirm the plan as it is now:", ""]
    return Ended(Ending.KEEPS_CHANGING, "the plan keeps changing; nothing done")
