"""The fleet through Prometheus, without a server: the ``[prometheus]`` settings, the SSH
name template, and the rows made from answers a real Prometheus gave
(tests/data/fleetprom/answers.json, recorded from tests/test_prometheus_fleet.py's fleet:
the exporter over 5 demo hosts, dcgm-exporter hosts in both label spellings)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from gpudash.cli.args import parse
from gpudash.cli.promfleet import fleet_lines
from gpudash.domain.untrusted import json_dumps
from gpudash.fleetprom.client import PromError, parse_vector
from gpudash.fleetprom.fleet import fleet_json
from gpudash.fleetprom.rows import GONE_KEPT_S, MIB, PromFleet, carried, fleet_of
from gpudash.fleetprom.sshname import SshNameError, SshNameTemplate, strip_port
from gpudash.state.config import load
from gpudash.state.promconfig import DEFAULT_SSH_NAME, PromSettingsError, parse_table

ANSWERS = json.loads((Path(__file__).parent / "data" / "fleetprom" / "answers.json")
                     .read_text())


def recorded(**edit: list[dict[str, object]]) -> PromFleet:
    """The recorded answers as rows; ``edit``: series to add to a query's answer."""
    answers = {}
    for name in ("gpudash", "dcgm", "fleet"):
        doc = json.loads(json.dumps(ANSWERS[name]))
        doc["data"]["result"] += edit.get(name, [])
        answers[name] = parse_vector(json.dumps(doc).encode())
    return fleet_of(answers)


def test_recorded_answers_make_one_row_per_host() -> None:
    fleet = recorded()
    by = {h.name: h for h in fleet.hosts}
    assert list(by) == sorted(by) == ["demo-gpu01", "demo-gpu02", "demo-gpu03",
                                      "demo-gpu04", "demo-gpu05", "dgx-new", "dgx-old",
                                      "dgx-plain"]
    one = by["demo-gpu01"]
    assert (one.gpus, one.gpus_held, one.orphans, one.link_up) == (8, 8, 8, True)
    assert one.orphaned_bytes and one.reclaimable_bytes and one.crash_looping == ()
    assert by["demo-gpu05"].crash_looping == ("vllm-deepseek-v3.service",)
    assert by["demo-gpu03"].link_up is False and by["demo-gpu03"].gpus is None
    assert by["demo-gpu03"].crash_looping is None  # not read: not known, not "none"
    old, new = by["dgx-old"], by["dgx-new"]
    assert old.label("Hostname") == "dgx-old" and new.label("hostname") == "dgx-new"
    assert old.used_bytes == (40000 + 30 + 20000) * MIB and old.gpus_held == 2
    assert old.unowned_bytes == 20000 * MIB and new.unowned_bytes == 1000 * MIB
    assert by["dgx-plain"].unowned_bytes is None and old.orphans is None
    assert by["demo-gpu02"].sources == ("gpudash", "dcgm")
    states = {h.name: h.states(fleet.at) for h in fleet.hosts}
    assert {"orphans", "reclaim"} <= states["demo-gpu01"]
    assert states["demo-gpu03"] == {"down"} and states["demo-gpu05"] == {"crashloop"}
    assert states["dgx-old"] == frozenset()


def test_firing_alerts_and_old_scrapes_are_filter_states() -> None:
    at = recorded().at
    fleet = recorded(fleet=[
        {"metric": {"stat": "alert", "host": "demo-gpu04", "alertname": "GPUMemoryOrphaned"},
         "value": [at, "2"]},
        {"metric": {"stat": "alert", "host": "nobody", "alertname": "GPUMemoryOrphaned"},
         "value": [at, "1"]}])
    by = {h.name: h for h in fleet.hosts}
    assert by["demo-gpu04"].alerts == ("GPUMemoryOrphaned", "GPUMemoryOrphaned")
    assert "alerting" in by["demo-gpu04"].states(fleet.at)
    assert "nobody" not in by  # an alert names no host of its own
    assert "stale" in by["dgx-old"].states(fleet.at + 3600)


def test_a_down_target_of_a_known_job_gets_a_row_and_one_of_another_job_none() -> None:
    at = recorded().at
    fleet = recorded(fleet=[
        {"metric": {"stat": "target_down", "instance": "gpu09:9400", "job": "dcgm"},
         "value": [at, "0"]},
        {"metric": {"stat": "target_down", "instance": "web:9100", "job": "node"},
         "value": [at, "0"]}])
    by = {h.name: h for h in fleet.hosts}
    assert by["gpu09"].target_down and by["gpu09"].sources == ()
    assert {"down", "stale"} <= by["gpu09"].states(fleet.at)
    assert "web" not in by


