"""The Prometheus exporter: its metrics are the triage's numbers, scrape after scrape.

Against the demo host (the incident played on it), read back through prometheus_client's
own exposition and parser, as a scraper sees them; the CLI as a real subprocess (textfile
mode, signals, usage errors). The real Prometheus server: tests/test_e2e_prometheus.py.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support import clock_of, run_until

from gpudash.demo.host import DEEPSEEK, MINIMAX, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.domain.crashloop import RestartWatch
from gpudash.domain.fleet import summarize
from gpudash.domain.model import HostSnapshot, Unit
from gpudash.domain.triage import triage
from gpudash.feed.follow import Frame, HostFollower
from gpudash.feed.reconnect import LinkState
from gpudash.protocol.source import ConnectError, HostControl
from gpudash.render.metrics import MIB, TriageCollector, metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(*watches: HostFollower) -> Samples:
    """What a scraper reads: the exposition text, parsed back."""
    registry = CollectorRegistry()
    registry.register(TriageCollector(watches))
    text = generate_latest(registry).decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def series(samples: Samples, name: str, **labels: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples of ``name`` whose labels include ``labels``."""
    return {k: v for (n, k), v in samples.items()
            if n == name and set(labels.items()) <= set(k)}


def value(samples: Samples, name: str, **labels: str) -> float:
    [(_, v)] = series(samples, name, **labels).items()
    return v


def watch_of(demo: DemoHost) -> HostFollower:
    w = HostFollower(demo, 1.0)
    w.link_changed(LinkState("connected", time.time()))
    return w


def sample(w: HostFollower, demo: DemoHost) -> HostSnapshot:
    snap = demo.snapshot()
    w.sampled(snap)
    return snap


async def stop_minimax(demo: DemoHost) -> None:
    """The incident's step 2: `systemctl stop` with KillMode=process orphans the workers."""
    result = await demo.systemctl("stop", MINIMAX)
    assert result.ok


def test_gpu_memory_series_are_the_snapshots_numbers() -> None:
    demo = DemoHost()
    w = watch_of(demo)
    snap = sample(w, demo)
    s = scrape(w)
    assert value(s, "gpudash_link_up", host="demo-gpu01") == 1
    assert len(series(s, "gpudash_gpu_memory_used_bytes")) == len(snap.gpus) == 8
    for g in snap.gpus:
        labels = {"host": "demo-gpu01", "gpu": str(g.index), "uuid": g.uuid or ""}
        assert value(s, "gpudash_gpu_memory_used_bytes", **labels) == g.memory_used_mib * MIB
        assert value(s, "gpudash_gpu_memory_total_bytes", **labels) == g.memory_total_mib * MIB
    # serving: nothing orphaned, and no per-unit orphan series at all
    assert series(s, "gpudash_orphaned_bytes") == {}
    assert set(series(s, "gpudash_gpu_orphaned_bytes").values()) == {0.0}
    assert value(s, "gpudash_orphaned_processes", unit=MINIMAX) == 0
    assert value(s, "gpudash_samples_total", host="demo-gpu01") == 1


async def test_orphaned_bytes_per_gpu_and_unit_equal_the_triage() -> None:
    demo = DemoHost()
    w = watch_of(demo)
    await stop_minimax(demo)
    snap = sample(w, demo)
    tri = triage(snap)
    orphans = tri.orphans()
    assert len(orphans) == 8
    expected: dict[int, int] = {}
    for p in orphans:
        for gpu, mib in p.gpu_memory_mib.items():
            expected[gpu] = expected.get(gpu, 0) + (mib or 0)
    s = scrape(w)
    got = {dict(k)["gpu"]: v for k, v in series(s, "gpudash_orphaned_bytes", unit=MINIMAX).items()}
    assert got == {str(gpu): mib * MIB for gpu, mib in expected.items()}
    assert all(v > 90 * 1024 * MIB for v in got.values())  # the incident's ~94.5 GiB each
    for gpu, mib in expected.items():
        assert value(s, "gpudash_gpu_orphaned_bytes", gpu=str(gpu)) == mib * MIB
    assert value(s, "gpudash_orphaned_processes", unit=MINIMAX) == len(orphans)
    [info] = series(s, "gpudash_unit_info", unit=MINIMAX)
    assert ("active_state", "inactive") in info and ("kill_mode", "process") in info
    # alice's notebook holds GPU0 memory but is nobody's orphan
    assert value(s, "gpudash_gpu_memory_used_bytes", gpu="0") > got["0"]
    # reclaimable is the fleet view's own figure, GPU by GPU
    fleet_row = summarize(tri)
    for g in snap.gpus:
        assert value(s, "gpudash_reclaimable_bytes", gpu=str(g.index)) == (
            fleet_row.reclaimable_by_gpu.get(g.index, 0) * MIB)
    assert sum(v for v in series(s, "gpudash_reclaimable_bytes").values()) == (
        fleet_row.reclaimable_mib * MIB) > 0


