"""One follower per host: the dashboard and the exporter read the same frames, so they say
the same about a host (issue 30, "one feed").

Seen before: the dashboard followed a host with ``ui/hosts.follow_host`` and flagged a
crash loop from one snapshot (``unit_crash_looping``), the exporter with
``feed/watch.HostWatch`` and a history of samples (``RestartWatch``): a unit systemd
restarted twice in a minute, running again between, was crash-looping in
``gpudash_unit_crash_looping`` and not on the screen.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from test_ui import SIZE, wait_for

from gpudash.demo.host import MINIMAX, DemoHost
from gpudash.domain.fleet import summarize
from gpudash.domain.model import HostSnapshot
from gpudash.domain.triage import Flag
from gpudash.feed.follow import HostFollower
from gpudash.protocol.source import HostControl
from gpudash.render.metrics import TriageCollector
from gpudash.ui.app import GpudashApp


class Restarting:
    """The demo host's samples, with systemd restarting MiniMax by itself twice in a
    minute between them (``NRestarts`` 0, 1, 2; running again each time)."""

    route = "demo"
    round_trip_s = None

    def __init__(self) -> None:
        self.demo = DemoHost()
        self.name = self.demo.name

    @property
    def control(self) -> HostControl:
        return self.demo

    def samples(self) -> list[HostSnapshot]:
        first = self.demo.snapshot()
        out = []
        for i, restarts in enumerate((0, 1, 2)):
            units = tuple(dataclasses.replace(u, n_restarts=restarts, sub_state="running")
                          if u.name == MINIMAX else u for u in first.units)
            out.append(dataclasses.replace(first, units=units, taken_at=first.taken_at + 30 * i))
        return out

    async def stream(self, interval: float) -> AsyncIterator[HostSnapshot]:
        for snap in self.samples():
            yield snap
            await asyncio.sleep(0)
        await asyncio.Event().wait()  # then quiet: the link stays up

    async def close(self) -> None:
        return None


def exported_crash_loops(follower: HostFollower) -> dict[str, float]:
    registry = CollectorRegistry()
    registry.register(TriageCollector([follower]))
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            if s.name == "gpudash_unit_crash_looping":
                out[s.labels["unit"]] = s.value
    return out


async def test_the_dashboard_and_the_exporter_agree_on_a_crash_loop() -> None:
    # the exporter's way: its follower, scraped
    exporter = HostFollower(Restarting(), 1.0)
    task = asyncio.create_task(exporter.run())
    try:
        for _ in range(200):
            if exporter.frame.samples == 3:
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert exported_crash_loops(exporter)[MINIMAX] == 1.0
    # the dashboard's way: the same stream, on screen
    app = GpudashApp([Restarting()], interval=1.0, read_only=True, theme=None,  # type: ignore[list-item]
                     exec_options=None)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.view.snapshot is not None and (
            app.view.snapshot.unit(MINIMAX).n_restarts == 2))  # type: ignore[union-attr]
        triage = app.view.triage
        assert triage is not None
        group = triage.group(MINIMAX)
        assert group is not None and Flag.CRASH_LOOP in group.flags
        assert summarize(triage).crash_looping == (MINIMAX,)
        # one verdict, one set of units: what the exporter says is what the screen says
        assert triage.crash_looping == exporter.frame.crash_looping == {MINIMAX}
