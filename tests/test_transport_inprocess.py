"""This machine's stream collector in a thread of gpudash's process (issue 18, item 5).

Seen before: a local dashboard was two Python processes, 63 MB and a 19 MB collector,
against a 60 MB target for both. The stream now runs ``loop.main`` in a thread over two
pipes; these tests check it streams what the subprocess streamed, leaves no process, ends
when closed, and says why when the collector dies.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import time

import pytest

from gpudash.protocol.source import LinkLost
from gpudash.transport.inprocess import ThreadPipe, start_thread_pipe
from gpudash.transport.local import LocalSource

# Run in a child with the stand-in's environment: NVML is loaded by this process itself
# now, and libnvidia-ml is found by the LD_LIBRARY_PATH a process starts with.
CHILD = textwrap.dedent("""
    import asyncio, json, os, sys, threading
    from gpudash.transport.local import LocalSource

    async def main():
        source = LocalSource(in_process=True)
        out = []
        stream = source.stream(0.2)
        async for snap in stream:
            out.append({str(p.pid): [p.name, sorted(p.gpu_memory_mib.items())]
                        for p in snap.processes if p.gpu_memory_mib})
            if len(out) == 3:
                break
        threads = sorted(t.name for t in threading.enumerate())
        children = [open(f"/proc/{c}/cmdline").read() for t in os.listdir("/proc/self/task")
                    for c in open(f"/proc/self/task/{t}/children").read().split()]
        await stream.aclose()
        await source.close()
        alive = [t.name for t in threading.enumerate() if t.name.startswith("gpudash-collector")]
        print(json.dumps({"snaps": out, "threads": threads, "children": children,
                          "alive_after_close": alive,
                          "psutil": "psutil" in sys.modules}))

    asyncio.run(main())
""")


def test_the_local_stream_runs_in_this_process_and_sees_the_holders(fakegpu_state) -> None:
    holder = fakegpu_state.hold(1, 1234, name="python3")
    time.sleep(0.3)
    done = subprocess.run([sys.executable, "-c", CHILD], env=fakegpu_state.env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.splitlines()[-1])
    for snap in got["snaps"]:  # every sample, the first and the merge patches after it
        assert snap.get(str(holder.pid), [None, None])[1] == [[1, 1234]], got["snaps"]
    assert any(t.startswith("gpudash-collector") for t in got["threads"]), got["threads"]
    assert not any("gpudash_hostside" in c for c in got["children"]), got["children"]
    assert got["alive_after_close"] == []
    # the host's figures from /proc: psutil is not imported into gpudash for them
    assert got["psutil"] is False


def _run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_closing_the_pipe_ends_its_thread() -> None:
    async def go() -> tuple[bytes, bool, bool]:
        pipe = await start_thread_pipe("here", ["stream", "0.1"], 1 << 20)
        first = await pipe.readline(20)
        running = pipe.running
        pipe.close()
        await pipe.wait_closed()
        return first, running, pipe.running

    first, running_before, running_after = _run(go())
    assert json.loads(first)["k"] == "full"
    assert running_before and not running_after


def test_a_write_after_close_is_a_lost_link() -> None:
    async def go() -> None:
        pipe = await start_thread_pipe("here", ["stream", "0.1"], 1 << 20)
        pipe.close()
        await pipe.wait_closed()
        pipe.write(b'{"op":"ping","id":1}\n')

    with pytest.raises(LinkLost, match="stdin closed"):
        _run(go())


def test_a_collector_that_dies_says_why_on_the_stream() -> None:
    async def go() -> None:
        pipe = ThreadPipe("here", ["stream", "not-a-number"], 1 << 20)
        await pipe.start()
        try:
            await pipe.readline(20)
        finally:
            pipe.close()
            await pipe.wait_closed()

    with pytest.raises(LinkLost, match=r"collector exited: the collector stopped: ValueError"):
        _run(go())


def test_sources_the_tests_build_with_their_own_env_keep_the_subprocess() -> None:
    # in_process sees this process's libnvidia-ml, not env's: only open_source asks for it
    assert LocalSource(env={"LD_LIBRARY_PATH": "/x"}).options.in_process is False
    assert LocalSource(in_process=True, python=None).options.in_process is False
    from gpudash.transport import open_source

    source = open_source(None)
    assert isinstance(source, LocalSource) and source.options.in_process is True


def test_in_a_thread_the_collector_counts_its_own_cpu_not_the_dashboards() -> None:
    from gpudash.collector.host.hoststats import HostStats

    end = time.process_time() + 0.3
    while time.process_time() < end:  # the dashboard's own work, before the collector ran
        pass
    got: dict[str, float | None] = {}

    def collector_thread() -> None:
        stats = HostStats(own_thread=True)
        got["thread"] = stats.read()["collector_cpu_s"]
        got["process"] = HostStats().read()["collector_cpu_s"]

    import threading

    worker = threading.Thread(target=collector_thread)
    worker.start()
    worker.join()
    assert got["process"] is not None and got["process"] >= 0.3
    assert got["thread"] is not None and got["thread"] < got["process"] - 0.25, got
