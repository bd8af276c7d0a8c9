"""The unit lint (issue 21, item 1): what in a model server's unit sets the seed's trap, read
from what systemctl show reports, and the collector's reading of those properties.

Seen before: the unit panel explained KillMode=process and Restart=always only as what an
action would do now; a crash loop that systemd's start limit can never stop (RestartSec 30 s,
5 starts in 10 s), a stop timeout shorter than a model's shutdown, and a `sh -c` without exec
were not said anywhere, and the collector did not read those properties at all.
"""

from __future__ import annotations

import json

import pytest

from gpudash.collector.host.parsing import parse_systemctl_show, parse_timespan
from gpudash.collector.host.protocol import EXEC_MAX, PROTOCOL, TRUNCATED, UNIT_PROPERTIES
from gpudash.domain.lint import Learned, lint_unit
from gpudash.domain.model import Unit
from gpudash.protocol.wire import SnapshotDecoder

VLLM = "/opt/v/bin/python3 -m vllm.entrypoints.openai.api_server --model /m --port 8000"
SHOW = """Id=vllm-tiny.service
ActiveState=active
SubState=running
UnitFileState=enabled
Restart=always
KillMode=process
NRestarts=0
MainPID=3700
ControlGroup=/system.slice/vllm-tiny.service
Description=vLLM tiny
TimeoutStopUSec=1min 30s
RestartUSec=2s
StartLimitIntervalUSec=10s
StartLimitBurst=5
ExecStart={ path=/opt/v/bin/python3 ; argv[]=ARGV ; ignore_errors=no ; start_time=[n/a] ; \
stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }
""".replace("ARGV", VLLM)


@pytest.mark.parametrize(("text", "seconds"), [
    ("1min 30s", 90.0), ("100ms", 0.1), ("2s", 2.0), ("0", 0.0), ("1h 2min 3s", 3723.0),
    ("500us", 0.0005), ("infinity", None), ("", None), ("soon", None), ("5 parsecs", None),
])
def test_systemd_time_spans(text: str, seconds: float | None) -> None:
    assert parse_timespan(text) == (pytest.approx(seconds) if seconds else seconds)


def test_the_collector_reads_how_a_unit_stops_and_restarts() -> None:
    [u] = parse_systemctl_show(SHOW)
    assert u["timeout_stop_s"] == 90.0 and u["restart_s"] == 2.0
    assert u["start_limit_interval_s"] == 10.0 and u["start_limit_burst"] == 5
    assert u["exec_start"] == VLLM
    # and the decoder takes them into the model
    wire = {"v": PROTOCOL, "host": "h", "taken_at": 1.7e9, "source": "nvml",
            "can_act": True, "gpus": {}, "procs": {}, "units": {u["name"]: u}}
    unit = SnapshotDecoder("h").feed(json.dumps({"k": "full", "s": wire}).encode()).units[0]
    assert (unit.timeout_stop_s, unit.start_limit_burst, unit.exec_start) == (90.0, 5, VLLM)


def test_an_exec_start_longer_than_its_bound_is_cut_with_its_mark() -> None:
    [u] = parse_systemctl_show(SHOW.replace(VLLM, VLLM + " --x" * 2000))
    assert len(u["exec_start"]) <= EXEC_MAX
    assert u["exec_start"].endswith(TRUNCATED)


def unit(**kw: object) -> Unit:
    base = dict(name="vllm-tiny.service", active_state="active", restart="always",
                kill_mode="process", timeout_stop_s=90.0, restart_s=2.0,
                start_limit_interval_s=10.0, start_limit_burst=5, exec_start=VLLM)
    base.update(kw)
    return Unit(**base)  # type: ignore[arg-type]


def settings(u: Unit, **kw: bool) -> list[str]:
    return [f.setting for f in lint_unit(u, **kw)]


