"""The ready proof on a real systemd host, over its real sshd (issue 29, item 1).

A loading model's port is closed for 30 s to 10 min; any user of the host could make a
start or a swap "serving" by answering on it at the right moment: a listener up 4 ms in
every 6 ms got 80 of 100 probes counted. Here the racer runs on the lab host as `nobody`
in a unit of its own, the unit's own server answers on its port, and gpudash asks both
through the real collector and through the shell fallback (bash), over SSH.
"""

from __future__ import annotations

import asyncio

import pytest
from lab.fixtures import HostSpec, labmod
from lab.probes import wait_host
from test_ready_proof import RACER

from gpudash.protocol.shell_listener import parse_listener, probe_argv, shell_listener_refusal
from gpudash.transport import open_source
from gpudash.transport.ssh import SshSource

pytestmark = pytest.mark.lab

MINIMAX = "vllm-minimax-m25.service"  # answers /health on its --port once loaded
RACER_PORT = 8100
HOST = HostSpec(units=labmod.SWAP_UNITS)


def health(host, port: int) -> str:  # type: ignore[no-untyped-def]
    cp = host.exec(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                    f"http://127.0.0.1:{port}/health"], check=False)
    return cp.stdout.strip()


@pytest.mark.parametrize("lab_host", [HOST], indirect=True)
def test_the_units_own_server_proves_it_and_a_racing_user_never_does(lab_host) -> None:  # type: ignore[no-untyped-def]
    h = lab_host
    port = h.port(8000)  # MiniMax's --port 8000, on this host (lab hosts share a network)
    wait_host(lambda: health(h, port) == "200", what="MiniMax answering /health",
              timeout=120)
    # the bash probe itself, on the host: the holder of its connection is MiniMax's
    found = parse_listener(h.exec(probe_argv(port, "/health", 5), check=False).stdout)
    assert found.status == 200, found
    assert shell_listener_refusal(port, MINIMAX, found) is None, found
    assert "vllm-minimax-m25.service" in found.cgroup
    h.exec(["systemd-run", "--unit", "racer", "--uid", "nobody", "python3", "-c", RACER,
            str(RACER_PORT)])
    wait_host(lambda: "200" in {health(h, RACER_PORT) for _ in range(5)},
              what="the racer answering")

    async def ask() -> dict[str, tuple[int | None, list[str]]]:
        python = open_source(h.alias, interval=0.5, ssh_config=h.ssh_config_path,
                             known_hosts=h.known_hosts_path)
        shell = SshSource(h.alias, ssh_config=h.ssh_config_path,
                          known_hosts=h.known_hosts_path, python="/nonexistent/python3")
        out = {}
        try:
            for name, source in (("python", python), ("shell", shell)):
                own = await source.control.probe_http(f"http://127.0.0.1:{port}/health", 5,
                                                      MINIMAX)
                raced = [await source.control.probe_http(
                    f"http://127.0.0.1:{RACER_PORT}/health", 1, MINIMAX) for _ in range(60)]
                out[name] = (own.status, [f"{a.status} {a.error}" for a in raced])
        finally:
            await python.close()
            await shell.close()
        return out

    said = asyncio.run(ask())
    for name, (own, raced) in said.items():
        assert own == 200, (name, own)
        counted = [r for r in raced if r.startswith("200")]
        assert counted == [], f"{name}: {len(counted)} of 60 probes counted as MiniMax's 200"
        # the racer was reached, and named when it was seen
        assert any(f"port {RACER_PORT} is not {MINIMAX}'s" in r or f"port {RACER_PORT}: " in r
                   for r in raced), (name, sorted(set(raced))[:10])
