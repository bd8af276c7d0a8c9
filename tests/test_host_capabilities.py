"""Optional host features are declared, not guessed: a host that lacks one is never asked
for it, and the operator is told what it cannot do."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from support import stepped
from test_ui import SIZE, make_app, select, wait_for

from gpudash.demo.fleet import UnreachableHost
from gpudash.demo.host import KIMI, MINIMAX, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.engine import SPECS, ActionKind, ExecOptions, Selection, execute, unit_ref
from gpudash.engine.goals import GoalState, Ready
from gpudash.protocol.source import Capability, HttpAnswer, ListenerOwner, LogLine, ModelUnit
from gpudash.session.controller import serving_request
from gpudash.transport.local import LocalSource
from gpudash.ui.models import JournalScreen


class Bare(DemoHost):
    """The demo host behind a transport that offers none of the optional features."""

    capabilities: frozenset[Capability] = frozenset()

    def journal(self, unit: str, *, lines: int = 200, follow: bool = True,
                after: str | None = None) -> AsyncIterator[LogLine]:
        raise AssertionError("journal asked of a host that has none")

    async def model_units(self, patterns: Sequence[str] = ()) -> tuple[ModelUnit, ...]:
        raise AssertionError("model units asked of a host that has none")

    async def probe_http(self, url: str, timeout_s: float,
                         owner: ListenerOwner | None = None) -> HttpAnswer:
        raise AssertionError("a probe asked of a host that has none")


def test_each_kind_of_host_declares_what_it_implements() -> None:
    assert DemoHost().capabilities == frozenset(Capability)
    assert LocalSource("here").control.capabilities == frozenset(Capability)
    assert UnreachableHost("gone").capabilities == frozenset()


async def test_the_ready_goal_says_when_a_host_cannot_be_probed() -> None:
    host = Bare()
    goal = Ready("http://127.0.0.1:8001/health")
    await goal.observe(host)
    status = goal.check(await host.sample(), 0.0)
    assert status.state is GoalState.PENDING
    assert "this host cannot be probed" in status.detail


async def test_a_start_on_a_bare_host_is_followed_by_its_samples_alone() -> None:
    host = Bare(clock=SteppedClock())
    plan = SPECS[ActionKind.START].plan(await host.sample(), Selection(
        owner=unit_ref(KIMI), ready_url="http://127.0.0.1:8001/health", force=True))  # a crash loop
    opts = ExecOptions(poll=0.5, settle=2, serve_timeout=3.0)
    report = await stepped(host, execute(plan, host, opts))
    assert report.serving is not None and report.serving.log_tail == ()
    assert not report.confirmed and "this host cannot be probed" in report.summary


async def test_no_ready_url_is_guessed_without_the_host_s_model_units() -> None:
    url, _learned = await serving_request(Bare(), "demo-gpu01", KIMI, simulated=True)
    assert url is None
    url, _learned = await serving_request(DemoHost(), "demo-gpu01", KIMI, simulated=True)
    assert url == "http://127.0.0.1:8001/health"


async def test_the_journal_key_on_a_host_without_journals_says_so() -> None:
    app = make_app(Bare(clock=SteppedClock()))
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("j")
        await wait_for(pilot, lambda: any(
            "cannot show journals" in str(n.message) for n in app._notifications))
        assert not isinstance(app.screen, JournalScreen)
