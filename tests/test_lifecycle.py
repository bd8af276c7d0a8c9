"""The action session written once (gpudash.session.lifecycle), driven through its ports as
each front end drives it, on the demo host: no screen, no terminal."""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence

from gpudash.demo.host import KIMI, MINIMAX, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.engine import ActionKind, ActionPlan, Selection, unit_ref
from gpudash.session.lifecycle import (
    Candidate,
    Ended,
    Ending,
    Picked,
    Request,
    confirm,
    prepare,
)


class Answers:
    """A front end that answers from a list, and may change the host while it 'reads'."""

    asks = True

    def __init__(self, answers: list[bool | None],
                 meanwhile: Sequence[Callable[[], object]] = ()) -> None:
        self.answers = answers
        self.meanwhile = list(meanwhile)
        self.shown: list[list[str]] = []
        self.offered: list[tuple[str, list[str], bool]] = []
        self.pick_as: Picked | None = None

    async def confirm(self, plan: ActionPlan, lines: list[str]) -> bool | None:
        self.shown.append(lines)
        if self.meanwhile:
            await self.meanwhile.pop(0)()  # type: ignore[misc]
        return self.answers.pop(0)

    async def pick(self, source: str, candidates: Sequence[Candidate],
                   enable: bool) -> Picked | None:
        self.offered.append((source, [c.name for c in candidates], enable))
        return self.pick_as


async def test_an_answer_is_acted_on_the_host_as_it_is_then_and_a_change_is_asked_again() -> None:
    demo = DemoHost(clock=SteppedClock())
    worker = next(p for p in demo.snapshot().processes if p.cmdline.startswith("VLLM::Worker"))
    ports = Answers([True, True], [lambda: demo.signal(worker.pid, worker.start_ticks,
                                                       signal.SIGKILL)])
    plan = await prepare(Request(ActionKind.RECLAIM, Selection(owner=unit_ref(MINIMAX))), demo,
                         "demo", ports)
    assert isinstance(plan, ActionPlan) and worker.pid in {t.pid for t in plan.targets}
    fresh = await confirm(plan, demo, ports, 10.0)
    assert isinstance(fresh, ActionPlan) and worker.pid not in {t.pid for t in fresh.targets}
    assert len(ports.shown) == 2
    assert ports.shown[1][0] == "The host changed while you read the plan:"
    assert any(str(worker.pid) in line for line in ports.shown[1][:4])


async def test_what_ends_an_action_before_anything_is_sent_says_which() -> None:
    demo = DemoHost(clock=SteppedClock())
    request = Request(ActionKind.RECLAIM, Selection(owner=unit_ref(MINIMAX)))
    for answer, kind in ((None, Ending.NOBODY), (False, Ending.DECLINED)):
        ports = Answers([answer])
        plan = await prepare(request, demo, "demo", ports)
        assert isinstance(plan, ActionPlan)
        ended = await confirm(plan, demo, ports, 10.0)
        assert isinstance(ended, Ended) and ended.kind is kind and "nothing done" in ended.why
    bad = await prepare(Request(ActionKind.RECLAIM,
                                Selection(owner=unit_ref("no-such.service"))),
                        demo, "demo", Answers([]))
    assert isinstance(bad, Ended) and bad.kind is Ending.PLAN
    assert demo.units[MINIMAX].active  # nothing was sent, whatever ended it


async def test_a_swap_offers_the_other_models_and_enables_as_the_old_unit_was() -> None:
    demo = DemoHost(clock=SteppedClock())
    ports = Answers([])
    picked = await prepare(Request(ActionKind.SWAP, Selection(owner=unit_ref(MINIMAX))), demo,
                           "demo", ports)
    assert isinstance(picked, Ended) and picked.kind is Ending.NOT_PICKED
    (source, names, enable), = ports.offered
    assert source == MINIMAX and MINIMAX not in names and KIMI in names
    assert enable is True  # MiniMax is enabled: by default so is what replaces it
    ports.pick_as = Picked(KIMI, enable=False)
    plan = await prepare(Request(ActionKind.SWAP, Selection(owner=unit_ref(MINIMAX))), demo, "demo",
                         ports)
    assert isinstance(plan, ActionPlan) and plan.selection.target == KIMI
    assert plan.selection.enable is False and plan.selection.ready_url is not None


async def test_a_swap_asks_the_host_for_its_model_units_once() -> None:
    # Seen: the picker read the host's model units, and the plan read them again for the
    # port of the one picked (two `systemctl show` round trips on a real host).
    demo = DemoHost(clock=SteppedClock())
    asked: list[Sequence[str]] = []
    model_units = demo.model_units

    async def counting(models: Sequence[str]):  # type: ignore[no-untyped-def]
        asked.append(models)
        return await model_units(models)

    demo.model_units = counting  # type: ignore[method-assign]
    ports = Answers([])
    ports.pick_as = Picked(KIMI, enable=True)
    plan = await prepare(Request(ActionKind.SWAP, Selection(owner=unit_ref(MINIMAX))), demo, "demo",
                         ports)
    assert isinstance(plan, ActionPlan) and plan.selection.target == KIMI
    kimi_port = next(m.port for m in await model_units(()) if m.name == KIMI)
    assert plan.selection.ready_url == f"http://127.0.0.1:{kimi_port}/health"
    assert len(asked) == 1
