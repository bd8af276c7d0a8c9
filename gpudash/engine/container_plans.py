"""The planners of the container actions: stop, restart policy off, remove, reclaim,
and start / restart (fit-checked, the restart policy put back as it was, proven running
with its memory back on its GPUs).
"""

from __future__ import annotations

from dataclasses import replace

from gpudash.domain.model import Container, HostSnapshot
from gpudash.domain.owners import (
    Owner,
    OwnerCapability,
    container_members,
    container_owner,
)
from gpudash.domain.triage import (
    holds,
)
from gpudash.engine import fit
from gpudash.engine.goals import container_memory
from gpudash.engine.plan import (
    DISABLING,
    STOPPING,
    ActionKind,
    ActionPlan,
    Phase,
    PlanError,
    Selection,
)
from gpudash.engine.planners import does_not_fit, left_alone, new_plan, pin, startable
from gpudash.engine.spec import ActionSpec, container_of, container_ref
from gpudash.engine.steps import ContainerCommand, Signal, Step
from gpudash.engine.target import Target, expected_free
from gpudash.serving.modelservers import answers_health


def container_only(snapshot: HostSnapshot, sel: Selection) -> str | None:
    named = container_of(sel)
    if named is None:
        return "select a stopped container"
    c = snapshot.container(named)
    if c is not None and not c.is_down:
        return f"{c.label} is {c.state}: stop or reclaim it first"
    return None


CONTAINER_STOP_TIMEOUT_S = 10  # docker stop's own default between SIGTERM and SIGKILL


def require_container(snapshot: HostSnapshot, ref: str | None) -> Owner:
    if not ref:
        raise PlanError("select a container first")
    owner = container_owner(snapshot, ref)
    if owner is None or owner.container is None:
        raise PlanError(f"container {ref} is not known on {snapshot.host} (its runtime did "
                        "not report it)")
    return owner


def plan_container(spec: ActionSpec, snapshot: HostSnapshot, sel: Selection) -> ActionPlan:
    """stop / restart policy off / stop + policy off / reclaim / remove of one container."""
    owner = require_container(snapshot, container_of(sel))
    c = owner.container
    assert c is not None
    kind = spec.kind
    members = container_members(snapshot, c)
    notes: list[str] = []
    steps = _commands(owner, kind, notes)
    alive_members = [p for p in members if p.start_ticks is not None and p.pid != 1]
    targets: list[Target] = []
    if kind is ActionKind.RECLAIM:
        # Whatever of its cgroup is alive now is pinned; stop takes the container, the
        # signals take what escaped it (re-parented to PID 1, or left by a removed one).
        targets = [pin(snapshot, p) for p in alive_members]
        steps += [Signal(t, escalate=True) for t in targets]
        expected = expected_free(snapshot, targets)
    elif kind in STOPPING:
        escaped = [p for p in alive_members if p.ppid == 1]
        kept = [p for p in alive_members if p not in escaped]
        expected = expected_free(snapshot, (pin(snapshot, p) for p in kept))
        if any(holds(p) for p in escaped):
            notes.append(f"{len(escaped)} process(es) escaped from {owner.describe()} to PID 1: "
                         f"{c.runtime} stop will not end them; reclaim, or reap afterwards.")
    else:
        expected = {}
    if kind is ActionKind.DISABLE:
        notes.append("Restart policy off changes only what the daemon does when it exits; "
                     "nothing stops now.")
    if c.is_down and kind in STOPPING:
        notes.append(f"{owner.describe()} is already {c.state}.")
    plan = new_plan(
        spec, snapshot, Selection(owner=container_ref(c.id)), owner.describe(),
        steps=tuple(steps),
        expected_free_mib=expected,
        notes=tuple(notes),
        untouched=left_alone(snapshot, targets or [pin(snapshot, p) for p in members]),
        container_before=c,
    )
    return replace(plan, title=f"{spec.title_of(owner.kind)}: {plan.subject}")


