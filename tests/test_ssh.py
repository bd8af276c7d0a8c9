"""The SSH transport against a real OpenSSH sshd on 127.0.0.1, with stand-in GPUs."""
# ruff: noqa: F811  (fixtures imported from sshd.fixture are redefined as parameters)

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest
from sshd.fixture import (  # noqa: F401
    SshdServer,
    first,
    gpus,
    keygen,
    ssh_source,
    sshd_fakegpu,
    sshd_server,
)

from gpudash.domain.model import HostSnapshot, SourceKind
from gpudash.feed.reconnect import LinkState, reconnecting_stream
from gpudash.protocol.source import HostKeyError, LinkLost, SignalOutcome
from gpudash.transport import LocalSource, open_source

pytestmark = pytest.mark.ssh


async def test_remote_snapshot_equals_local(sshd_server: SshdServer, gpus) -> None:
    tp0 = gpus.hold([0, 1], 3000, "VLLM::Worker_TP0")
    tp1 = gpus.hold(2, 1500, "VLLM::Worker_TP1")
    remote = ssh_source(sshd_server)
    local = LocalSource(env=gpus.local_env)
    try:
        r = await first(remote.stream(0.2), 2)
        loc = await first(local.stream(0.2), 2)
    finally:
        await remote.close()
        await local.close()
    assert r.source == loc.source == SourceKind.NVML
    assert [(g.index, g.uuid, g.name, g.memory_total_mib, g.memory_used_mib) for g in r.gpus] == [
        (g.index, g.uuid, g.name, g.memory_total_mib, g.memory_used_mib) for g in loc.gpus
    ]
    holders = {p.pid: (p.start_ticks, dict(p.gpu_memory_mib)) for p in r.processes}
    assert holders == {p.pid: (p.start_ticks, dict(p.gpu_memory_mib)) for p in loc.processes}
    assert holders[tp0.pid][1] == {0: 3000, 1: 3000}
    assert holders[tp1.pid][1] == {2: 1500}
    assert r.process(tp0.pid).cmdline.startswith("VLLM::Worker_TP0")  # type: ignore[union-attr]
    assert r.host == sshd_server.target and r.can_act


async def test_config_alias_and_open_source(sshd_server: SshdServer, gpus) -> None:
    source = open_source(
        "gpuhost",
        interval=0.5,
        sudo=False,
        accept_new_host_key=False,
        ssh_config=sshd_server.ssh_config,
        known_hosts=None,
        read_only=True,
    )
    try:
        snap = await source.control.sample()
    finally:
        await source.close()
    assert (
        len(snap.gpus) == 4 and not snap.can_act and "read-only" in (snap.cannot_act_reason or "")
    )


async def test_kill_over_ssh_frees_memory(sshd_server: SshdServer, gpus) -> None:
    holder = gpus.hold(3, 5000, "orphan-worker")
    source = ssh_source(sshd_server)
    try:
        before = await source.control.sample()
        proc = before.process(holder.pid)
        assert proc is not None and before.gpu(3).memory_used_mib == 5000  # type: ignore[union-attr]
        outcome = await source.control.signal(holder.pid, proc.start_ticks, signal.SIGTERM)
        assert outcome is SignalOutcome.SENT
        holder.wait(5)  # we are its parent here: reap it
        deadline = time.monotonic() + 5
        while True:
            snap = await source.control.sample()
            if snap.gpu(3).memory_used_mib == 0:  # type: ignore[union-attr]
                break
            assert time.monotonic() < deadline, "memory did not come back"
            await source.control.sleep(0.1)
        assert snap.process(holder.pid) is None
        again = await source.control.signal(holder.pid, proc.start_ticks, signal.SIGKILL)
        assert again in (SignalOutcome.GONE, SignalOutcome.MISMATCH)
    finally:
        await source.close()


