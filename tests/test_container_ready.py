"""A container's start is proven by its ready URL too (issue 19, item 6): the host port it
publishes is read from real-shaped ``docker``/``podman inspect`` JSON, carried on the wire,
and an answer on it counts only from the container's own listener (its cgroup, or its
runtime's port forwarder). The owner rule is a pure function of what the host says of the
listening pid (comm, cgroup text): a docker-proxy or a container cgroup cannot be made
here, so it is tested on the texts the kernel writes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_containers import CID, CID2, inspect_json

from gpudash.collector.host.containers import parse_inspect
from gpudash.collector.host.protocol import K_READY, OP_HTTP, PROTOCOL
from gpudash.collector.host.ready import container_listener_refusal, listening_inodes
from gpudash.protocol.wire import SnapshotDecoder

# `docker inspect` of `docker run -p 127.0.0.1:8001:8000 -p 9400:9400/udp ...` (Docker 27)
DOCKER_PORTS = {
    "HostConfig": {"PortBindings": {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "8001"}]}},
    "NetworkSettings": {"Ports": {
        "8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "8001"}],
        "9400/udp": [{"HostIp": "0.0.0.0", "HostPort": "9400"}],
        "8080/tcp": None,  # exposed, not published
    }},
}


def inspected(item: dict[str, Any], runtime: str = "docker") -> dict[str, Any]:
    (c,) = parse_inspect(json.dumps([item]), runtime)
    return c


def test_the_published_tcp_port_is_read_from_docker_inspect() -> None:
    item = {**inspect_json(CID, "vllm-embed", "always", 0), **DOCKER_PORTS}
    item["HostConfig"] = {**item["HostConfig"], **DOCKER_PORTS["HostConfig"]}
    assert inspected(item)["port"] == 8001


def test_a_stopped_container_keeps_the_port_it_asked_for() -> None:
    # stopped: NetworkSettings.Ports is {} and PortBindings says what it will bind
    item = inspect_json(CID, "vllm-embed", "always", 0, status="exited")
    item["HostConfig"]["PortBindings"] = {"8000/tcp": [{"HostIp": "", "HostPort": "8001"}]}
    item["NetworkSettings"] = {"Ports": {}}
    assert inspected(item)["port"] == 8001


def test_podman_inspect_and_the_lowest_container_port_wins() -> None:
    # `podman inspect` of `podman run -p 8002:8000 -p 8003:9000 ...` (podman 4.9)
    item = inspect_json(CID2, "vllm-rerank", "no", 0)
    item["NetworkSettings"] = {"Ports": {
        "9000/tcp": [{"HostIp": "", "HostPort": "8003"}],
        "8000/tcp": [{"HostIp": "", "HostPort": "8002"}]}}
    assert inspected(item, "podman")["port"] == 8002


@pytest.mark.parametrize("ports", [
    None, [], "8000/tcp", {"8000/tcp": "8001"}, {"8000/tcp": [{"HostPort": "0"}]},
    {"8000/tcp": [{"HostPort": "70000"}]}, {"8000/tcp": [{"HostPort": "80; reboot"}]},
    {"8000/tcp": [{"HostPort": 8001}]}, {"x/tcp": [{"HostPort": "8001"}]},
    {"8000/udp": [{"HostPort": "8001"}]},
])
def test_ports_the_runtime_did_not_say_are_none(ports: object) -> None:
    item = inspect_json(CID, "vllm-embed", "always", 0)
    item["NetworkSettings"] = {"Ports": ports}
    assert "port" not in inspected(item)


def test_a_huge_port_map_is_looked_at_only_so_far() -> None:
    item = inspect_json(CID, "vllm-embed", "always", 0)
    many = {f"{p}/tcp": [{"HostPort": "1"}] * 200 for p in range(20_000, 20_200)}
    many["1/tcp"] = [{"HostPort": "2"}]  # past the cap: never seen
    item["NetworkSettings"] = {"Ports": many}
    assert inspected(item)["port"] == 1


def test_the_wire_carries_the_port_and_bounds_it() -> None:
    def decoded(port: object) -> object:
        wire = {"v": PROTOCOL, "host": "h", "taken_at": 1.7e9, "source": "nvml",
                "can_act": True, "gpus": {}, "procs": {}, "units": {},
                "owners": {"container": {f"docker/{CID}": {"port": port}}}}
        snap = SnapshotDecoder("h").feed(json.dumps({"k": "full", "s": wire}).encode())
        c = snap.container(CID)
        assert c is not None
        return c.port

    assert decoded(8001) == 8001
    assert decoded(70000) in (None, 65535)  # out of bound: never a port to ask


SCOPE = f"0::/system.slice/docker-{CID}.scope\n"
DAEMON = "0::/system.slice/docker.service\n"
NOBODY = "0::/user.slice/user-65534.slice/session-7.scope\n"


def test_the_containers_own_process_and_docker_proxy_are_its_listener() -> None:
    assert container_listener_refusal(8001, CID, "docker", 4242, "python3\n", SCOPE) is None
    assert container_listener_refusal(8001, CID, "docker", 4243, "docker-proxy\n",
                                      DAEMON) is None


def test_a_squatter_is_refused_with_pid_comm_and_owner() -> None:
    refused = container_listener_refusal(8001, CID, "docker", 4242, "python3\n", NOBODY)
    assert refused == (f"port 8001 is not container {CID[:12]}'s: pid 4242 (python3, "
                       "session-7.scope) listens on it")
    # a docker-proxy outside the daemon's cgroup is anyone's program of that name
    fake = container_listener_refusal(8001, CID, "docker", 9, "docker-proxy\n", NOBODY)
    assert fake is not None and "session-7.scope" in fake
    # another container's process is not this one's
    other = f"0::/system.slice/docker-{CID2}.scope\n"
    assert container_listener_refusal(8001, CID, "docker", 9, "python3", other) == (
        f"port 8001 is not container {CID[:12]}'s: pid 9 (python3, container "
        f"{CID2[:12]}) listens on it")
    assert container_listener_refusal(8001, CID, "docker", 9, "x", "0::/\n") == (
        f"port 8001 is not container {CID[:12]}'s: pid 9 (x, no unit) listens on it")


def test_podmans_forwarders_of_this_container_or_its_rootless_user() -> None:
    conmon = f"0::/machine.slice/libpod-conmon-{CID}.scope\n"
    assert container_listener_refusal(8002, CID, "podman", 7, "conmon", conmon) is None
    rootless = ("0::/user.slice/user-1000.slice/user@1000.service/user.slice/"
                "podman-3012.scope\n")
    for comm in ("rootlessport", "pasta", "slirp4netns"):
        assert container_listener_refusal(8002, CID, "podman", 7, comm, rootless,
                                          user_uid=1000) is None
        assert container_listener_refusal(8002, CID, "podman", 7, comm, rootless,
                                          user_uid=1001) is not None  # another user's
    # another container's conmon, a docker-proxy for podman: not its listener
    assert container_listener_refusal(
        8002, CID, "podman", 7, "conmon", f"0::/machine.slice/libpod-conmon-{CID2}.scope"
    ) is not None
    assert container_listener_refusal(8002, CID, "podman", 7, "docker-proxy", DAEMON) \
        is not None


def test_the_collector_refuses_a_containers_port_another_process_listens_on(
        tmp_path) -> None:  # type: ignore[no-untyped-def]
    # a real server (not the container's) on the port, the real collector asked for it
    import socket
    import subprocess
    import sys
    import time

    from collector_run import read_line, request, start, stop

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                               str(port)], cwd=tmp_path, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    proc = start("serve", interval=None)
    try:
        deadline = time.monotonic() + 10
        while not listening_inodes(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert json.loads(read_line(proc))["k"] == K_READY
        url = f"http://127.0.0.1:{port}/"
        request(proc, OP_HTTP, id=1, url=url, timeout=3, container=CID,
                runtime="docker")
        request(proc, OP_HTTP, id=2, url=url, timeout=3, container="x; reboot",
                runtime="docker")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            closed = s.getsockname()[1]
        # nobody listens in this namespace (a DNAT into the container's own): the GET decides
        request(proc, OP_HTTP, id=3, url=f"http://127.0.0.1:{closed}/health",
                timeout=3, container=CID, runtime="docker")
        replies = {}
        while len(replies) < 3:
            reply = json.loads(read_line(proc, timeout=15))
            replies[reply["id"]] = reply
        assert replies[3]["status"] is None and "is not container" not in replies[3]["error"]
        comm = open(f"/proc/{server.pid}/comm").read().strip()
        assert (replies[1]["status"], replies[1]["error"]) == (
            None, f"port {port} is not container {CID[:12]}'s: pid {server.pid} ({comm}, "
                  "no unit) listens on it"), replies
        assert replies[2]["status"] is None and "not a container" in replies[2]["error"]
    finally:
        stop(proc)
        server.kill()
        server.wait()


def test_snapshot_json_of_the_demo_says_the_port_its_ready_url_uses() -> None:
    from test_cli import gpudash

    r = gpudash("snapshot", "--demo", "--json")
    assert r.returncode == 0, r.stderr
    (host,) = json.loads(r.stdout)["hosts"]
    (embed,) = [c for c in host["containers"] if c["name"] == "vllm-embed"]
    assert embed["port"] == 8100


def test_only_a_server_that_answers_health_is_held_to_it() -> None:
    # a notebook's container publishing 8888 has no /health: its start stays proven by
    # running and memory, not failed on a 404
    from gpudash.domain.model import Container
    from gpudash.engine.container_plans import container_ready_url

    def c(image: str, port: int | None = 8000) -> Container:
        return Container("a" * 64, "docker", "x", image, "exited", port=port)

    assert container_ready_url(c("vllm/vllm-openai:v0.11.0"), None) == (
        "http://127.0.0.1:8000/health")
    assert container_ready_url(c("lmsysorg/sglang:latest"), None) is not None
    assert container_ready_url(c("ghcr.io/huggingface/text-generation-inference:3"), None)
    assert container_ready_url(c("jupyter/pytorch-notebook", 8888), None) is None
    assert container_ready_url(c("vllm/vllm-openai", None), None) is None  # no port
    given = "http://127.0.0.1:8888/api"
    assert container_ready_url(c("jupyter/pytorch-notebook", 8888), given) == given


def test_a_users_cgroup_named_after_the_container_is_not_its_listener() -> None:
    # systemd delegates user@UID.service to the user, who may name a cgroup there
    # docker-<id>.scope (or libpod-conmon-<id>.scope) and race the container's port
    forged = (f"0::/user.slice/user-1000.slice/user@1000.service/app.slice/"
              f"docker-{CID}.scope\n")
    assert container_listener_refusal(8001, CID, "docker", 7, "python3", forged) is not None
    conmon = (f"0::/user.slice/user-1000.slice/user@1000.service/app.slice/"
              f"libpod-conmon-{CID}.scope\n")
    assert container_listener_refusal(8002, CID, "podman", 7, "conmon", conmon) is not None
    # a rootless container of that very user is in their subtree, and is its own
    rootless = (f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/"
                f"libpod-{CID}.scope\n")
    assert container_listener_refusal(8002, CID, "podman", 7, "python3", rootless,
                                      user_uid=1000) is None
    assert container_listener_refusal(8002, CID, "podman", 7, "python3", rootless,
                                      user_uid=1001) is not None
    # where the main process's cgroup is known, only that cgroup (or below it) counts
    same_uid = f"0::/user.slice/user-0.slice/user@0.service/docker-{CID}.scope\n"
    assert container_listener_refusal(8001, CID, "docker", 7, "python3", same_uid,
                                      user_uid=0, own_path=f"/system.slice/docker-{CID}.scope"
                                      ) is not None
    assert container_listener_refusal(8001, CID, "docker", 7, "python3", SCOPE, user_uid=0,
                                      own_path=f"/system.slice/docker-{CID}.scope") is None
