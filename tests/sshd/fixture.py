"""A real OpenSSH sshd on 127.0.0.1 for the transport tests.

Import the fixtures into a test module (tests/ is on sys.path via conftest):

    from sshd.fixture import sshd_server  # noqa: F401

The server runs as root (the test container's user) with key-only login, its own host
key, a free port, and ``SetEnv`` putting the stand-in driver into every session.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def sshd_available() -> bool:
    return os.path.exists(SSHD) and shutil.which("ssh-keygen") is not None


def require_sshd() -> None:
    """Skip without sshd, unless this is CI (CI=true), where its absence is a failure."""
    if not sshd_available():
        if os.environ.get("CI") == "true":
            pytest.fail("sshd is required in CI (install openssh-server)")
        pytest.skip("no /usr/sbin/sshd here")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def keygen(path: Path) -> str:
    """A new ed25519 key pair at ``path``; returns the public key line."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text().strip()


@dataclass
class SshdServer:
    dir: Path
    port: int
    proc: subprocess.Popen[bytes]
    host_key: Path
    client_key: Path
    known_hosts: Path
    ssh_config: Path
    env: dict[str, str]

    alias = "gpuhost"

    @property
    def target(self) -> str:
        return f"ssh://root@127.0.0.1:{self.port}"

    def write_known_hosts(self, host_key_pub: str | None = None) -> None:
        key = host_key_pub or self.host_key.with_suffix(".pub").read_text()
        algo, blob = key.split()[:2]
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {algo} {blob}\n")

    def key_line(self, name: str, public_key: str | None = None) -> str:
        """A known_hosts line for ``name`` with this server's key (or ``public_key``)."""
        key = public_key or self.host_key.with_suffix(".pub").read_text()
        algo, blob = key.split()[:2]
        return f"{name} {algo} {blob}\n"

    def write_config(self, path: Path, hosts: dict[str, str]) -> Path:
        """An ssh config at ``path``: one ``Host`` block per alias, each reaching this
        server as root with the client key, plus the block's extra lines."""
        blocks = [
            f"Host {alias}\n    HostName 127.0.0.1\n    Port {self.port}\n    User root\n"
            f"    IdentityFile {self.client_key}\n    IdentitiesOnly yes\n"
            + "".join(f"    {line.strip()}\n" for line in extra.strip().splitlines())
            for alias, extra in hosts.items()
        ]
        path.write_text("\n".join(blocks))
        return path

    def connection_processes(self) -> list[psutil.Process]:
        """The per-connection sshd processes (children of the listener)."""
        return [
            p
            for p in psutil.Process(self.proc.pid).children(recursive=True)
            if p.name().startswith("sshd")
        ]

    def drop_connections(self) -> int:
        """SIGKILL every per-connection sshd: the TCP link dies as a cable pull would."""
        procs = self.connection_processes()
        for p in procs:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        return len(procs)


def start_sshd(base: Path, env: dict[str, str]) -> SshdServer:
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o700)
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # privilege separation dir
    host_key = base / "host_ed25519"
    client_key = base / "client_ed25519"
    keygen(host_key)
    (base / "authorized_keys").write_text(keygen(client_key) + "\n")
    port = _free_port()
    setenv = " ".join(f'"{k}={v}"' for k, v in sorted(env.items()))
    config = base / "sshd_config"
    config.write_text(
        f"""Port {port}
ListenAddress 127.0.0.1
HostKey {host_key}
PidFile {base}/sshd.pid
AuthorizedKeysFile {base}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxSessions 50
X11Forwarding yes
X11UseLocalhost yes
MaxStartups 50
LogLevel ERROR
{"SetEnv " + setenv if setenv else ""}
"""
    )
    known_hosts = base / "known_hosts"
    ssh_config = base / "ssh_config"
    ssh_config.write_text(
        f"""Host {SshdServer.alias}
    HostName 127.0.0.1
    Port {port}
    User root
    IdentityFile {client_key}
    IdentitiesOnly yes
    UserKnownHostsFile {known_hosts}

Host 127.0.0.1
    IdentityFile {client_key}
    IdentitiesOnly yes
"""
    )
    log = (base / "sshd.log").open("wb")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=log)
    server = SshdServer(base, port, proc, host_key, client_key, known_hosts, ssh_config, env)
    server.write_known_hosts()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("sshd exited: " + (base / "sshd.log").read_text())
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return server
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("sshd did not listen in time")