def test_the_seeds_unit_is_linted_with_the_fix_for_each_finding() -> None:
    findings = {f.setting: f for f in lint_unit(unit())}
    assert set(findings) == {"KillMode=process", "Restart=always"}
    assert findings["KillMode=process"].fix == (("Service", "KillMode", "mixed"),)
    # 5 starts 2 s apart never fall within 10 s: a crash loop for ever
    why = findings["Restart=always"].why
    assert "StartLimitBurst=5 in StartLimitIntervalSec=10s is never reached" in why, why
    assert ("Unit", "StartLimitBurst", "5") in findings["Restart=always"].fix


def test_a_well_set_unit_has_no_findings() -> None:
    good = unit(kill_mode="mixed", restart="always", restart_s=10.0,
                start_limit_interval_s=600.0, start_limit_burst=5)
    assert lint_unit(good) == ()
    # systemd's defaults (100 ms apart, 5 in 10 s) stop a crash loop, but restart too fast
    assert settings(unit(kill_mode="control-group", restart_s=0.1)) == ["RestartSec=0.1s"]


@pytest.mark.parametrize(("kw", "expected"), [
    ({"start_limit_interval_s": 0.0}, "Restart=always"),
    ({"kill_mode": "none"}, "KillMode=none"),
    ({"timeout_stop_s": 5.0}, "TimeoutStopSec=5s"),
    ({"exec_start": "/bin/sh -c " + VLLM}, "ExecStart=/bin/sh -c " + VLLM[:60]),
])
def test_each_trap(kw: dict[str, object], expected: str) -> None:
    found = settings(unit(**{"kill_mode": "mixed", "restart_s": 10.0,
                             "start_limit_interval_s": 600.0, **kw}))
    assert any(s.startswith(expected) for s in found), found


def test_a_shell_that_execs_the_server_is_fine_and_other_units_are_not_linted() -> None:
    ok = unit(kill_mode="mixed", restart_s=10.0, start_limit_interval_s=600.0,
              exec_start="/bin/sh -c 'exec " + VLLM + "'")
    assert lint_unit(ok) == ()
    cron = unit(exec_start="/usr/sbin/cron -f")  # KillMode=process: not ours to judge
    assert lint_unit(cron) == ()
    assert "KillMode=process" in settings(cron, holds_gpu_memory=True)  # unless it holds GPUs


def test_the_unit_panel_and_the_json_say_the_findings() -> None:
    from test_orphans import server, snap
    from test_ui_holder_reasons import PAL

    from gpudash.domain.triage import triage
    from gpudash.render.jsondoc import host_to_json
    from gpudash.ui.widgets.unit_panel import unit_text

    s = snap(server(3700, 1000), units=(unit(main_pid=3700),))
    t = triage(s)
    group = t.group("vllm-tiny.service")
    assert group is not None
    panel = unit_text(group, None, PAL).plain
    assert "Configuration\n⚙ KillMode=process: systemctl stop" in panel, panel
    assert "⚙ Restart=always: StartLimitBurst=5" in panel, panel
    [owner] = [o for o in host_to_json(s)["owners"] if o["key"] == "vllm-tiny.service"]
    assert [f["setting"] for f in owner["lint"]] == ["KillMode=process", "Restart=always"]
    assert owner["lint"][0]["fix"] == ["[Service] KillMode=mixed"]


def test_a_timeout_stop_shorter_than_the_learned_stop_is_found_with_its_fix() -> None:
    from gpudash.domain.lint import needed_timeout_stop

    well = {"kill_mode": "mixed", "restart_s": 10.0, "start_limit_interval_s": 600.0}
    assert lint_unit(unit(**well), learned=Learned(40.0)) == ()  # 90 s covers 40 s + margin
    [f] = lint_unit(unit(**well), learned=Learned(70.0))  # 70 s: 110 s with the margin
    assert f.setting == "TimeoutStopSec=90s" and "took 70s" in f.why and "110s" in f.why
    assert f.fix == (("Service", "TimeoutStopSec", "120s"),)  # at least gpudash's own
    [f] = lint_unit(unit(**well), learned=Learned(200.0))
    assert f.fix == (("Service", "TimeoutStopSec", "300s"),)
    assert needed_timeout_stop(2.0) == 20 and needed_timeout_stop(100.0) == 150
    [short] = lint_unit(unit(**well, timeout_stop_s=25.0), learned=Learned(2.0))
    assert "under 30s" in short.why  # the general rule still holds for a quick stop
    assert lint_unit(unit(**well, timeout_stop_s=None), learned=Learned(500.0)) == ()


