"""An ssh config another user could have written is refused before a line of it is used,
as ssh refuses it (issue 29, item 12): real files with real owners and modes, the real
sshd on 127.0.0.1, and the real ``ssh`` as the judge of the rule.

A ``ProxyCommand`` in the config is how that other user would run a command as us (as
root): here it writes a marker file and then relays to the sshd, so "it never ran" and
"it connected through it once the file was fixed" are both seen.
"""
# ruff: noqa: F811  (fixtures imported from sshd.fixture are redefined as parameters)

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from sshd.fixture import SshdServer, gpus, sshd_fakegpu, sshd_server  # noqa: F401
from test_cli import gpudash
from test_ui_notice import LAPTOP, wait_for

from gpudash.protocol.source import ConnectError
from gpudash.transport.ssh import SshSource
from gpudash.transport.sshconfig import UnsafeSshConfig, check_ssh_config
from gpudash.ui.app import GpudashApp

pytestmark = pytest.mark.ssh

NOBODY = 65534  # a user other than us (the tests run as root)
RELAY = """import socket, sys, threading
open(sys.argv[3], "w").close()  # the proof that this ProxyCommand ran
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
def up():
    while True:
        data = sys.stdin.buffer.read1(65536)
        if not data:
            break
        s.sendall(data)
    s.shutdown(socket.SHUT_WR)
threading.Thread(target=up, daemon=True).start()
while True:
    data = s.recv(65536)
    if not data:
        break
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``$HOME`` (0755) with an empty ``~/.ssh`` (0700)."""
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    (home / ".ssh").mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(home))
    return home


def proxied_config(server: SshdServer, path: Path, marker: Path) -> Path:
    """``Host gpuhost``, reached through a ProxyCommand that leaves ``marker``."""
    relay = path.parent / "relay.py"
    relay.write_text(RELAY)
    server.write_config(path, {"gpuhost": (
        f"UserKnownHostsFile {server.known_hosts}\n"
        f"ProxyCommand {sys.executable} {relay} 127.0.0.1 {server.port} {marker}")})
    path.chmod(0o600)
    return path


async def sample(source: SshSource) -> None:
    try:
        assert (await source.control.sample()).taken_at > 0
    finally:
        await source.close()


async def refused(source: SshSource) -> str:
    try:
        with pytest.raises(ConnectError) as info:
            await source.control.sample()
    finally:
        await source.close()
    assert isinstance(info.value, UnsafeSshConfig), info.value
    return str(info.value)


# What another user could do to the config or a directory on its way, what gpudash then
# says, and how it is undone.
Spoil = Callable[[Path, Path], tuple[Path, str]]  # (config, home) -> (spoilt path, words)


def writable_by_others(config: Path, home: Path) -> tuple[Path, str]:
    config.chmod(0o666)
    return config, "writable by others (mode 0666)"


def owned_by_nobody(config: Path, home: Path) -> tuple[Path, str]:
    os.chown(config, NOBODY, -1)
    return config, f"owned by uid {NOBODY} (nobody), not by you (uid 0) or root"


def writable_by_a_shared_group(config: Path, home: Path) -> tuple[Path, str]:
    os.chown(config, -1, NOBODY)  # nogroup: nobody's primary group, not only ours
    config.chmod(0o620)
    return config, "writable by group nogroup (mode 0620)"


def ssh_dir_writable_by_others(config: Path, home: Path) -> tuple[Path, str]:
    (home / ".ssh").chmod(0o777)
    return home / ".ssh", f"its directory {home / '.ssh'} is writable by others (mode 0777)"


def home_owned_by_nobody(config: Path, home: Path) -> tuple[Path, str]:
    os.chown(home, NOBODY, -1)
    return home, f"its directory {home} is owned by uid {NOBODY}"


def undo(path: Path, home: Path) -> None:
    os.chown(path, 0, 0)
    path.chmod(0o700 if path.is_dir() else 0o600)


@pytest.mark.parametrize("spoil", [writable_by_others, owned_by_nobody,
                                   writable_by_a_shared_group, ssh_dir_writable_by_others,
                                   home_owned_by_nobody])
async def test_a_config_another_user_can_write_is_refused_before_its_proxycommand_runs(
    sshd_server: SshdServer, gpus, home: Path, tmp_path: Path, spoil: Spoil,
) -> None:
    marker = tmp_path / "proxycommand-ran"
    config = proxied_config(sshd_server, home / ".ssh" / "config", marker)
    spoilt, words = spoil(config, home)
    message = await refused(SshSource("gpuhost"))
    assert message.startswith(
        f"not connecting to gpuhost: Bad owner or permissions on {config}: "), message
    assert words in message
    assert not marker.exists()  # nothing of it was used
    undo(spoilt, home)  # the same config, its owner and modes fixed: it connects
    await sample(SshSource("gpuhost"))
    assert marker.exists()