async def test_series_of_reaped_orphans_leave_no_stale_label_set_behind() -> None:
    demo = DemoHost(release_delay=0.0)
    w = watch_of(demo)
    await stop_minimax(demo)
    snap = sample(w, demo)
    assert len(series(scrape(w), "gpudash_orphaned_bytes")) == 8
    for p in triage(snap).orphans():
        assert await demo.signal(p.pid, p.start_ticks, signal.SIGKILL) == "sent"
    sample(w, demo)
    s = scrape(w)
    assert series(s, "gpudash_orphaned_bytes") == {}
    assert set(series(s, "gpudash_gpu_orphaned_bytes").values()) == {0.0}
    assert value(s, "gpudash_orphaned_processes", unit=MINIMAX) == 0


async def test_a_respawn_is_counted_but_only_a_crash_loop_is_one() -> None:
    demo = DemoHost(clock=SteppedClock())
    w = watch_of(demo)
    clock = [0.0]
    w.clock = lambda: clock[0]
    snap = sample(w, demo)
    main = snap.unit(MINIMAX).main_pid
    # the incident's step 1: kill -9 on the main process, Restart=always respawns it
    proc = snap.process(main)
    assert await demo.signal(main, proc.start_ticks, signal.SIGKILL) == "sent"
    for _ in range(40):
        clock[0] += 1
        snap = sample(w, demo)
        if snap.unit(MINIMAX).n_restarts == 1 and snap.unit(MINIMAX).main_pid:
            break
        await clock_of(demo).advance(1.0)
    s = scrape(w)
    assert value(s, "gpudash_unit_restarts_total", unit=MINIMAX) == 1
    assert value(s, "gpudash_unit_crash_looping", unit=MINIMAX) == 0
    # the old workers are orphans now, beside the respawned server
    assert value(s, "gpudash_orphaned_processes", unit=MINIMAX) == 8
    # a model too big for the GPUs crashes again and again
    assert (await demo.systemctl("start", DEEPSEEK)).ok
    for _ in range(100):
        clock[0] += 1
        snap = sample(w, demo)
        if (snap.unit(DEEPSEEK).n_restarts or 0) >= 3:
            break
        await clock_of(demo).advance(1.0)
    s = scrape(w)
    assert value(s, "gpudash_unit_crash_looping", unit=DEEPSEEK) == 1
    assert value(s, "gpudash_unit_restarts_total", unit=DEEPSEEK) == snap.unit(DEEPSEEK).n_restarts
    assert value(s, "gpudash_unit_crash_looping", unit=MINIMAX) == 0


def unit(n: int | None, sub: str = "running", name: str = "a.service") -> Unit:
    return Unit(name, active_state="active", sub_state=sub, n_restarts=n)


def test_restart_watch_tells_a_loop_from_a_respawn() -> None:
    w = RestartWatch(window_s=300, restarts=2)
    assert w.observe([unit(1)], 0) == frozenset()  # restarts before we looked have no time
    assert w.observe([unit(1)], 5) == frozenset()
    assert w.observe([unit(2)], 10) == frozenset()  # one respawn seen
    w2 = RestartWatch(window_s=300, restarts=2)
    w2.observe([unit(0)], 0)
    w2.observe([unit(1)], 10)
    assert w2.observe([unit(2)], 20) == {"a.service"}  # two within the window
    assert w2.observe([], 30) == {"a.service"}  # missing from a sample: still looping
    assert w2.observe([unit(2)], 400) == frozenset()  # quiet for a window
    assert w2.observe([unit(0)], 410) == frozenset()  # started by hand: counter reset
    assert w2.observe([unit(1)], 420) == frozenset()
    # what one snapshot says (the fleet view's rule): died again after a restart, or 3+
    assert RestartWatch().observe([unit(1, "auto-restart")], 0) == {"a.service"}
    assert RestartWatch().observe([unit(0, "auto-restart")], 0) == frozenset()
    assert RestartWatch().observe([unit(3)], 0) == {"a.service"}
    assert RestartWatch().observe([unit(2)], 0) == frozenset()


