"""Host keys, forwarding and jump hosts against a real OpenSSH sshd on 127.0.0.1.

Every test gets its own ``$HOME``: ``~/.ssh/known_hosts`` is a file the test can see,
so a check that silently read (or wrote) it instead of the files the config names shows.
"""
# ruff: noqa: F811  (fixtures imported from sshd.fixture are redefined as parameters)

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from sshd.fixture import (  # noqa: F401
    SshdServer,
    first,
    gpus,
    keygen,
    sshd_fakegpu,
    sshd_server,
)

from gpudash.protocol.source import HostKeyError
from gpudash.transport import open_source
from gpudash.transport.hostkeys import KnownHosts
from gpudash.transport.ssh import RUN_OUTPUT_MAX, SshSource

pytestmark = pytest.mark.ssh


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``$HOME`` with an empty ``~/.ssh``."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    monkeypatch.setenv("HOME", str(home))
    return home


def entry(server: SshdServer) -> str:
    return f"[127.0.0.1]:{server.port}"


async def sample_ok(source: SshSource) -> None:
    try:
        assert (await source.control.sample()).taken_at > 0
    finally:
        await source.close()


async def refused(source: SshSource, match: str) -> HostKeyError:
    try:
        with pytest.raises(HostKeyError, match=match) as info:
            await source.control.sample()
    finally:
        await source.close()
    return info.value


async def test_changed_key_in_the_configs_known_hosts_is_refused_even_with_accept_new(
    sshd_server: SshdServer, tmp_path: Path, home: Path
) -> None:
    old = keygen(tmp_path / "old_host_key")
    config_known = tmp_path / "config_known_hosts"
    config_known.write_text(sshd_server.key_line(entry(sshd_server), old))
    config = sshd_server.write_config(
        tmp_path / "config", {"gpu-a": f"UserKnownHostsFile {config_known}"}
    )
    before = config_known.read_text()
    source = SshSource("gpu-a", ssh_config=config, accept_new_host_key=True)
    error = await refused(source, r"HOST KEY FOR .* HAS CHANGED")
    assert str(config_known) in str(error)
    assert config_known.read_text() == before
    assert not (home / ".ssh" / "known_hosts").exists()


async def test_known_hosts_none_is_never_an_unchecked_connection(
    sshd_server: SshdServer, tmp_path: Path, home: Path
) -> None:
    config = sshd_server.write_config(
        tmp_path / "config",
        {"gpu-a": "UserKnownHostsFile none\nGlobalKnownHostsFile none"},
    )
    await refused(SshSource("gpu-a", ssh_config=config), r"not in any known_hosts")
    # accept-new has nowhere to record the key: trusting it unrecorded is no check at all
    await refused(
        SshSource("gpu-a", ssh_config=config, accept_new_host_key=True),
        r"UserKnownHostsFile none",
    )
    assert not (home / ".ssh" / "known_hosts").exists()