async def test_recycled_pid_is_not_signalled(sshd_server: SshdServer, gpus) -> None:
    holder = gpus.hold(0, 100, "innocent")
    source = ssh_source(sshd_server)
    try:
        snap = await source.control.sample()
        planned = snap.process(holder.pid).start_ticks  # type: ignore[union-attr]
        assert planned is not None
        outcome = await source.control.signal(holder.pid, planned - 1, signal.SIGKILL)
        assert outcome is SignalOutcome.MISMATCH
        assert await source.control.signal(holder.pid, None, signal.SIGKILL) is (
            SignalOutcome.MISMATCH
        )
        await asyncio.sleep(0.2)
        assert holder.poll() is None, "a process with another start time was signalled"
    finally:
        await source.close()


async def test_unknown_host_key_refused_then_accepted_with_opt_in(
    sshd_server: SshdServer,
    tmp_path: Path,
    gpus,
) -> None:
    known = tmp_path / "kh"
    source = ssh_source(sshd_server, known_hosts=known)
    with pytest.raises(
        HostKeyError, match=r"not in .*verify it and run `ssh .*--accept-new-host-key"
    ):
        await source.control.sample()
    assert not known.exists()
    source = ssh_source(sshd_server, known_hosts=known, accept_new_host_key=True)
    try:
        assert (await source.control.sample()).gpus
    finally:
        await source.close()
    assert f"[127.0.0.1]:{sshd_server.port} ssh-ed25519 " in known.read_text()
    source = ssh_source(sshd_server, known_hosts=known)  # now known: no opt-in needed
    try:
        assert (await source.control.sample()).gpus
    finally:
        await source.close()


async def test_changed_host_key_refused_even_with_accept_new(
    sshd_server: SshdServer, tmp_path: Path
) -> None:
    other = keygen(tmp_path / "other_host_key")
    known = tmp_path / "kh"
    algo, blob = other.split()[:2]
    known.write_text(f"[127.0.0.1]:{sshd_server.port} {algo} {blob}\n")
    for accept in (False, True):
        source = ssh_source(sshd_server, known_hosts=known, accept_new_host_key=accept)
        with pytest.raises(HostKeyError, match=r"HAS CHANGED.*ssh-keygen -R"):
            await first(source.stream(0.5))
    assert known.read_text().count("\n") == 1


async def test_dropped_link_raises_link_lost_and_reconnects(
    sshd_server: SshdServer,
    gpus,
) -> None:
    source = ssh_source(sshd_server)
    try:
        stream = source.stream(0.2)
        await first(stream, 2, keep_open=True)
        assert sshd_server.drop_connections() > 0
        started = time.monotonic()
        with pytest.raises(LinkLost):
            async for _ in stream:
                pass
        assert time.monotonic() - started < 3
        snap = await first(source.stream(0.2), 2)  # calling stream() again reconnects
        assert len(snap.gpus) == 4
    finally:
        await source.close()


async def test_reconnecting_stream_reports_states(sshd_server: SshdServer, gpus) -> None:
    source = ssh_source(sshd_server)
    states: list[LinkState] = []
    count = 0
    try:
        async for _snap in reconnecting_stream(source, 0.2, states.append, first_backoff=0.1):
            count += 1
            if count == 2:
                sshd_server.drop_connections()
            if count == 4:
                break
    finally:
        await source.close()
    kinds = [s.state for s in states]
    assert kinds[:2] == ["connecting", "connected"]
    assert "stale" in kinds and "reconnecting" in kinds and kinds[-1] == "connected"
    assert next(s for s in states if s.state == "reconnecting").retry_in == 0.1