def test_hosts_that_vanish_are_kept_stale_for_a_while_then_dropped() -> None:
    first = recorded()
    empty = replace(first, hosts=(), at=first.at + 5)
    later = carried(first, empty)
    assert [h.name for h in later.hosts] == [h.name for h in first.hosts]
    assert all("stale" in h.states(later.at) for h in later.hosts)
    assert all(h.gone_since == first.at + 5 for h in later.hosts)
    again = carried(later, replace(empty, at=first.at + 5 + GONE_KEPT_S + 1))
    assert again.hosts == ()


def test_label_text_is_shown_literally_everywhere() -> None:
    at = recorded().at
    evil = "[bold red]gpu\x1b[2J\u202e01"
    fleet = recorded(gpudash=[{"metric": {"stat": "gpus", "host": evil, "instance": "x:1",
                                          "job": "gpudash"}, "value": [at, "8"]}])
    [row] = [h for h in fleet.hosts if h.name == evil]  # kept as it is in the model
    text = "\n".join(fleet_lines(fleet))
    assert "\x1b" not in text and "\u202e" not in text and "\\x1b[2J" in text
    doc = json_dumps(fleet_json(fleet, "http://127.0.0.1:9090", SshNameTemplate("{host}")))
    assert "\\u001b" in doc and "\u202e" not in doc
    assert json.loads(doc)["hosts"][0]["host"] == evil  # JSON says exactly what it was
    [said] = [h for h in json.loads(doc)["hosts"] if h["host"] == evil]
    assert said["ssh_name"] is None and "not a host name" in said["ssh_name_error"]
    assert row.gpus == 8


@pytest.mark.parametrize(("instance", "host"), [
    ("gpu01:9835", "gpu01"), ("gpu01", "gpu01"), ("[::1]:9100", "::1"), ("::1", "::1"),
    ("node-7.example:9400", "node-7.example")])
def test_strip_port(instance: str, host: str) -> None:
    assert strip_port(instance) == host


def test_the_ssh_name_template() -> None:
    default = SshNameTemplate(DEFAULT_SSH_NAME)
    assert default.name({"instance": "gpu01.example:9835"}) == "gpu01.example"
    assert SshNameTemplate("root@{host}").name({"host": "gpu02"}) == "root@gpu02"
    assert SshNameTemplate("{hostname}.ib").name({"hostname": "gpu03"}) == "gpu03.ib"
    for labels in ({}, {"instance": "-oProxyCommand=sh:1"}, {"instance": "a b:1"},
                   {"instance": "gpu;rm -rf /:1"}):
        with pytest.raises(SshNameError):
            default.name(labels)
    for bad in ("gpu01", "{instance", "{instance|port}", "{0.__class__}"):
        with pytest.raises(ValueError):
            SshNameTemplate(bad)


def test_the_prometheus_table_as_prometheus_names_its_keys(tmp_path: Path) -> None:
    s = parse_table({"url": "https://prom.example:9090/", "timeout": 5,
                     "authorization": {"type": "Bearer", "credentials_file": "~/t"},
                     "tls_config": {"ca_file": "/ca", "cert_file": "/c", "key_file": "/k"},
                     "ssh_name": "{host}"})
    assert s.url == "https://prom.example:9090" and s.timeout == 5.0
    assert s.bearer_token_file == Path("~/t").expanduser() and s.ca_file == Path("/ca")
    assert s.ssh_name == "{host}" and not s.insecure_skip_verify
    basic = parse_table({"basic_auth": {"username": "ops", "password_file": "/p"}})
    assert basic.basic_auth_username == "ops" and basic.url is None
    for table, says in [
        ({"basic_auth": {"username": "ops", "password": "x"}}, "use password_file"),
        ({"bearer_token": "x"}, "use bearer_token_file"),
        ({"tls_config": {"server_name": "x"}}, "server_name: not a key gpudash honours"),
        ({"tls_config": {"cert_file": "/c"}}, "go together"),
        ({"tls_config": {"insecure_skip_verify": "yes"}}, "true or false"),
        ({"url": "ftp://x"}, "not an http(s) URL"),
        ({"url": "https://u:p@x"}, "credentials in the URL"),
        ({"timeout": 0}, "timeout"),
        ({"ssh_name": "gpu01"}, "template"),
        ({"proxy_url": "http://x"}, "proxy_url"),
    ]:
        with pytest.raises(PromSettingsError, match=says.replace("(", r"\(").replace(
                ")", r"\)")):
            parse_table(table)
    path = tmp_path / "config.toml"
    path.write_text('[prometheus]\nurl = "http://127.0.0.1:9090"\n')
    assert load(path)[0].prometheus.url == "http://127.0.0.1:9090"
    path.write_text('[prometheus]\nurl = "http://127.0.0.1:9090"\nbearer_token = "x"\n')
    settings, [problem] = load(path)
    assert problem.key == "prometheus" and "bearer_token_file" in str(problem)