def _commands(owner: Owner, kind: ActionKind, notes: list[str]) -> list[Step]:
    """The runtime's verbs for ``kind``, in order; what it cannot do goes to ``notes``."""
    c = owner.container
    assert c is not None
    steps: list[Step] = []

    def command(verb: str) -> ContainerCommand:
        return ContainerCommand(c.runtime, verb, c.id, c.label, CONTAINER_STOP_TIMEOUT_S)

    # Policy off first: a container whose main process dies while it is being stopped
    # must not be restarted by the daemon meanwhile.
    if kind in DISABLING:
        if owner.can(OwnerCapability.DISABLE):
            if (c.restart_policy or "no") != "no" or kind is ActionKind.DISABLE:
                steps.append(command("no-restart"))
        else:
            notes.append(f"{c.runtime} cannot turn a restart policy off here (podman update "
                         f"has no --restart): it stays {c.restart_policy or 'unknown'}; "
                         f"{c.runtime} stop marks it stopped, so it stays down until started.")
    if kind in STOPPING and not c.is_down:
        steps.append(command("stop"))
    if kind is ActionKind.REMOVE:
        if not c.is_down:
            raise PlanError(f"{owner.describe()} is {c.state}: stop or reclaim it first")
        steps.append(command("rm"))
    return steps


def plan_container_start(spec: ActionSpec, snapshot: HostSnapshot, sel: Selection
                         ) -> ActionPlan:
    """start / restart of one container: the restart policy gpudash turned off put back
    (``sel.restart_policy``, from the audit), the fit checked before a start, then
    ``docker start`` (``restart``) and proof that it runs with its memory back."""
    owner = require_container(snapshot, container_of(sel))
    c = owner.container
    assert c is not None
    if not owner.can(OwnerCapability.START):
        raise PlanError(owner.unable(OwnerCapability.START))
    restart = spec.kind is ActionKind.RESTART
    if not restart and (why := startable(snapshot, sel)):
        raise PlanError(why)

    def command(verb: str, policy: str | None = None) -> ContainerCommand:
        return ContainerCommand(c.runtime, verb, c.id, c.label, CONTAINER_STOP_TIMEOUT_S,
                                policy)

    steps: list[Step] = []
    notes: list[str] = []
    policy = sel.restart_policy
    if policy and policy != (c.restart_policy or "no"):
        if owner.can(OwnerCapability.DISABLE):  # the runtime can change a policy (docker)
            steps.append(command("restart-policy", policy))
            notes.append(f"Restart policy {c.restart_policy or 'no'} -> {policy}: put back "
                         "as it was before gpudash turned it off.")
        else:
            notes.append(f"{c.runtime} cannot change a restart policy here: it stays "
                         f"{c.restart_policy or 'unknown'} (it was {policy}).")
    steps.append(command("restart" if restart else "start"))
    url = container_ready_url(c, sel.ready_url)
    notes.append(f"Ready when: {url} answers 200 from {c.label}'s own listener." if url else
                 "No ready URL (no published port, or an image not known to answer /health): "
                 "proven running, not by a health check.")
    now = container_memory(snapshot, c)
    footprint = dict(sel.footprint or {}) or (now if restart else {})
    freed = now if restart else {}
    freed_pids = {p.pid for p in container_members(snapshot, c)} if restart else set()
    need = fit.Need(footprint, "learned when it last ran here" if sel.footprint else
                    "what it holds now") if footprint else None
    lines, problems = fit.check(snapshot, need, freed, freed_pids)
    if need is None:
        lines = ["not checked: what it holds is not known yet (learned when gpudash stops "
                 "or starts it with proof)"]
    if problems and not sel.force:
        raise does_not_fit(owner.describe(), problems)
    if problems:
        lines = ["FORCED: started although it does not fit: " + "; ".join(problems)]
    plan_steps = tuple(steps)
    kind = ActionKind.RESTART if restart else ActionKind.START
    plan = new_plan(
        spec, snapshot,
        Selection(owner=container_ref(c.id), footprint=footprint or None, force=sel.force,
                  restart_policy=sel.restart_policy, ready_url=sel.ready_url),
        owner.describe(),
        steps=plan_steps,
        phases=(Phase("start", kind, plan_steps),),
        notes=tuple(notes),
        container_before=c,
        fit=tuple(lines),
    )
    return replace(plan, title=f"{spec.title_of(owner.kind)}: {plan.subject}")


def container_ready_url(c: Container, given: str | None) -> str | None:
    """The URL that proves a started container serves: the one given, else ``/health``
    on the host port it publishes where its image is a server that answers there (a
    notebook's or an app's container has no such route); None: neither is known."""
    if given:
        return given
    if c.port is None or not answers_health(c.image):
        return None
    return f"http://127.0.0.1:{c.port}/health"