async def test_host_without_python_gives_degraded_shell_snapshot(
    sshd_server: SshdServer,
    gpus,
) -> None:
    holder = gpus.hold(1, 700, "shell-seen")
    source = ssh_source(sshd_server, python="python3-not-installed")
    try:
        snap = await first(source.stream(0.3), 1)
        sampled = await source.control.sample()
        proc = snap.process(holder.pid)
        assert proc is not None and proc.start_ticks is not None
        outcome = await source.control.signal(holder.pid, proc.start_ticks + 5, signal.SIGKILL)
        assert outcome is SignalOutcome.MISMATCH and holder.poll() is None
        outcome = await source.control.signal(holder.pid, proc.start_ticks, signal.SIGKILL)
        assert outcome is SignalOutcome.SENT
        assert holder.wait(5) == -signal.SIGKILL
    finally:
        await source.close()
    for s in (snap, sampled):
        assert s.source is SourceKind.SHELL and s.degraded
        assert len(s.gpus) == 4 and s.gpu(1).memory_used_mib == 700  # type: ignore[union-attr]
        assert any("no python3" in e for e in s.errors)
    assert dict(proc.gpu_memory_mib) == {1: 700}


async def test_systemctl_over_ssh_on_host_without_systemd(sshd_server: SshdServer) -> None:
    source = ssh_source(sshd_server)
    try:
        result = await source.control.systemctl("stop", "vllm-minimax-m25.service")
        assert result.argv == ("systemctl", "stop", "--", "vllm-minimax-m25.service")
        assert result.returncode not in (0, None)
        with pytest.raises(ValueError):
            await source.control.systemctl("stop", "x.service; rm -rf /")
        with pytest.raises(ValueError):
            await source.control.systemctl("kill", "x.service")
        with pytest.raises(ValueError):
            await source.control.signal(0, 1, 9)
    finally:
        await source.close()


@pytest.mark.ssh
async def test_proxyjump_from_ssh_config(sshd_server: SshdServer, gpus) -> None:
    """`ProxyJump` in ~/.ssh/config is honoured: the session goes through the jump host."""
    config = sshd_server.dir / "ssh_config_jump"
    common = (
        f"    User root\n    IdentityFile {sshd_server.client_key}\n    IdentitiesOnly yes\n"
        f"    UserKnownHostsFile {sshd_server.known_hosts}\n"
    )
    config.write_text(
        f"Host bastion\n    HostName 127.0.0.1\n    Port {sshd_server.port}\n{common}\n"
        f"Host gpu-behind-bastion\n    HostName 127.0.0.1\n    Port {sshd_server.port}\n"
        f"    ProxyJump bastion\n{common}"
    )

    def connections() -> set[int]:
        # one sshd child of the listener per TCP connection
        return {p.pid for p in sshd_server.connection_processes()
                if p.ppid() == sshd_server.proc.pid}

    async def connections_while_sampling(target: str, cfg: Path) -> tuple[int, HostSnapshot]:
        before = connections()
        source = open_source(target, interval=0.5, ssh_config=cfg)
        try:
            snap = await source.control.sample()
            return len(connections() - before), snap  # through a jump host: two
        finally:
            await source.close()

    direct, snap_direct = await connections_while_sampling("gpuhost", sshd_server.ssh_config)
    jumped, snap_jumped = await connections_while_sampling("gpu-behind-bastion", config)
    assert (direct, jumped) == (1, 2)
    assert [g.uuid for g in snap_jumped.gpus] == [g.uuid for g in snap_direct.gpus]


async def test_many_hosts_connect_at_most_n_at_a_time(sshd_server: SshdServer, gpus) -> None:
    """12 hosts started together against one real sshd: every connect waits for one of the
    limiter's 3 slots, all 12 get their snapshot, and never more than 3 were in flight."""
    from gpudash.transport.limiter import ConnectLimiter

    limiter = ConnectLimiter(3)
    sources = [ssh_source(sshd_server, limiter=limiter) for _ in range(12)]
    try:
        snaps = await asyncio.gather(*(s.control.sample() for s in sources))
    finally:
        await asyncio.gather(*(s.close() for s in sources))
    assert len(snaps) == 12 and all(isinstance(s, HostSnapshot) for s in snaps)
    assert limiter.peak == 3  # reached, and never exceeded
    assert limiter.in_flight == 0 and limiter.backoff == 0.0
