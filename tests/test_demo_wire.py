"""The demo host speaks the wire: its samples are the collector's JSON (a full snapshot,
then merge patches), read by the same ``SnapshotDecoder`` as SSH and local hosts, so the
decoder's bounds hold for it and its account of what changed reaches triage.

The host's clock stands still here (a ``SteppedClock`` never stepped): nothing happens on
the host between two samples but what a test does to it, so no test waits on time.
"""

from __future__ import annotations

import asyncio
import signal

from gpudash.collector.host.protocol import CMDLINE_MAX, TRUNCATED
from gpudash.demo.fleet import ScenarioHost
from gpudash.demo.host import DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.domain.model import EVERYTHING, HostSnapshot
from gpudash.domain.triage import HostTriage
from gpudash.feed.follow import Frame, HostFollower

NOTEBOOK = 90211  # alice's kernel: its own process, nobody else's parent
LONG = "python train.py " + "--flag " * 2000  # 14 kB: beyond what a snapshot carries


async def _followed(host: DemoHost, samples: int) -> list[tuple[HostSnapshot, HostTriage]]:
    """The first ``samples`` (snapshot, triage) pairs the host's follower (the dashboard's
    and the exporter's) makes of ``host``'s stream."""
    seen: list[tuple[HostSnapshot, HostTriage]] = []
    enough = asyncio.Event()

    def on_frame(frame: Frame, sampled: bool) -> None:
        if not sampled:
            assert frame.link.state in ("connecting", "connected"), frame.link
            return
        assert frame.snapshot is not None and frame.triage is not None
        seen.append((frame.snapshot, frame.triage))
        if len(seen) >= samples:
            enough.set()

    follower = HostFollower(host, 0.0, on_frame=on_frame)
    task = asyncio.create_task(follower.run())
    try:
        async with asyncio.timeout(10):
            await enough.wait()
    except TimeoutError:
        raise AssertionError(f"{len(seen)} of {samples} samples within 10 s") from None
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return seen[:samples]


async def test_an_unchanged_demo_sample_is_not_triaged_again() -> None:
    # The decoder's Changes say no process, unit or container changed (only the GPUs'
    # sensors did): the follower keeps the triage it has, the very same groups.
    (first, t1), (second, t2), (third, t3) = await _followed(DemoHost(clock=SteppedClock()), 3)
    assert first.changes is EVERYTHING  # the stream's first, full snapshot
    for snap in (second, third):
        assert snap.changes is not EVERYTHING, "the demo's sample did not come from a patch"
        assert snap.changes.processes == frozenset() and not snap.changes.structure
    assert t2.snapshot is second and t3.snapshot is third
    assert t2.groups is t1.groups and t3.groups is t1.groups, "re-triaged from scratch"


async def test_a_demo_patch_names_what_changed() -> None:
    demo = DemoHost(clock=SteppedClock())
    stream = demo.stream(0.0)
    first = await anext(stream)
    kernel = first.process(NOTEBOOK)
    assert kernel is not None and kernel.start_ticks is not None
    await demo.signal(NOTEBOOK, kernel.start_ticks, signal.SIGKILL)
    second = await anext(stream)
    assert second.changes.processes == frozenset({NOTEBOOK}) and second.changes.structure
    assert second.process(NOTEBOOK) is None
    # every other process is the very object decoded before: the patch left it alone
    assert all(p is first.process(p.pid) for p in second.processes)
    await stream.aclose()


async def test_a_demo_hosts_text_is_bounded_as_any_hosts() -> None:
    # The decoder cuts what a host says to the protocol's bounds: a demo sample, streamed,
    # asked for, or from a fleet's demo host, is cut the same way.
    demo = DemoHost(clock=SteppedClock())
    fleet = ScenarioHost("demo-gpu02", "healthy", clock=SteppedClock())
    for host in (demo, fleet):
        host.spawn(ppid=1, user="bob", name="python", cmdline=LONG, unit=None, pid=4242)
    streams = [demo.stream(0.0), fleet.stream(0.0)]
    for snap in (await anext(streams[0]), await anext(streams[1]), await demo.sample(),
                 demo.snapshot(), await fleet.sample()):
        proc = snap.process(4242)
        assert proc is not None
        assert len(proc.cmdline) == CMDLINE_MAX and proc.cmdline.endswith(TRUNCATED)
    for stream in streams:
        await stream.aclose()