class BrokenHost:
    """A host that cannot be reached (refused at connect, every time)."""

    name = "gpu-down"

    def stream(self, interval: float) -> AsyncIterator[HostSnapshot]:
        return self._stream()

    async def _stream(self) -> AsyncIterator[HostSnapshot]:
        raise ConnectError("gpu-down: connection refused")
        yield  # pragma: no cover

    round_trip_s = None  # (HostSource) nothing measured

    @property
    def route(self) -> str:
        return f"the source {self.name}"

    @property
    def control(self) -> HostControl:
        raise NotImplementedError

    async def close(self) -> None:
        return None


async def test_a_failing_host_shows_link_down_and_never_stops_the_others() -> None:
    clock = SteppedClock()  # the demo's samples and the broken host's retries
    demo, broken = DemoHost(clock=clock), BrokenHost()
    links: list[tuple[str, str]] = []
    watches = [HostFollower(s, 0.05, on_frame=lambda f, sampled: None if sampled else
                            links.append((f.name, f.link.state)), sleep=clock.sleep)
               for s in (broken, demo)]
    tasks = [asyncio.create_task(w.run()) for w in watches]
    try:
        await run_until(clock, lambda: watches[1].frame.samples >= 3
                        and ("gpu-down", "reconnecting") in links, within_s=5.0,
                        what="3 samples of one host, the other reconnecting")
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    s = scrape(*watches)
    assert value(s, "gpudash_link_up", host="gpu-down") == 0
    assert value(s, "gpudash_link_up", host="demo-gpu01") == 1
    [(labels, _)] = series(s, "gpudash_link_info", host="gpu-down").items()
    assert ("error", "gpu-down: connection refused") in labels
    # a host that cannot be read has no GPU series at all (not zeros)
    assert series(s, "gpudash_gpu_memory_used_bytes", host="gpu-down") == {}
    assert len(series(s, "gpudash_gpu_memory_used_bytes", host="demo-gpu01")) == 8


def test_a_host_whose_link_dropped_exports_no_stale_numbers() -> None:
    demo = DemoHost()
    w = watch_of(demo)
    sample(w, demo)
    w.link_changed(LinkState("stale", time.time(), error="link lost"))
    s = scrape(w)
    assert value(s, "gpudash_link_up", host="demo-gpu01") == 0
    assert series(s, "gpudash_gpu_memory_used_bytes") == {}
    assert value(s, "gpudash_samples_total", host="demo-gpu01") == 1


def test_host_text_in_labels_is_escaped() -> None:
    view = Frame("gpu\x1b[2J01", LinkState("error", 0.0, error="bad\u202ehost\nkey"))
    [up] = [f for f in metric_families([view]) if f.name == "gpudash_link_up"]
    assert up.samples[0].labels["host"] == "gpu\\x1b[2J01"
    [info] = [f for f in metric_families([view]) if f.name == "gpudash_link"]
    assert info.samples[0].labels["error"] == "bad\\u202ehost\\x0akey"


# --- the command line -------------------------------------------------------------------


def exporter(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "gpudash", "exporter", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=os.environ.copy())


def test_textfile_mode_writes_the_prom_file_atomically_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    out_dir = tmp_path / "textfile"
    out_dir.mkdir()
    proc = exporter("--demo", "--textfile", str(out_dir), "--interval", "0.2")
    prom = out_dir / "gpudash.prom"
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            # every read finds a whole file: a rename, never a half-written one
            text = prom.read_text() if prom.exists() else ""
            if text:
                assert text.endswith("\n") and "gpudash_exporter_scrape_duration_seconds" in text
                seen.append(text)
            if 'gpudash_link_up{host="demo-gpu01"} 1.0' in text and len(seen) >= 3:
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"no complete file: {seen[-1:]}")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert out == ""  # stdout is for results: the exporter has none
    assert "writing" in err and "http://" not in err  # only --textfile: no HTTP server
    s: Samples = {}
    for family in text_string_to_metric_families(seen[-1]):
        for smp in family.samples:
            s[(smp.name, tuple(sorted(smp.labels.items())))] = smp.value
    assert len(series(s, "gpudash_gpu_memory_total_bytes")) == 8
    assert value(s, "gpudash_gpu_memory_total_bytes", gpu="0") == 97887 * MIB
    assert sorted(p.name for p in out_dir.iterdir()) == ["gpudash.prom"]  # no temp left