async def test_accept_new_writes_the_first_user_known_hosts_file(
    sshd_server: SshdServer, tmp_path: Path, home: Path, gpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []

    def off_the_loop(method: str) -> None:
        real = getattr(KnownHosts, method)

        def wrapped(*args: object) -> object:
            threads.append(threading.current_thread().name)
            return real(*args)

        monkeypatch.setattr(KnownHosts, method, wrapped)

    off_the_loop("load")
    off_the_loop("record")
    one, two = tmp_path / "kh" / "one", tmp_path / "kh2"
    config = sshd_server.write_config(
        tmp_path / "config", {"gpu-a": f"UserKnownHostsFile {one} {two}"}
    )
    await sample_ok(SshSource("gpu-a", ssh_config=config, accept_new_host_key=True))
    assert one.read_text() == sshd_server.key_line(entry(sshd_server))
    assert not two.exists() and not (home / ".ssh" / "known_hosts").exists()
    await sample_ok(SshSource("gpu-a", ssh_config=config))  # now known: no opt-in needed
    # the files are read (twice) and written (once) in worker threads, not on the loop
    assert len(threads) == 3 and threading.main_thread().name not in threads


async def test_known_hosts_files_as_openssh_reads_them(
    sshd_server: SshdServer, tmp_path: Path, home: Path, gpus
) -> None:
    good = sshd_server.key_line(entry(sshd_server))
    changed = sshd_server.key_line(entry(sshd_server), keygen(tmp_path / "old_host_key"))
    (tmp_path / "good").write_text(good)
    (tmp_path / "changed").write_text(changed)
    (tmp_path / "empty").write_text("")
    hosts = {
        # a global file named by the config vouches for the key
        "via-global": f"UserKnownHostsFile {tmp_path / 'empty'}\n"
        f"GlobalKnownHostsFile {tmp_path / 'good'}",
        # %d: the home directory, as OpenSSH expands it
        "via-tokens": "UserKnownHostsFile %d/.ssh/from_token",
        "stale-config": f"UserKnownHostsFile {tmp_path / 'changed'}",
    }
    (home / ".ssh" / "from_token").write_text(good)
    config = sshd_server.write_config(tmp_path / "config", hosts)
    await sample_ok(SshSource("via-global", ssh_config=config))
    await sample_ok(SshSource("via-tokens", ssh_config=config))
    # --known-hosts replaces the config's user files (as -o UserKnownHostsFile does) ...
    await sample_ok(
        SshSource("stale-config", ssh_config=config, known_hosts=tmp_path / "good")
    )
    # ... in both directions: an empty one means "unknown", not "use the config's"
    await refused(
        SshSource("via-tokens", ssh_config=config, known_hosts=tmp_path / "empty"),
        r"not in any known_hosts",
    )
    assert not (home / ".ssh" / "known_hosts").exists()


def collector_environments(server: SshdServer) -> list[dict[str, str]]:
    """The environment of every collector process the sshd's sessions run now."""
    found = []
    for proc in psutil.Process(server.proc.pid).children(recursive=True):
        try:
            if any("gpudash_hostside" in arg for arg in proc.cmdline()):
                found.append(proc.environ())
        except psutil.Error:
            pass
    return found


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A running ssh-agent, named by ``$SSH_AUTH_SOCK``."""
    sock = tmp_path / "agent.sock"
    proc = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not sock.exists():
        assert time.monotonic() < deadline, "ssh-agent did not start"
        time.sleep(0.02)
    monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
    yield str(sock)
    proc.terminate()
    proc.wait(5)


async def test_agent_and_x11_are_never_forwarded(
    sshd_server: SshdServer, tmp_path: Path, agent: str, gpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISPLAY", ":0")
    config = sshd_server.write_config(
        tmp_path / "config",
        {
            "gpu-a": f"UserKnownHostsFile {sshd_server.known_hosts}\nForwardAgent yes\n"
            "ForwardX11 yes\nForwardX11Trusted yes"
        },
    )
    source = SshSource("gpu-a", ssh_config=config)
    stream = source.stream(0.2)
    try:
        await first(stream, 1, keep_open=True)
        envs = collector_environments(sshd_server)
    finally:
        await stream.aclose()
        await source.close()
    assert envs, "the collector's session was not found"
    assert all("SSH_AUTH_SOCK" not in env and "DISPLAY" not in env for env in envs)


def jump_config(server: SshdServer, path: Path) -> Path:
    # One sshd plays both hosts; the bastion's key is looked up under its own name
    # (HostKeyAlias), so each host's key can be right or wrong on its own.
    return server.write_config(
        path,
        {
            "bastion": "HostKeyAlias bastion-key",
            "gpu-behind": "ProxyJump bastion",
        },
    )


async def test_jump_host_key_is_checked_against_the_same_files(
    sshd_server: SshdServer, tmp_path: Path, home: Path, gpus
) -> None:
    config = jump_config(sshd_server, tmp_path / "config")
    known = tmp_path / "known_hosts"
    target_line = sshd_server.key_line(entry(sshd_server))
    # both keys in --known-hosts, nothing in ~/.ssh/known_hosts: the jump works
    known.write_text(target_line + sshd_server.key_line("bastion-key"))
    await sample_ok(SshSource("gpu-behind", ssh_config=config, known_hosts=known))

    other = keygen(tmp_path / "old_host_key")
    known.write_text(target_line + sshd_server.key_line("bastion-key", other))
    error = await refused(
        SshSource("gpu-behind", ssh_config=config, known_hosts=known, accept_new_host_key=True),
        r"HOST KEY FOR bastion\b.* HAS CHANGED",
    )
    assert "jump host" in str(error) and "ssh-keygen -R 'bastion-key'" in str(error)

    known.write_text(target_line)
    await refused(
        SshSource("gpu-behind", ssh_config=config, known_hosts=known),
        r"host key for bastion\b.*not in any known_hosts",
    )
    await sample_ok(
        SshSource("gpu-behind", ssh_config=config, known_hosts=known, accept_new_host_key=True)
    )
    assert known.read_text() == target_line + sshd_server.key_line("bastion-key")
    assert not (home / ".ssh" / "known_hosts").exists()


async def test_open_source_passes_known_hosts_to_the_jump(
    sshd_server: SshdServer, tmp_path: Path, home: Path, gpus
) -> None:
    config = jump_config(sshd_server, tmp_path / "config")
    known = tmp_path / "known_hosts"
    known.write_text(
        sshd_server.key_line(entry(sshd_server)) + sshd_server.key_line("bastion-key")
    )
    source = open_source("gpu-behind", ssh_config=config, known_hosts=known)
    try:
        snap = await asyncio.wait_for(source.control.sample(), 30)
    finally:
        await source.close()
    assert len(snap.gpus) == 4
    assert os.environ["HOME"] == str(home)


async def test_a_commands_output_is_bounded_whatever_the_host_sends(
    sshd_server: SshdServer, tmp_path: Path, home: Path
) -> None:
    # systemctl and the shell fallback's signal run to completion, for up to 150 s: a
    # compromised host answering with endless output must not fill the operator's memory
    config = sshd_server.write_config(
        tmp_path / "config", {"gpu-a": f"UserKnownHostsFile {sshd_server.known_hosts}"}
    )
    connection = SshSource("gpu-a", ssh_config=config).connection
    try:
        await connection.connect()
        flood = "head -c 33554432 /dev/zero | tr '\\0' x; printf '\\377\\nsent\\n'; exit 3"
        done = await connection.run(["sh", "-c", flood], 60)
    finally:
        await connection.close()
    assert done.returncode == 3
    assert len(done.output) <= RUN_OUTPUT_MAX + 100
    # the tail is kept (the shell fallback's verdict is its last line), invalid UTF-8 shown
    assert done.output.endswith("\ufffd\nsent\n") and "output cut" in done.output
