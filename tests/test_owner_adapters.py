"""Owner kinds are adapters: one registry, asked in order; nothing else switches on a kind.

Before this contract, ``OwnerKind.SERVICE`` and its siblings were named 30 times in 9
modules outside ``gpudash/domain/owners`` (the triage, the planners, the fit check, the
metrics, the unit panel...): a new kind meant finding them all.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import pytest

import gpudash.domain.owners as owners_pkg
from gpudash.domain.model import Container, HostSnapshot, Process, Unit
from gpudash.domain.owners import (
    FALLBACK,
    KINDS,
    BaseRules,
    Owner,
    OwnerKind,
    OwnerRef,
    Stray,
    owner_of,
    service_unit,
    unit_kind,
)
from gpudash.domain.triage import Flag, triage

PACKAGE = Path(__file__).resolve().parent.parent / "gpudash"
ALLOWED = (PACKAGE / "domain" / "owners", PACKAGE / "demo")


def _named_kinds(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    return [f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: OwnerKind.{node.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "OwnerKind"]


def test_no_module_outside_the_adapters_names_a_kind() -> None:
    named = [hit for path in sorted(PACKAGE.rglob("*.py"))
             if not any(path.is_relative_to(a) for a in ALLOWED)
             for hit in _named_kinds(path)]
    assert named == [], "switch on the owner's rules, not its kind:\n" + "\n".join(named)


def test_every_kind_has_one_adapter_and_nobody_is_the_last() -> None:
    kinds = [rules.kind for rules in KINDS]
    assert sorted(kinds) == sorted(OwnerKind) and len(set(kinds)) == len(kinds)
    assert KINDS[-1] is FALLBACK and FALLBACK.nobody
    assert [r.kind for r in KINDS if r.nobody] == [FALLBACK.kind]


@pytest.mark.parametrize(("unit", "kind", "service"), [
    ("vllm.service", OwnerKind.SERVICE, True),
    ("docker-0123abcd.scope", OwnerKind.CONTAINER, False),
    ("session-4.scope", OwnerKind.SESSION, False),
    ("user@1000.service", OwnerKind.USER_SERVICE, False),
    ("run-r1.scope", OwnerKind.SCOPE, False),
    (None, OwnerKind.NONE, False),
])
def test_a_unit_name_alone_is_claimed_by_the_first_kind_in_order(
        unit: str | None, kind: OwnerKind, service: bool) -> None:
    assert unit_kind(unit) is kind
    assert service_unit(unit) is service
    p = Process(pid=10, unit=unit, gpu_memory_mib={0: 100})
    owner = owner_of(p, HostSnapshot("h", 0.0, processes=(p,)))
    assert owner.kind is kind


def test_a_cgroup_that_names_a_container_wins_over_its_unit() -> None:
    c = Container(id="ab" * 32, name="llm", runtime="docker", state="running")
    p = Process(pid=11, unit="docker-" + c.id + ".scope", claim="container:docker/" + c.id,
                gpu_memory_mib={0: 100})
    snap = HostSnapshot("h", 0.0, processes=(p,), containers=(c,))
    owner = owner_of(p, snap)
    assert (owner.kind, owner.key, owner.container) == (OwnerKind.CONTAINER, "docker:llm", c)
    assert owner.selector == OwnerRef("container", c.id)


def test_idle_owners_of_every_kind_stay_visible() -> None:
    """A stopped service and an exited container hold nothing and are still listed (their
    state is the proof): each kind's adapter offers its own."""
    unit = Unit(name="vllm.service", active_state="inactive", sub_state="dead")
    c = Container(id="cd" * 32, name="old", runtime="docker", state="exited")
    result = triage(HostSnapshot("h", 0.0, units=(unit,), containers=(c,)))
    shown = {(g.kind, g.key, g.service is not None) for g in result.groups}
    assert shown == {(OwnerKind.SERVICE, "vllm.service", True),
                     (OwnerKind.CONTAINER, "docker:old", False)}


class _Scheduler(BaseRules):
    """A kind whose manager allocated GPU 0 to nobody: whatever holds memory there strays,
    whoever owns it (the contract's hook, without a real scheduler)."""

    kind = OwnerKind.SCOPE  # stands in: the registry is keyed by kind

    def strays(self, snapshot: HostSnapshot, owner_by_pid: Mapping[int, Owner]
               ) -> Mapping[int, Stray]:
        return {p.pid: Stray("no job", f"pid {p.pid} holds GPU 0, which no job has")
                for p in snapshot.processes if p.gpu_memory_mib.get(0)}


def test_a_kind_flags_what_its_manager_did_not_allocate_whoever_owns_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(owners_pkg, "KINDS", (_Scheduler(), *KINDS))
    held = Process(pid=20, unit="session-3.scope", user="bob", gpu_memory_mib={0: 900})
    other = Process(pid=21, unit="session-3.scope", user="bob", gpu_memory_mib={1: 900})
    result = triage(HostSnapshot("h", 0.0, processes=(held, other)))
    assert Flag.STRAY in result.flags[20] and Flag.STRAY not in result.flags[21]
    assert result.strays[20].reason == "no job"
    group = result.group_of(20)
    assert group is not None and Flag.STRAY in group.flags
    assert "pid 20 holds GPU 0, which no job has" in group.warnings