def test_prometheus_arguments_are_checked_before_anything_is_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    _command, args = parse(["--prometheus", "http://127.0.0.1:9090"])
    assert args.prom.url == "http://127.0.0.1:9090"
    for argv, says in [(["snapshot", "--prometheus"], "no URL given"),
                       (["--prometheus", "gpu01"], "not an http(s) URL"),
                       (["--prometheus", "http://127.0.0.1:1", "gpu01"], "takes no HOST"),
                       (["--prometheus", "http://127.0.0.1:1", "--demo"], "takes no HOST")]:
        with pytest.raises(SystemExit) as exited:
            parse(argv)
        assert exited.value.code == 2 and says in capsys.readouterr().err
    (tmp_path / "gpudash").mkdir()
    (tmp_path / "gpudash" / "config.toml").write_text(
        '[prometheus]\nurl = "http://127.0.0.1:9090"\n[prometheus.basic_auth]\n'
        'username = "a:b"\n')
    with pytest.raises(SystemExit) as exited:  # half a table is not used
        parse(["snapshot", "--prometheus"])
    assert exited.value.code == 2 and "basic_auth.username" in capsys.readouterr().err
    assert parse(["snapshot"])[1].prom is None  # the table is read only where it is used


def test_a_bad_answer_is_a_typed_error() -> None:
    for body, kind in [(b"\xff", "bad answer"), (b"[]", "bad answer"),
                       (b'{"status":"error","error":"x"}', "query"),
                       (b'{"status":"success","data":{"resultType":"vector","result":'
                        b'[{"metric":{"a":1},"value":[1,"2"]}]}}', "bad answer")]:
        with pytest.raises(PromError) as caught:
            parse_vector(body)
        assert caught.value.kind == kind


def test_ssh_name_on_the_command_line_over_the_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # issue 32: the SSH name template was only in config.toml
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "gpudash").mkdir()
    (tmp_path / "gpudash" / "config.toml").write_text(
        '[prometheus]\nurl = "http://127.0.0.1:9090"\nssh_name = "admin@{instance|noport}"\n')
    assert parse(["--prometheus"])[1].prom.ssh_name == "admin@{instance|noport}"
    for argv in (["--prometheus", "--ssh-name", "root@{hostname}"],
                 ["snapshot", "--prometheus", "--ssh-name", "root@{hostname}"]):
        assert parse(argv)[1].prom.ssh_name == "root@{hostname}"
    for argv, says in [(["--prometheus", "--ssh-name", "root@{host"], "--ssh-name:"),
                       (["--ssh-name", "{instance}", "gpu01"], "give --prometheus too")]:
        with pytest.raises(SystemExit) as exited:
            parse(argv)
        assert exited.value.code == 2 and says in capsys.readouterr().err


def test_the_collector_paused_for_a_parse_is_left_as_it_was() -> None:
    """An answer is parsed with the cyclic collector paused (tens of thousands of dicts
    at 5,000 hosts): after it, good or bad, the collector runs again; one paused by
    someone else (Textual pauses it while it scrolls) stays paused."""
    import gc

    good = (b'{"status":"success","data":{"resultType":"vector","result":'
            b'[{"metric":{"host":"a"},"value":[1,"2"]}]}}')
    assert gc.isenabled()
    assert parse_vector(good)[0].labels == {"host": "a"}
    assert gc.isenabled()
    with pytest.raises(PromError):
        parse_vector(b"\xff")
    assert gc.isenabled()
    gc.disable()
    try:
        parse_vector(good)
        assert not gc.isenabled()
    finally:
        gc.enable()