def test_the_learned_stop_reaches_the_lint_through_triage_and_retriage() -> None:
    from dataclasses import replace

    from test_orphans import server, snap

    from gpudash.domain.triage import retriage, triage
    from gpudash.render.jsondoc import host_to_json

    s = snap(server(3700, 1000), units=(unit(main_pid=3700, kill_mode="mixed",
                                             restart="no"),))
    assert triage(s).group("vllm-tiny.service").lint == ()  # type: ignore[union-attr]
    learned = {"vllm-tiny.service": Learned(100.0)}
    t = triage(s, learned=learned)
    [f] = t.group("vllm-tiny.service").lint  # type: ignore[union-attr]
    assert f.setting == "TimeoutStopSec=90s"
    again = replace(s, taken_at=s.taken_at + 1)
    # nothing changed but what was learned: the lint is done again, not reused
    assert retriage(again, s, triage(s)).group("vllm-tiny.service").lint == ()  # type: ignore[union-attr]
    assert retriage(again, s, triage(s), learned=learned).group(  # type: ignore[union-attr]
        "vllm-tiny.service").lint == (f,)
    [owner] = [o for o in host_to_json(s, learned)["owners"] if o["key"] == "vllm-tiny.service"]
    assert owner["lint"][0]["fix"] == ["[Service] TimeoutStopSec=150s"]


def test_a_reclaim_on_the_demo_learns_the_stop_and_the_snapshot_lints_against_it() -> None:
    from test_cli import audit_records, gpudash, state

    r = gpudash("reclaim", "--demo", "--unit", "vllm-minimax-m25", "--yes", "--json")
    assert r.returncode == 0, r.stderr
    stop_s = json.loads(r.stdout)["stop_s"]
    assert 0 < stop_s < 90  # systemctl stop until the last GPU's memory was back
    assert audit_records()[-1]["stop_s"] == stop_s
    store = json.loads((state() / "footprints-demo.json").read_text())
    [entry] = [u for h in store.values() for name, u in h.items()
               if name == "vllm-minimax-m25.service"]
    assert entry["stop_s"] == stop_s

    def lint_of(unit_name: str) -> list[dict[str, object]]:
        doc = json.loads(gpudash("snapshot", "--demo", "--json").stdout)
        return [f for o in doc["hosts"][0]["owners"] if o["key"] == unit_name
                for f in o["lint"]]

    assert not any(str(f["setting"]).startswith("TimeoutStopSec")
                   for f in lint_of("vllm-minimax-m25.service"))  # 90 s covers it
    for h in store.values():  # as if its stop had taken 200 s on that host
        h["vllm-minimax-m25.service"]["stop_s"] = 200.0
    (state() / "footprints-demo.json").write_text(json.dumps(store))
    [f] = [f for f in lint_of("vllm-minimax-m25.service")
           if str(f["setting"]).startswith("TimeoutStopSec")]
    assert f["setting"] == "TimeoutStopSec=90s" and "took 200s" in str(f["why"])
    assert f["fix"] == ["[Service] TimeoutStopSec=300s"]


