"""What proves a Slurm node's drain or resume: its state as ``scontrol show node`` reports
it, read afresh by the host with every sample the engine asks for (the Slurm kind's facts
of the node). A drain is proven by DRAIN (DRAINING while jobs still run, DRAINED once none
does) with the reason sent; a resume by no DRAIN any more."""

from __future__ import annotations

from gpudash.domain.model import HostSnapshot
from gpudash.domain.owners.slurm import node_facts
from gpudash.domain.owners.slurm_node import DRAIN, reason_matches, running_jobs, state_of
from gpudash.engine.goals import Goal, GoalState, GoalStatus
from gpudash.engine.plan import ActionPlan
from gpudash.engine.steps import NodeCommand


class NodeState(Goal):
    """The node ``node`` drained with ``reason`` (``reason`` None: resumed, not drained)."""

    def __init__(self, node: str, reason: str | None) -> None:
        self.node = node
        self.reason = reason
        self.title = "node drained" if reason is not None else "node resumed"

    def check(self, snap: HostSnapshot, elapsed: float) -> GoalStatus:
        facts = node_facts(snap)
        error = facts.get("error")
        if facts.get("node") != self.node or not facts.get("node_state") or error:
            said = f": {error}" if isinstance(error, str) else ""
            return GoalStatus(self.title, GoalState.PENDING,
                              f"Slurm did not say {self.node}'s state{said}")
        now = state_of(snap)
        drained = bool(facts.get("drain"))
        if self.reason is None:
            if drained:
                return GoalStatus(self.title, GoalState.PENDING, f"{self.node} is {now}")
            return GoalStatus(self.title, GoalState.MET,
                              f"scontrol show node {self.node}: {now}")
        reason = facts.get("reason")
        if not drained or not reason_matches(reason if isinstance(reason, str) else None,
                                             self.reason):
            return GoalStatus(self.title, GoalState.PENDING, f"{self.node} is {now}")
        jobs = running_jobs(snap)
        still = (f"; {len(jobs)} job(s) run on until they end: no new one starts"
                 if jobs else "")
        return GoalStatus(self.title, GoalState.MET,
                          f"scontrol show node {self.node}: {now}{still}")


def node_goal(plan: ActionPlan) -> NodeState:
    """The goal of a node plan: its one ``NodeCommand``'s."""
    (step,) = [s for s in plan.steps if isinstance(s, NodeCommand)]
    return NodeState(step.node, step.reason if step.verb == DRAIN else None)
