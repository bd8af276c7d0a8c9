"""Owners with no manager gpudash can ask: login sessions (and the tmux or nohup jobs in
them), transient scopes, a user's own services, and no unit at all.

Nothing there is a service, so nothing there is stopped; what is there is somebody's live
work. The one exception is a model server that lost its API server (the OOM killer's
SIGKILL, vLLM #55510): its engine and workers keep the GPUs and nothing will ever free
them. That is told from the server's own structure, which vLLM and SGLang give on
purpose: a process titled as a server's engine or worker (``VLLM::EngineCore``,
``VLLM::Worker*``, ``sglang::scheduler*``) whose server lineage has no API server above it,
and either was re-parented to PID 1 or lost its process-group leader (the API server
leads the group its engine and workers are in). A solo nohup job, a notebook kernel, a
live server and its tree, and anything under another user's own systemd are never orphans.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpudash.domain.model import HostSnapshot, Process, Unit
from gpudash.domain.owners.kinds import BaseRules, Orphan, Owner, OwnerCapability, OwnerKind
from gpudash.domain.owners.service import user_manager
from gpudash.domain.tree import ProcessTree
from gpudash.serving.processes import Role, server_process

_SERVER_PARTS = (Role.ENGINE, Role.WORKER)


def lost_server(p: Process, tree: ProcessTree) -> Orphan | None:
    """Why ``p`` belongs to a model server whose API server is gone, or None."""
    known = server_process(p.cmdline, p.name)
    if known is None or known.role not in _SERVER_PARTS:
        return None
    top = p
    for parent in tree.ancestors(p):
        role = server_process(parent.cmdline, parent.name)
        if role is None or role.role not in _SERVER_PARTS:
            if role is not None and role.role is Role.API:
                return None  # its API server is alive: a live server
            break
        top = parent
    leader_gone = top.pgid is not None and top.pgid != top.pid and not tree.alive(top.pgid)
    if top.ppid != 1 and not leader_gone:
        return None  # no evidence of a loss: leave it be
    evidence = ([f"pid {top.pgid} gone"] if leader_gone else []) + (
        ["re-parented to PID 1"] if top.ppid == 1 else [])
    return Orphan(top.pid, f"lost its API server ({', '.join(evidence)})")


class _NoManager(BaseRules):
    """The rules shared by owners gpudash has no manager to ask: named by their unit."""

    def recognize(self, p: Process, snapshot: HostSnapshot, units: Mapping[str, Unit]
                  ) -> Owner | None:
        if not p.unit or not self.claims_unit(p.unit):
            return None
        return Owner(self.kind, p.unit, self, unit=units.get(p.unit))

    def orphans(self, owner: Owner, members: Sequence[Process], tree: ProcessTree
                ) -> Mapping[int, Orphan]:
        out: dict[int, Orphan] = {}
        for p in members:
            if p.pid in tree.holding:
                why = lost_server(p, tree)
                if why is not None:
                    out[p.pid] = why
        return out

    def warnings(self, owner: Owner, orphan_count: int, respawned: bool) -> tuple[str, ...]:
        if orphan_count:
            return (f"{orphan_count} process(es) of a model server whose API server is gone "
                    "still hold GPU memory: reap them.",)
        return ()


class SessionRules(_NoManager):
    kind = OwnerKind.SESSION
    personal = True

    def claims_unit(self, name: str) -> bool:
        return name.startswith("session-") and name.endswith(".scope")

    def about(self, owner: Owner) -> str:
        return "a login session: somebody's live work; reap never touches it"

    def holder(self, owner: Owner, p: Process, process: str) -> str:
        return f"{p.user or '?'}'s {owner.key}"

    def unable(self, owner: Owner, capability: OwnerCapability) -> str:
        return (f"{owner.key} is a login session: somebody's live work; signal its "
                "processes")


class ScopeRules(_NoManager):
    kind = OwnerKind.SCOPE

    def claims_unit(self, name: str) -> bool:
        return name.endswith(".scope")

    def about(self, owner: Owner) -> str:
        return "a transient scope"

    def unable(self, owner: Owner, capability: OwnerCapability) -> str:
        return f"{owner.key} (a transient scope) cannot {capability.value}: signal its processes"


class NoOwnerRules(_NoManager):
    """The fallback: nothing named the process's owner; each process stands for itself."""

    kind = OwnerKind.NONE
    nobody = True
    key = "no unit"

    def recognize(self, p: Process, snapshot: HostSnapshot, units: Mapping[str, Unit]
                  ) -> Owner | None:
        return Owner(self.kind, self.key, self)

    def about(self, owner: Owner) -> str:
        return "no systemd unit owns these processes"

    def holder(self, owner: Owner, p: Process, process: str) -> str:
        return process

    def unable(self, owner: Owner, capability: OwnerCapability) -> str:
        return "no unit or container owns it: select a process to signal"


class UserServiceRules(_NoManager):
    """A user's own systemd (``user@UID.service``): their services, their rootless
    containers' helpers. gpudash neither acts on it nor calls anything there an orphan:
    it cannot ask that user's manager."""

    kind = OwnerKind.USER_SERVICE

    def recognize(self, p: Process, snapshot: HostSnapshot, units: Mapping[str, Unit]
                  ) -> Owner | None:
        if not p.unit or not self.claims_unit(p.unit):
            return None
        key = f"{p.unit}/{p.user_unit}" if p.user_unit else p.unit
        return Owner(self.kind, key, self, user_uid=p.user_uid, user=p.user)

    def claims_unit(self, name: str) -> bool:
        return user_manager(name)

    def describe(self, owner: Owner) -> str:
        return f"{owner.user or owner.user_uid}'s own systemd: {owner.key}"

    def unable(self, owner: Owner, capability: OwnerCapability) -> str:
        return (f"{self.describe(owner)}: gpudash does not act on a user's own services "
                f"(as that user: systemctl --user {capability.value} ...)")

    def orphans(self, owner: Owner, members: Sequence[Process], tree: ProcessTree
                ) -> Mapping[int, Orphan]:
        return {}  # not inspected as that user: never reaped