def test_http_mode_serves_metrics_on_loopback_and_stops_on_ctrl_c() -> None:
    proc = exporter("--demo", "--listen", "127.0.0.1:0", "--interval", "0.2")
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "http://127.0.0.1:" in line, line
        port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
        import urllib.request

        deadline = time.monotonic() + 20
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                body = r.read().decode()
            if 'gpudash_link_up{host="demo-gpu01"} 1.0' in body or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert 'gpudash_link_up{host="demo-gpu01"} 1.0' in body
        assert "gpudash_exporter_process_cpu_seconds_total" in body
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def test_listen_defaults_to_loopback_only() -> None:
    from gpudash.cli.args import parse
    from gpudash.cli.exporter import DEFAULT_LISTEN

    command, args = parse(["exporter", "--demo"])
    assert command == "exporter" and args.listen is None and args.textfile is None
    assert DEFAULT_LISTEN == ("127.0.0.1", 9835)
    assert parse(["exporter", "--demo", "--listen", "[::1]:9100"])[1].listen == ("::1", 9100)


@pytest.mark.parametrize(("args", "message"), [
    (["--listen", "9835"], "expected HOST:PORT"),
    (["--listen", "127.0.0.1:http"], "expected HOST:PORT"),
    (["--listen", "127.0.0.1:70000"], "expected HOST:PORT"),
    (["--listen", "gpu01.example:9835"], "IP address or localhost"),
    (["--interval", "0"], "--interval"),
    (["--textfile", "/nonexistent/dir"], "not a directory"),
    (["gpu01"], "--demo takes no HOST"),
])
def test_exporter_usage_errors_exit_2_with_nothing_served(args: list[str], message: str
                                                           ) -> None:
    cp = subprocess.run([sys.executable, "-m", "gpudash", "exporter", "--demo", *args],
                        capture_output=True, text=True, timeout=30)
    assert cp.returncode == 2, cp.stderr
    assert message in cp.stderr and "Traceback" not in cp.stderr
    assert cp.stdout == "" and "http://" not in cp.stderr


def test_a_host_named_twice_is_a_usage_error() -> None:
    cp = subprocess.run([sys.executable, "-m", "gpudash", "exporter", "gpu01", "gpu02", "gpu01"],
                        capture_output=True, text=True, timeout=30)
    assert cp.returncode == 2, cp.stderr
    assert "HOST named more than once: gpu01" in cp.stderr


def test_an_address_in_use_is_a_usage_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cp = subprocess.run([sys.executable, "-m", "gpudash", "exporter", "--demo",
                             "--listen", f"127.0.0.1:{port}"],
                            capture_output=True, text=True, timeout=30)
    assert cp.returncode == 2, cp.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in cp.stderr and "Traceback" not in cp.stderr


# --- the documented alert rules ----------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "docs" / "prometheus" / "gpudash-alerts.yml"


def test_the_exporter_page_shows_the_rules_file_as_it_is() -> None:
    page = (ROOT / "docs" / "EXPORTER.md").read_text()
    start = page.index("```yaml\ngroups:\n") + len("```yaml\n")
    block = page[start:page.index("```", start)]
    rules = "".join(ln for ln in RULES.read_text().splitlines(keepends=True)
                    if not ln.startswith("#"))
    assert rules.startswith(block), "docs/EXPORTER.md's alert rule differs from " + str(RULES)
    assert "alert: GPUMemoryOrphaned" in block and "for: 10m" in block


def test_promtool_accepts_the_alert_rules() -> None:
    import shutil

    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("promtool required under CI=true (tests/run.sh installs prometheus)")
        pytest.skip("no promtool (apt-get install prometheus)")
    cp = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True,
                        text=True, timeout=60)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "SUCCESS: 4 rules found" in cp.stdout


def test_a_login_sessions_lost_server_and_unattributed_memory_are_exported() -> None:
    """Sessions' orphans were never exported (only services'), so the GPUMemoryOrphaned
    alert missed a login's vLLM whose API server the OOM killer took (issue 17); memory no
    listed process accounts for was dropped."""
    from test_orphans import SESSION, WORKER_MIB, server, snap

    s = snap(server(3700, 1000, SESSION, api_alive=False, user="alice"))
    w = HostFollower(DemoHost(), 1.0)  # a source for its name only: fed by hand
    w.link_changed(LinkState("connected", time.time()))
    w.sampled(s)
    got = scrape(w)
    assert value(got, "gpudash_orphaned_bytes", unit="session-7.scope") == WORKER_MIB * MIB
    assert value(got, "gpudash_orphaned_processes", unit="session-7.scope") == 2
    # the GPU reports two workers' worth used, one is listed
    assert value(got, "gpudash_gpu_memory_unattributed_bytes", gpu="0") == WORKER_MIB * MIB