def test_the_collector_reads_send_sigkill_and_no_is_a_finding_with_its_fix() -> None:
    [u] = parse_systemctl_show(SHOW + "SendSIGKILL=no\n")
    assert u["send_sigkill"] == "no"
    wire = {"v": PROTOCOL, "host": "h", "taken_at": 1.7e9, "source": "nvml",
            "can_act": True, "gpus": {}, "procs": {}, "units": {u["name"]: u}}
    decoded = SnapshotDecoder("h").feed(json.dumps({"k": "full", "s": wire}).encode()).units[0]
    assert decoded.send_sigkill == "no"
    well = {"kill_mode": "mixed", "restart_s": 10.0, "start_limit_interval_s": 600.0}
    assert lint_unit(unit(**well, send_sigkill="yes")) == ()
    [f] = lint_unit(unit(**well, send_sigkill="no"))
    assert f.setting == "SendSIGKILL=no" and "never SIGKILLed" in f.why
    assert f.fix == (("Service", "SendSIGKILL", "yes"),)
    assert "SendSIGKILL" in UNIT_PROPERTIES.split(",")


def test_workers_that_ignored_sigterm_are_a_finding_under_mixed_and_control_group() -> None:
    import time

    at = time.mktime((2026, 12, 2, 19, 40, 0, 0, 0, -1))
    seen = Learned(term_ignored_at=at, term_ignored=2)
    well = {"restart_s": 10.0, "start_limit_interval_s": 600.0}
    assert lint_unit(unit(**well, kill_mode="mixed")) == ()  # nothing seen: nothing said
    [f] = lint_unit(unit(**well, kill_mode="mixed"), learned=seen)
    assert f.setting == "KillMode=mixed, workers ignore SIGTERM"
    assert "2 of its processes ignored SIGTERM" in f.why and "2026-12-02 19:40" in f.why
    assert "only the server is sent SIGTERM" in f.why and "TimeoutStopSec (90s)" in f.why
    assert f.fix == ()  # the workers' own code: gpudash's drop-in cannot mend it
    [f] = lint_unit(unit(**well, kill_mode="control-group", timeout_stop_s=None),
                    learned=seen)
    assert "each is sent SIGTERM and ignores it" in f.why and "never ends" in f.why
    # KillMode=process is its own finding (the workers are not signalled at all)
    assert settings(unit(**well), learned=seen) == ["KillMode=process"]  # type: ignore[arg-type]
    # with SendSIGKILL=no they outlive the stop: that part has a fix
    both = lint_unit(unit(**well, kill_mode="mixed", send_sigkill="no"), learned=seen)
    assert [x.setting for x in both] == ["SendSIGKILL=no", "KillMode=mixed, workers ignore SIGTERM"]
    assert "some of this unit's did, here" in both[0].why


def test_a_reclaim_that_escalates_on_the_demo_is_learned_and_linted_after_the_fix() -> None:
    # The seed's TP5 ignores SIGTERM: the reclaim sends it SIGKILL; gpudash keeps that, and
    # once the unit is KillMode=mixed (gpudash's own fix) the lint says what a stop does.
    from dataclasses import replace

    from test_cli import gpudash, state

    from gpudash.domain.triage import triage
    from gpudash.state import footprints

    r = gpudash("reclaim", "--demo", "--unit", "vllm-minimax-m25", "--yes", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["escalated"], r.stdout
    store = json.loads((state() / "footprints-demo.json").read_text())
    [entry] = [u for h in store.values() for name, u in h.items()
               if name == "vllm-minimax-m25.service"]
    assert entry["term_ignored"] == 1 and entry["term_ignored_at"] > 0
    [host] = store
    learned = footprints.learned(host, state() / "footprints-demo.json")
    doc = json.loads(gpudash("snapshot", "--demo", "--json").stdout)
    assert doc["hosts"][0]["name"] == host
    from gpudash.demo.host import DemoHost

    snap = DemoHost().snapshot()
    fixed = replace(snap, units=tuple(replace(u, kill_mode="mixed") for u in snap.units))
    group = triage(fixed, learned=learned).group("vllm-minimax-m25.service")
    assert group is not None
    assert "KillMode=mixed, workers ignore SIGTERM" in [f.setting for f in group.lint]
    assert "KillMode=mixed, workers ignore SIGTERM" not in [
        f.setting for f in triage(fixed).group("vllm-minimax-m25.service").lint]  # type: ignore[union-attr]