async def test_an_included_file_is_checked_also_from_an_explicit_config(
    sshd_server: SshdServer, gpus, home: Path, tmp_path: Path,
) -> None:
    """ssh checks every Include, also those of ``-F FILE``; ``FILE`` itself it does not
    check (``-F /dev/null``, 0666, is how ssh is told to read no config)."""
    marker = tmp_path / "proxycommand-ran"
    included = proxied_config(sshd_server, home / ".ssh" / "gpu.conf", marker)
    explicit = tmp_path / "explicit_config"
    explicit.write_text("Include gpu.conf\n")  # relative: under ~/.ssh, as ssh reads it
    explicit.chmod(0o666)
    included.chmod(0o646)
    message = await refused(SshSource("gpuhost", ssh_config=explicit))
    assert f"Bad owner or permissions on {included}: writable by others" in message
    assert not marker.exists()
    included.chmod(0o644)
    await sample(SshSource("gpuhost", ssh_config=explicit))
    assert marker.exists()


async def test_an_include_loop_is_refused_not_a_crash(home: Path) -> None:
    config = home / ".ssh" / "config"
    config.write_text("Host *\n  Include config\n")
    config.chmod(0o600)
    message = await refused(SshSource("gpuhost"))
    assert "Include nested more than 16 deep" in message


def ssh_refuses(config: Path) -> bool:
    """What the real ssh says of ``config``: ``ssh -F config -G`` reads it and its
    Includes and prints the options, or refuses ("Bad owner or permissions")."""
    r = subprocess.run(["ssh", "-F", str(config), "-G", "gpuhost"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0 or "Bad owner or permissions" in r.stderr, r.stderr
    return r.returncode != 0


def gpudash_refuses(config: Path) -> bool:
    try:
        check_ssh_config(config)
    except UnsafeSshConfig:
        return True
    return False


@pytest.mark.parametrize(("mode", "uid", "gid"), [
    (0o600, 0, 0), (0o644, 0, 0), (0o400, 0, 0),  # ours
    (0o602, 0, 0), (0o666, 0, 0), (0o646, 0, 0),  # others may write
    (0o600, NOBODY, 0), (0o644, NOBODY, NOBODY),  # another user's
    (0o620, 0, NOBODY), (0o660, 0, NOBODY),  # a group that holds another user
])
def test_the_rule_is_the_one_ssh_applies(home: Path, mode: int, uid: int, gid: int) -> None:
    if not os.path.exists("/usr/bin/ssh"):
        pytest.skip("no ssh client to compare with")
    included = home / ".ssh" / "included.conf"
    included.write_text("Host gpuhost\n  Port 2222\n")
    os.chown(included, uid, gid)
    included.chmod(mode)
    config = home / ".ssh" / "main.conf"
    config.write_text(f"Include {included}\n")
    assert gpudash_refuses(config) == ssh_refuses(config)
    assert gpudash_refuses(config) == (mode & 0o002 != 0 or uid != 0 or mode & 0o020 != 0)


def test_a_group_of_ours_alone_may_write_it_as_debians_ssh_allows(home: Path) -> None:
    """Debian and Ubuntu give each user a group of their own and umask 002: their ssh
    accepts a config that group may write, when the group holds nobody else (root's
    group holds only root here)."""
    included = home / ".ssh" / "included.conf"
    included.write_text("Host gpuhost\n  Port 2222\n")
    included.chmod(0o660)
    config = home / ".ssh" / "main.conf"
    config.write_text(f"Include {included}\n")
    assert not gpudash_refuses(config)
    version = subprocess.run(["ssh", "-V"], capture_output=True, text=True).stderr
    if "Debian" in version or "Ubuntu" in version:
        assert not ssh_refuses(config)


def test_the_cli_refuses_with_exit_3_naming_the_file(
    sshd_server: SshdServer, home: Path, tmp_path: Path,
) -> None:
    marker = tmp_path / "proxycommand-ran"
    config = proxied_config(sshd_server, home / ".ssh" / "config", marker)
    os.chown(config, NOBODY, -1)
    for target in ("gpuhost", "gpu*"):  # a name, and a glob read from the config itself
        r = gpudash("snapshot", target, "--known-hosts", str(sshd_server.known_hosts))
        assert r.returncode == 3, r.stderr
        assert f"Bad owner or permissions on {config}: owned by uid {NOBODY}" in r.stderr
        assert "Traceback" not in r.stderr and r.stdout == ""
    assert not marker.exists()


async def test_the_dashboard_says_which_file_and_what_to_do(
    sshd_server: SshdServer, home: Path, tmp_path: Path,
) -> None:
    marker = tmp_path / "proxycommand-ran"
    config = proxied_config(sshd_server, home / ".ssh" / "config", marker)
    config.chmod(0o666)
    app = GpudashApp([SshSource("gpuhost")], interval=0.25, read_only=True, theme=None,
                     exec_options=None)
    async with app.run_test(size=LAPTOP) as pilot:
        notice = app.query_one("#notice")
        await wait_for(pilot, lambda: notice.display)
        text = notice.render().plain
        assert f"Bad owner or permissions on {config}: writable by others" in text
        assert "What to do: fix the owner or mode the message names" in text
    assert not marker.exists()


def test_a_line_that_cannot_be_split_hides_no_include_from_the_check(home: Path) -> None:
    bad = home / ".ssh" / "bad.conf"
    bad.write_text("ProxyCommand touch /nonexistent/x\n")
    bad.chmod(0o666)
    config = home / ".ssh" / "config"
    config.write_text('Host a\n  User "unclosed\nInclude bad.conf\n')
    config.chmod(0o600)
    with pytest.raises(UnsafeSshConfig, match=f"Bad owner or permissions on {bad}: writable"):
        check_ssh_config(None)
