"""The container lint: a restart policy that brings a hung or crashing server back for ever
(always / unless-stopped with no health check), a PID 1 that does not reap (no --init),
and --pid host (escapees look like the host's); read from what docker inspect said, on
the unit panel and in ``snapshot --json``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_cli import gpudash
from test_containers import CID, inspect_json

from gpudash.collector.host.containers import parse_inspect
from gpudash.domain.lint import lint_container
from gpudash.domain.model import Container
from gpudash.protocol.wire import SnapshotDecoder

EMBED = "docker:vllm-embed"


def inspected(**extra: Any) -> dict[str, Any]:
    item = inspect_json(CID, "vllm", "always", 0)
    for path, value in extra.items():
        *keys, last = path.split("__")
        d = item
        for k in keys:
            d = d.setdefault(k, {})
        d[last] = value
    (c,) = parse_inspect(json.dumps([item]), "docker")
    return c


def test_the_collector_reads_health_init_and_pid_mode_from_docker_inspect() -> None:
    plain = inspected(HostConfig__Init=None, HostConfig__PidMode="")
    assert (plain["health"], plain["init"], plain["pid_mode"]) == ("none", "no", "private")
    checked = inspected(Config__Healthcheck={"Test": ["CMD", "curl", "-f", "x"]},
                        HostConfig__Init=True, HostConfig__PidMode="host")
    assert (checked["health"], checked["init"], checked["pid_mode"]) == (
        "configured", "yes", "host")
    running = inspected(State__Health={"Status": "unhealthy", "FailingStreak": 3})
    assert running["health"] == "unhealthy"
    disabled = inspected(Config__Healthcheck={"Test": ["NONE"]})
    assert disabled["health"] == "none"
    odd = inspected(HostConfig__PidMode="x" * 500, State__Health={"Status": 7})
    assert len(odd["pid_mode"]) <= 64 and odd["health"] == "none"


def test_the_three_findings_and_none_for_a_well_made_container() -> None:
    bad = Container(CID, "docker", "vllm", restart_policy="unless-stopped", health="none",
                    init="no", pid_mode="host")
    found = {f.setting: f for f in lint_container(bad)}
    assert set(found) == {"--restart unless-stopped without a health check", "no --init",
                          "--pid host"}
    assert "restarted for ever" in found[
        "--restart unless-stopped without a health check"].why
    assert "--health-cmd" in found["--restart unless-stopped without a health check"].why
    assert "zombies" in found["no --init"].why and "--init" in found["no --init"].why
    assert "host's own process" in found["--pid host"].why
    good = Container(CID, "docker", "vllm", restart_policy="always", health="healthy",
                     init="yes", pid_mode="private")
    assert lint_container(good) == ()
    on_failure = Container(CID, "docker", "vllm", restart_policy="on-failure", health="none")
    assert lint_container(on_failure) == ()  # gives up, and only on a failure
    unknown = Container(CID, "docker", "vllm", restart_policy="always")  # an older collector
    assert lint_container(unknown) == ()  # not said: no finding


def test_the_wire_bounds_the_new_fields_and_the_snapshot_carries_them() -> None:
    from gpudash.collector.host.protocol import PROTOCOL

    wire = {"v": PROTOCOL, "host": "h", "taken_at": 1.7e9, "source": "nvml",
            "can_act": True, "gpus": {}, "procs": {}, "units": {},
            "owners": {"container": {f"docker/{CID}": {
                "health": "none", "init": "no", "pid_mode": "host" + "x" * 100}}}}
    snap = SnapshotDecoder("h").feed(json.dumps({"k": "full", "s": wire}).encode())
    c = snap.container(CID)
    assert c is not None and c.health == "none" and c.init == "no"
    assert c.pid_mode is not None and len(c.pid_mode) <= 64 and c.pid_mode.startswith("host")


def test_snapshot_json_lists_the_demo_containers_findings() -> None:
    r = gpudash("snapshot", "--demo", "--json")
    assert r.returncode == 0, r.stderr
    (host,) = json.loads(r.stdout)["hosts"]
    embed = {o["key"]: o for o in host["owners"]}[EMBED]
    settings = [f["setting"] for f in embed["lint"]]
    assert settings == ["--restart always without a health check", "no --init"]
    assert all(f["why"] and f["fix"] == [] for f in embed["lint"])


@pytest.mark.parametrize("size", [(80, 24), (120, 35)], ids=["80x24", "120x35"])
async def test_the_unit_panel_of_a_container_row_shows_its_lint(size: tuple[int, int]) -> None:
    from test_ui import make_app, select

    from gpudash.demo.host import DemoHost
    from gpudash.domain.clock import SteppedClock
    from gpudash.ui.widgets.unit_panel import UnitPanel

    app = make_app(DemoHost(clock=SteppedClock(), containers=True))
    async with app.run_test(size=size) as pilot:
        await select(pilot, app, "u:" + EMBED)
        group = app.view.triage.group(EMBED) if app.view.triage else None
        assert group is not None and [f.setting for f in group.lint] == [
            "--restart always without a health check", "no --init"]
        panel = str(app.query_one(UnitPanel).render())  # what the panel holds, all of it
        assert "Configuration" in panel and "⚙ no --init: the server is PID 1" in panel
        assert "Health      none" in panel and "Init        no" in panel
