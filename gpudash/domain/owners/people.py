"""Owners with no manager gpudash can ask: login sessions (and the tmux or nohup jobs in
them), transient scopes, a user's own services, and no unit at all.

Nothing there is a service, so nothing there is stopped; what is there is somebody's live
work. The one exception is a model server that lost its API server (the OOM killer's
SIGKILL, vLLM #55510): its engine and workers keep the GPUs and nothing will ever free
them. That is told from the server's own structure, which the servers give on purpose
(``gpudash.serving.processes``): a process titled as a server's engine or worker
(``VLLM::EngineCore``, ``sglang::scheduler_TP0``, a TGI shard, an Ollama runner, an MPI
rank) whose chain of such parts has no API server above it, and whose top shows the loss:
re-parented (to PID 1, a subreaper such as ``systemd --user`` or tmux, a process outside
its group, anything but the server that alone starts it) or its group's leader gone; a
``llama-server`` only when the wrapper leading its group is gone and it was adopted. A
solo nohup job, a notebook kernel, a live server and its tree, and anything under
another user's own systemd are never orphans.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from gpudash.domain.model import HostSnapshot, Process, Unit
from gpudash.domain.owners.kinds import BaseRules, Orphan, Owner, OwnerCapability, OwnerKind
from gpudash.domain.owners.service import user_manager, what
from gpudash.domain.tree import ProcessTree
from gpudash.serving.processes import Role, ServerProcess, server_process

_SERVER_PARTS = (Role.ENGINE, Role.WORKER)
# The processes that adopt orphans besides PID 1 (PR_SET_CHILD_SUBREAPER): a user's own
# systemd, a container's init, tmux. None of them starts a server's engine or worker
# itself: one of them as its parent is a re-parenting.
_ADOPTERS = re.compile(
    r"^(?:\S*/)?(?:systemd|init|tini(?:-static)?|dumb-init|catatonit|docker-init"
    r"|s6-svscan|tmux(?::|\b))(?:\s|$)")


def _adopter(p: Process) -> bool:
    return bool(_ADOPTERS.match(p.cmdline or p.name))


def _reparented(top: Process, known: ServerProcess, tree: ProcessTree) -> str | None:
    """How ``top`` (the topmost process of a server part) shows it lost the process that
    started it, in words; None: nothing shows it."""
    if top.ppid == 1:
        return "re-parented to PID 1"
    parent = tree.parent(top)
    if parent is None:
        return None  # a parent the snapshot does not list: nothing can be said
    if _adopter(parent):
        return f"re-parented to {what(parent)}"
    # a child is born in its parent's process group; one that did not make its own group
    # and is not in its parent's was adopted (by a subreaper, or a shell that is one)
    if (top.pgid is not None and parent.pgid is not None and top.pgid != top.pid
            and top.pgid != parent.pgid):
        return f"re-parented to {what(parent)}, outside its group {top.pgid}"
    if known.born_of is not None:
        by = server_process(parent.cmdline, parent.name)
        if by is None or by.server != known.born_of or by.role is not Role.API:
            return f"re-parented to {what(parent)}, not its {known.born_of} server"
    return None


def lost_server(p: Process, tree: ProcessTree) -> Orphan | None:
    """Why ``p`` belongs to a model server whose API server is gone, or None.

    An incarnation of a server is its API server and what it started: the chain of its
    titled parts above ``p`` (``VLLM::Worker`` -> ``VLLM::EngineCore``), and their process
    group, led by whoever started the server. It is dead when the top of that chain has no
    API server above it and shows that it lost its parent: re-parented (to PID 1, a
    subreaper, a process outside its group, or anything but the server that alone starts
    it) or its group's leader gone. A live API server above it, or leading its group, is
    a live incarnation: never flagged."""
    known = server_process(p.cmdline, p.name)
    if known is None or known.role not in (*_SERVER_PARTS, Role.WHOLE):
        return None
    top, top_known = p, known
    if known.role is not Role.WHOLE:
        for parent in tree.ancestors(p):
            if _adopter(parent):
                break  # ``tini -- vllm serve`` names a server: it is not one
            role = server_process(parent.cmdline, parent.name)
            if role is None or role.role not in _SERVER_PARTS:
                if role is not None and role.role in (Role.API, Role.WHOLE):
                    return None  # its API server is alive: a live server
                break
            top, top_known = parent, role
    leader = tree.by_pid.get(top.pgid) if top.pgid is not None else None
    if leader is not None and leader.pid != top.pid and not _adopter(leader):
        led = server_process(leader.cmdline, leader.name)
        if led is not None and led.role in (Role.API, Role.WHOLE):
            return None  # its server leads its group, alive: it detached it on purpose
    leader_gone = top.pgid is not None and top.pgid != top.pid and not tree.alive(top.pgid)
    moved = _reparented(top, top_known, tree)
    if known.role is Role.WHOLE:
        # API and GPU in one: its own server. Lost only with the wrapper that started it:
        # its group's leader gone and itself adopted (a nohup'd server is its own leader)
        if not (leader_gone and moved):
            return None
        return Orphan(top.pid, f"lost its wrapper (pid {top.pgid} gone, {moved})",
                      "lost its wrapper")
    if moved is None and not leader_gone:
        return None  # no evidence of a loss: leave it be
    evidence = ([f"pid {top.pgid} gone"] if leader_gone else []) + ([moved] if moved else [])
    return Orphan(top.pid, f"lost its API server ({', '.join(evidence)})",
                  "lost its API server")


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
