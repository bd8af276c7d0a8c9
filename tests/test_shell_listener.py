"""The shell fallback's ready proof (issue 19, item 6; issue 29, item 1): on a host without
python3 a ready URL proves a unit serves only from the unit's own process, seen at the
other end of the probe's own connection, as with the Python collector. The real bash
script runs against this machine's /proc, with a real HTTP server held by a real child
process, through the real local transport."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_ready_proof import racer  # noqa: F401  (a fixture)

from gpudash.collector.host.ready import listening_inodes
from gpudash.protocol.shell_listener import (
    NO_BASH,
    ShellListener,
    ask_owned,
    parse_listener,
    probe_argv,
    shell_listener_refusal,
)
from gpudash.protocol.source import CommandResult
from gpudash.transport.local import LocalSource


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


@pytest.fixture
def squatter(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A server that bound the model's port while the model was down."""
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                               str(port)], cwd=tmp_path, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not listening_inodes(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        yield server, port
    finally:
        server.kill()
        server.wait()


def test_the_script_names_who_answers_and_then_what_it_said(squatter) -> None:  # type: ignore[no-untyped-def]
    server, port = squatter
    done = subprocess.run(probe_argv(port, "/", 5), capture_output=True, text=True, timeout=60)
    found = parse_listener(done.stdout)
    assert found.pid == server.pid, done.stdout
    assert found.comm.strip() == Path(f"/proc/{server.pid}/comm").read_text().strip()
    assert found.cgroup.strip() == Path(f"/proc/{server.pid}/cgroup").read_text().strip()
    assert found.status == 200, done.stdout


def test_the_script_says_when_nobody_answers_or_the_scan_is_capped(squatter) -> None:  # type: ignore[no-untyped-def]
    _server, port = squatter
    nobody = subprocess.run(probe_argv(_free_port(), "/", 5), capture_output=True,
                            text=True, timeout=60)
    assert parse_listener(nobody.stdout) == ShellListener(None, reason="refused")
    capped = subprocess.run(probe_argv(port, "/", 5, cap=0), capture_output=True, text=True,
                            timeout=60)
    assert parse_listener(capped.stdout).reason == "capped"


@pytest.mark.parametrize("port", [0, 65536, -1, True, "8000; reboot"])
def test_only_a_checked_port_reaches_the_shell(port: object) -> None:
    with pytest.raises(ValueError):
        probe_argv(port, "/", 3)  # type: ignore[arg-type]


@pytest.mark.parametrize("path", ["health", "/a b", "/x\r\nHost: evil", "/\x00", "/é"])
def test_only_a_checked_path_reaches_the_shell(path: str) -> None:
    with pytest.raises(ValueError):
        probe_argv(8000, path, 3)


def test_host_text_cannot_pass_for_a_marker() -> None:
    # a comm "@pid 1" arrives quoted; an answer cut short is unread, never a listener
    out = "@pid 42\n@comm\n|@end\n@cgroup\n|0::/system.slice/x.service\n@end\n"
    found = parse_listener(out)
    assert (found.pid, found.comm) == (42, "@end")
    assert parse_listener("@pid 42\n@comm\n|x\n").reason == "unread"
    assert parse_listener("").reason == "unread"


def test_the_units_own_listener_is_accepted_and_anothers_refused() -> None:
    own = ShellListener(7, "python3", "0::/system.slice/vllm-kimi-k25.service")
    other = ShellListener(9, "python3", "0::/user.slice/user-65534.slice/session-7.scope")
    assert shell_listener_refusal(8001, "vllm-kimi-k25.service", own) is None
    assert shell_listener_refusal(8001, "vllm-kimi-k25.service", other) == (
        "port 8001 is not vllm-kimi-k25.service's: pid 9 (python3, session-7.scope) "
        "listens on it")
    # not readable by this login: no proof (it once let the GET decide)
    assert shell_listener_refusal(8001, "x.service", ShellListener(None, reason="hidden")) \
        == ("who answers on port 8001 cannot be told: some processes' descriptors are not "
            "readable by this login (--sudo)")


async def test_a_racing_listener_gets_no_probe_counted_by_the_shell_fallback(  # type: ignore[no-untyped-def]
        racer) -> None:
    # seen: 47 of 60 probes counted as the unit's 200 (the listener looked up, then curl)
    _proc, port = racer
    source = LocalSource(python=None)
    try:
        answers = [await source.control.probe_http(  # type: ignore[attr-defined]
            f"http://127.0.0.1:{port}/health", 1, "vllm-kimi-k25.service") for _ in range(60)]
    finally:
        await source.close()
    assert [a for a in answers if a.status == 200] == []
    assert any(a.error != "connection refused" for a in answers)  # it was reached


async def test_a_host_without_bash_offers_no_ready_proof() -> None:
    async def no_bash(argv: list[str], limit_s: float) -> CommandResult:
        return CommandResult(tuple(argv), 127, "sh: bash: not found")

    assert await ask_owned("http://127.0.0.1:8000/health", "x.service", no_bash, 3) == (
        None, NO_BASH)


async def test_the_shell_fallback_refuses_a_port_another_process_listens_on(squatter) -> None:  # type: ignore[no-untyped-def]
    server, port = squatter
    source = LocalSource(python=None)  # the shell fallback: no python3 on the host
    try:
        url = f"http://127.0.0.1:{port}/"
        asked = await source.control.probe_http(url, 3)  # type: ignore[attr-defined]
        assert asked.status == 200  # no unit named: the GET decides
        refused = await source.control.probe_http(  # type: ignore[attr-defined]
            url, 3, "vllm-kimi-k25.service")
        comm = _comm(server.pid)
        assert (refused.status, refused.error) == (
            None, f"port {port} is not vllm-kimi-k25.service's: pid {server.pid} "
                  f"({comm}, no unit) listens on it")
    finally:
        await source.close()


async def test_the_shell_fallback_refuses_a_containers_port_another_process_holds(
        squatter) -> None:  # type: ignore[no-untyped-def]
    from gpudash.protocol.source import ContainerOwner

    server, port = squatter
    cid = "3f4e1b2c" * 8
    source = LocalSource(python=None)
    try:
        refused = await source.control.probe_http(  # type: ignore[attr-defined]
            f"http://127.0.0.1:{port}/health", 3, ContainerOwner(cid, "docker"))
        assert (refused.status, refused.error) == (
            None, f"port {port} is not container {cid[:12]}'s: pid {server.pid} "
                  f"({_comm(server.pid)}, no unit) listens on it")
    finally:
        await source.close()