def stop_sshd(server: SshdServer) -> None:
    server.drop_connections()
    server.proc.terminate()
    try:
        server.proc.wait(5)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()


@pytest.fixture(scope="session")
def sshd_fakegpu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(build dir, state dir) of the stand-in driver every SSH session sees."""
    require_sshd()
    from fakegpu import harness

    out = harness.build(os.environ.get("FAKEGPU_BUILD_DIR") or tmp_path_factory.mktemp("fgb"))
    state = tmp_path_factory.mktemp("fakegpu-ssh-state")
    yield out, state


@pytest.fixture(scope="session")
def sshd_server(
    tmp_path_factory: pytest.TempPathFactory, sshd_fakegpu: tuple[Path, Path]
) -> Iterator[SshdServer]:
    """One sshd for the whole session; sessions see the stand-in driver."""
    out, state = sshd_fakegpu
    # A home of its own: the remote shell must not run this machine's ~/.bashrc (pyenv's
    # `pyenv rehash` there raced between 12 parallel sessions and printed rm errors).
    home = tmp_path_factory.mktemp("sshd-home")
    env = {
        "HOME": str(home),
        "FAKEGPU_STATE": str(state),
        "LD_LIBRARY_PATH": str(out),
        "PATH": f"{out}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    }
    server = start_sshd(tmp_path_factory.mktemp("sshd"), env)
    try:
        yield server
    finally:
        stop_sshd(server)


class SshGpus:
    """The stand-in GPUs the sshd's sessions see; holders are killed at teardown."""

    def __init__(self, out: Path, state: Path) -> None:
        from fakegpu import harness

        self.env = harness.env(out, state)
        self.local_env = {k: self.env[k] for k in ("FAKEGPU_STATE", "LD_LIBRARY_PATH", "PATH")}
        self.holders: list[subprocess.Popen[str]] = []

    def hold(
        self, gpu: int | list[int], mib: int, name: str, *, binary: str | None = None
    ) -> subprocess.Popen[str]:
        """A holder; ``binary`` (a link to the stand-in) sets its comm, as exec would."""
        from fakegpu import harness

        env = self.env if binary is None else {**self.env, "FAKEGPU_BIN": binary}
        p = harness.spawn_holder(gpu, mib, name=name, env=env)
        self.holders.append(p)
        return p


@pytest.fixture
def gpus(sshd_fakegpu: tuple[Path, Path]) -> Iterator[SshGpus]:
    """Fresh stand-in state (4 GPUs of 40 GiB) shared with the sshd sessions."""
    from fakegpu import harness

    out, state = sshd_fakegpu
    harness.init_state(state, gpus=4, total_mib=40960, teardown_ms=100, out_dir=out)
    g = SshGpus(out, state)
    yield g
    for p in g.holders:
        harness.kill_holder(p)


def ssh_source(server: SshdServer, **kw: Any) -> Any:
    """An ``SshSource`` for the test sshd (its known_hosts and config unless given)."""
    from gpudash.transport.ssh import SshSource

    kw.setdefault("known_hosts", server.known_hosts)
    kw.setdefault("ssh_config", server.ssh_config)
    return SshSource(server.target, **kw)


async def first(stream: AsyncIterator[Any], n: int = 1, *, keep_open: bool = False) -> Any:
    """The ``n``-th item of ``stream``; closes it (in this loop) unless ``keep_open``."""
    last = None
    async for item in stream:
        last = item
        n -= 1
        if n <= 0:
            break
    if not keep_open:
        await stream.aclose()  # type: ignore[attr-defined]
    assert last is not None
    return last
