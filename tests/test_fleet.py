"""The fleet's facts (reclaimable, orphans, crash loops), which hosts a fleet is, and the
bound on concurrent connects: pure functions and the limiter, no UI."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import clock_of

from gpudash.demo.fleet import ScenarioHost, demo_fleet
from gpudash.demo.host import DEEPSEEK, MINIMAX, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.domain.fleet import crash_looping, summarize
from gpudash.domain.model import Unit
from gpudash.domain.owners.service import CRASH_LOOP_RESTARTS
from gpudash.domain.triage import triage
from gpudash.transport.limiter import ConnectLimiter
from gpudash.transport.selection import (
    HostSelectionError,
    read_hosts_file,
    select_hosts,
    ssh_config_hosts,
)

# --- what a fleet row says ----------------------------------------------------------------


async def _summary_of(host: DemoHost):  # type: ignore[no-untyped-def]
    return summarize(triage(await host.sample()))


async def test_serving_host_has_nothing_to_reclaim() -> None:
    s = await _summary_of(DemoHost(seed=7))
    assert (s.gpus_in_use, s.gpus_total) == (8, 8)
    assert s.reclaimable_mib == 0 and s.orphans == 0 and s.crash_looping == ()
    assert s.used_mib == 8 * 96801 and s.total_mib == 8 * 97887


async def test_stopped_unit_leaves_its_workers_reclaimable() -> None:
    host = ScenarioHost("h", "stopped")
    s = await _summary_of(host)
    # the 8 TP workers, orphaned under PID 1; alice's notebook (2 GiB on GPU 0) is not
    assert s.orphans == 8
    assert s.reclaimable_mib == 8 * 96801 - 2048
    assert s.reclaimable_by_gpu[0] == 96801 - 2048 and s.reclaimable_by_gpu[7] == 96801


async def test_respawned_unit_counts_its_new_workers_and_the_orphans_once() -> None:
    host = ScenarioHost("h", "incident", clock=SteppedClock())
    await host.sample()
    await clock_of(host).advance(5.0)  # systemd has respawned the unit (RestartSec=1)
    result = triage(await host.sample())
    s = summarize(result)
    respawned = sum(mib or 0 for p in result.snapshot.processes if p.unit == MINIMAX
                    for mib in p.gpu_memory_mib.values())
    assert result.snapshot.unit(MINIMAX).n_restarts == 1
    assert s.orphans == 8
    # everything the unit's processes hold: old orphans + the respawned set, each once
    assert s.reclaimable_mib == respawned > 8 * 96801 - 2048


async def test_a_gpu_never_gives_back_more_than_it_reports_used() -> None:
    """Seen on the lab's stand-in driver: after kill -9 the respawned TP workers are listed
    with the whole model (96801 MiB) on GPUs the orphans already fill."""
    from dataclasses import replace

    host = ScenarioHost("h", "stopped")
    snap = await host.sample()
    doubled = tuple(replace(p, gpu_memory_mib={g: 2 * (m or 0) for g, m in
                                               p.gpu_memory_mib.items()})
                    if p.unit == MINIMAX else p for p in snap.processes)
    s = summarize(triage(replace(snap, processes=doubled)))
    used = {g.index: g.memory_used_mib for g in snap.gpus}
    kept = {0: 2048}  # alice's notebook stays
    assert s.reclaimable_by_gpu == {g: used[g] - kept.get(g, 0) for g in range(8)}
    assert s.reclaimable_mib == sum(used.values()) - 2048


async def test_crash_loop_is_named_once_systemd_keeps_restarting_it() -> None:
    host = ScenarioHost("h", "crash-loop", clock=SteppedClock())
    await host.sample()
    looping = ()
    for _ in range(100):
        await clock_of(host).advance(2.5)
        looping = summarize(triage(await host.sample())).crash_looping
        if looping:
            break
    assert looping == (DEEPSEEK,)


def test_crash_loop_rule() -> None:
    snap = DemoHost().snapshot()

    def with_unit(**kw: object):  # type: ignore[no-untyped-def]
        from dataclasses import replace
        return triage(replace(snap, units=(Unit("x.service", **kw),)))  # type: ignore[arg-type]

    assert crash_looping(with_unit(active_state="activating", sub_state="auto-restart",
                                   n_restarts=1)) == ("x.service",)
    # the first death (a kill -9) is a respawn, not a loop
    assert crash_looping(with_unit(active_state="activating", sub_state="auto-restart",
                                   n_restarts=0)) == ()
    assert crash_looping(with_unit(active_state="active", sub_state="running",
                                   n_restarts=CRASH_LOOP_RESTARTS)) == ("x.service",)
    assert crash_looping(with_unit(active_state="active", sub_state="running",
                                   n_restarts=CRASH_LOOP_RESTARTS - 1)) == ()


def test_demo_fleet_mixes_scenarios_and_names_hosts() -> None:
    hosts = demo_fleet(6)
    assert [h.name for h in hosts] == [f"demo-gpu0{i}" for i in range(1, 7)]
    assert [getattr(h, "scenario", "unreachable") for h in hosts] == [
        "incident", "healthy", "unreachable", "stopped", "crash-loop", "healthy"]
    assert demo_fleet(100)[99].name == "demo-gpu100"
    with pytest.raises(ValueError):
        demo_fleet(0)


# --- which hosts --------------------------------------------------------------------------


def test_hosts_file_skips_comments_and_blank_lines(tmp_path: Path) -> None:
    f = tmp_path / "fleet.txt"
    f.write_text("# rack 4\n\ngpu01\n  gpu02   # the new one\nroot@gpu03\n\n#gpu04\n"
                 "ssh://root@127.0.0.1:2222\ngpu01\n")
    assert read_hosts_file(f) == ["gpu01", "gpu02", "root@gpu03", "ssh://root@127.0.0.1:2222",
                                  "gpu01"]
    assert select_hosts(["gpu00"], f) == ["gpu00", "gpu01", "gpu02", "root@gpu03",
                                          "ssh://root@127.0.0.1:2222"]


@pytest.mark.parametrize(("text", "message"), [
    ("gpu01\ngpu02 gpu03\n", "fleet.txt:2: one host per line"),
    ("# nothing\n\n", "names no host"),
])
def test_hosts_file_errors_name_the_line(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "fleet.txt"
    f.write_text(text)
    with pytest.raises(HostSelectionError, match=message):
        read_hosts_file(f)


def test_missing_hosts_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(HostSelectionError, match="cannot read hosts file"):
        read_hosts_file(tmp_path / "nope.txt")


def _ssh_config(tmp_path: Path) -> Path:
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "rack9.conf").write_text("Host gpu10\n  HostName 127.0.0.1\n")
    cfg = tmp_path / "config"
    cfg.write_text(
        "# fleet\n"
        "Host gpu01 gpu02\n  HostName 127.0.0.1\n"
        "Host gpu*\n  User root\n"  # a pattern: never a host by itself
        "Host !gpu03 gpu04 \"gpu05\"\n  Port 22\n"
        "Host=gpu06\n"
        "Host *\n  ServerAliveInterval 5\n"
        "Match host gpu07\n  User ops\n"
        "Host gpu?? login[12]\n"
        "Include more/*.conf\n"
        "Host bastion\n"
    )
    return cfg


def test_ssh_config_gives_only_concrete_host_names(tmp_path: Path) -> None:
    assert ssh_config_hosts(_ssh_config(tmp_path)) == [
        "gpu01", "gpu02", "gpu04", "gpu05", "gpu06", "gpu10", "bastion"]


def test_globs_expand_against_concrete_hosts(tmp_path: Path) -> None:
    cfg = _ssh_config(tmp_path)
    assert select_hosts(["gpu0*"], ssh_config=cfg) == [
        "gpu01", "gpu02", "gpu04", "gpu05", "gpu06"]
    assert select_hosts(["gpu1?", "bastion", "gpu[12]0"], ssh_config=cfg) == [
        "gpu10", "bastion"]
    assert select_hosts(["root@gpu0[12]", "ssh://root@[::1]:2222"], ssh_config=cfg) == [
        "root@gpu01", "root@gpu02", "ssh://root@[::1]:2222"]
    assert select_hosts(["ssh://root@[::1]:22"], ssh_config=tmp_path / "none") == [
        "ssh://root@[::1]:22"]  # not a glob: no ssh config needed
    with pytest.raises(HostSelectionError, match="no concrete Host .* matches 'tpu\\*'"):
        select_hosts(["tpu*"], ssh_config=cfg)


def test_glob_without_ssh_config_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(HostSelectionError, match="no ssh config"):
        select_hosts(["gpu*"], ssh_config=tmp_path / "none")


def _gpudash(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpudash", *args], capture_output=True,
                          text=True, timeout=60, env=os.environ.copy())


@pytest.mark.parametrize(("args", "message"), [
    (["snapshot", "--hosts-file", "/nonexistent/fleet.txt"], "cannot read hosts file"),
    (["snapshot", "tpu*", "--ssh-config", "CFG"], "no concrete Host"),
    (["snapshot", "--demo-hosts", "0"], "--demo-hosts: must be 1 to 256"),
    (["reclaim", "--demo-hosts", "3", "--unit", "x"], "one host at a time"),
    (["snapshot", "--demo", "--hosts-file", "FILE"], "--demo takes no HOST"),
])
def test_host_selection_usage_errors_exit_2(tmp_path: Path, args: list[str],
                                            message: str) -> None:
    hosts = tmp_path / "fleet.txt"
    hosts.write_text("gpu01\n")
    args = [str(_ssh_config(tmp_path)) if a == "CFG" else str(hosts) if a == "FILE" else a
            for a in args]
    r = _gpudash(*args)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""


def test_snapshot_of_a_demo_fleet_reports_the_unreachable_host() -> None:
    r = _gpudash("snapshot", "--demo-hosts", "3", "--json")
    assert r.returncode == 3, r.stderr  # a host could not be read
    assert '"demo-gpu01"' in r.stdout and "demo-gpu03: no answer" in r.stderr


# --- at most N connects in flight, backing off while they fail -----------------------------


async def test_limiter_bounds_connects_in_flight() -> None:
    limiter = ConnectLimiter(3)
    inside = 0
    peak = 0

    async def connect() -> None:
        nonlocal inside, peak
        async with limiter.slot():
            inside += 1
            peak = max(peak, inside)
            await asyncio.sleep(0.01)
            inside -= 1

    await asyncio.gather(*(connect() for _ in range(40)))
    assert peak == 3 == limiter.peak and limiter.in_flight == 0


async def test_limiter_backs_off_exponentially_while_connects_fail_and_resets() -> None:
    now = [0.0]
    waits: list[float] = []

    async def sleep(s: float) -> None:
        waits.append(round(s, 3))

    limiter = ConnectLimiter(2, first_backoff=0.25, max_backoff=1.0, clock=lambda: now[0],
                             sleep=sleep)

    async def attempt(fail: BaseException | None, overload: bool = True) -> None:
        try:
            async with limiter.slot(lambda _e: overload):
                if fail is not None:
                    raise fail
        except OSError:
            pass

    for _ in range(5):
        await attempt(OSError("reset"))
    assert waits == [0.25, 0.5, 1.0, 1.0]  # the first try waits for nobody; capped at 1 s
    await attempt(None)  # a success ends the backoff
    waits.clear()
    await attempt(None)
    assert waits == []
    await attempt(OSError("refused key"), overload=False)  # the host said no: no backoff
    await attempt(None)
    assert waits == []


async def test_cancelled_connect_frees_its_slot_without_backoff() -> None:
    limiter = ConnectLimiter(1)

    async def hang() -> None:
        async with limiter.slot():
            await asyncio.Event().wait()

    task = asyncio.ensure_future(hang())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert limiter.in_flight == 0 and limiter.backoff == 0.0
    async with limiter.slot():  # the slot is free again
        pass
