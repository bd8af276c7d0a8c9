"""The fleet through Prometheus, every part real but dcgm-exporter: three lab hosts (real
systemd, the stand-in driver) each run the shipped node-local exporter unit
(contrib/systemd/gpudash-exporter.service, its ARGS from /etc/default); a real Prometheus
on this machine scrapes them every second, and dcgm-exporter's series for one of them
from a static exposition (tests/promfakes.py). ``gpudash snapshot --prometheus URL
--json`` shows the three; the seed's incident on one makes its row show the orphans one
scrape after its exporter does; ``gpudash reap`` on the row's SSH name, and the row is
back to zero one scrape after the exporter is.

The unit runs as it ships, but for how gpudash is installed: the checkout's venv
interpreter lives under /root here (pyenv), which the unit's ProtectHome= hides, so each
host gets a venv of its own /usr/bin/python3 that finds the checkout's packages (a .pth),
and ``/usr/local/bin/gpudash`` is the console script pip writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import sysconfig
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from lab.fixtures import labmod
from lab.probes import wait_host, workers
from promfakes import dcgm_exposition, exposition_handler, serving
from promserver import Prometheus, free_port, start, stop

from gpudash.fleetprom.client import PromClient
from gpudash.fleetprom.fleet import read_fleet
from gpudash.state.promconfig import PromSettings

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parent.parent
UNIT = ROOT / "contrib" / "systemd" / "gpudash-exporter.service"
DEFAULTS = ROOT / "contrib" / "systemd" / "gpudash-exporter.default"
SYSUSERS = ROOT / "contrib" / "systemd" / "gpudash-exporter.sysusers"
VLLM = "vllm-minimax-m25.service"
SCRAPE_S = 1.0  # tests/promserver.py's scrape interval
EXPORTER_INTERVAL_S = 0.5
SLACK_S = 2.0  # a query's round trip and a loaded 2-core machine's scheduling
# the unit's exposure as `systemd-analyze security` scores it (docs/EXPORTER.md)
EXPOSURE_MAX = 2.5
CAP_SYS_PTRACE = 19
CONSOLE_SCRIPT = """#!/opt/gpudash/bin/python3
import sys
from gpudash.cli import main
sys.exit(main())
"""


# What a program run by the unit's sandbox may do to a root-owned process (PID in
# /opt/probe-target) and the system; one line per attempt: ok, or the errno's name.
PROBE = """import ctypes, errno, os
pid = int(open("/opt/probe-target").read())
def attempt(name, f):
    try:
        f()
        print(name, "ok")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
def ptrace():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(16, pid, 0, 0) != 0:  # PTRACE_ATTACH
        raise OSError(ctypes.get_errno(), "ptrace")
attempt("maps", lambda: open(f"/proc/{pid}/maps").read())
attempt("fd", lambda: os.listdir(f"/proc/{pid}/fd"))
attempt("mem", lambda: open(f"/proc/{pid}/mem", "rb").close())
attempt("mem-write", lambda: open(f"/proc/{pid}/mem", "wb").close())
attempt("kill", lambda: os.kill(pid, 0))
attempt("ptrace", ptrace)
attempt("etc", lambda: open("/etc/gpudash-probe", "w").close())
attempt("state", lambda: open(os.environ["XDG_STATE_HOME"] + "/probe", "w").close())
"""


def sandbox_probe(host: Any, pid: int) -> dict[str, str]:
    """PROBE run as a oneshot unit that is the exporter's unit but for its ExecStart."""
    unit = re.sub(r"^ExecStart=.*$", "ExecStart=/usr/bin/python3 /opt/probe.py",
                  UNIT.read_text(), count=1, flags=re.M).replace("Type=simple", "Type=oneshot")
    host._write("/opt/probe.py", PROBE)
    host._write("/opt/probe-target", str(pid))
    host._write("/etc/systemd/system/gpudash-probe.service", unit)
    host.systemctl("daemon-reload")
    host.systemctl("start", "gpudash-probe.service")
    out = host.exec(["journalctl", "-u", "gpudash-probe", "--no-pager", "-o", "cat"]).stdout
    return dict(line.split(" ", 1) for line in out.splitlines()
                if line.split(" ", 1)[0] in ("maps", "fd", "mem", "mem-write", "kill",
                                             "ptrace", "etc", "state"))


def install_exporter(host: Any, port: int) -> None:
    """gpudash and the shipped unit on ``host``, listening on 127.0.0.1:``port`` (the
    lab's hosts share this machine's network: each its own port)."""
    host.exec(["/usr/bin/python3", "-m", "venv", "--without-pip", "/opt/gpudash"])
    site = sysconfig.get_path("purelib")  # the checkout's venv: gpudash and its deps
    [venv_site] = host.exec(["/opt/gpudash/bin/python3", "-c",
                             "import sysconfig; print(sysconfig.get_path('purelib'))"]
                            ).stdout.split()
    host._write(f"{venv_site}/gpudash-checkout.pth",
                f"import site; site.addsitedir({site!r})\n")
    host._write("/usr/local/bin/gpudash", CONSOLE_SCRIPT, 0o755)
    host._write("/etc/sysusers.d/gpudash-exporter.conf", SYSUSERS.read_text())
    host.exec(["systemd-sysusers"])
    host._write("/etc/systemd/system/gpudash-exporter.service", UNIT.read_text())
    if labmod.tmp_binds():  # a checkout under /tmp: the unit's PrivateTmp= would hide it
        host._write("/etc/systemd/system/gpudash-exporter.service.d/lab-checkout.conf",
                    "[Service]\nBindReadOnlyPaths=" + " ".join(labmod.tmp_binds()) + "\n")
    defaults = re.sub(r'^ARGS=.*$', f'ARGS="--listen 127.0.0.1:{port} '
                      f'--interval {EXPORTER_INTERVAL_S:g}"', DEFAULTS.read_text(), count=1,
                      flags=re.M)
    assert f"127.0.0.1:{port}" in defaults, "the shipped defaults file has no ARGS= line"
    host._write("/etc/default/gpudash-exporter", defaults)
    host.systemctl("daemon-reload")
    host.systemctl("enable", "--now", "gpudash-exporter.service")


def metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def exporter_orphans(port: int) -> int | None:
    """The exporter's own figure: orphaned processes of the vLLM unit (None: not yet)."""
    try:
        text = metrics(port)
    except OSError:
        return None
    m = re.search(r'^gpudash_orphaned_processes\{[^}]*unit="' + re.escape(VLLM)
                  + r'"[^}]*\} (\S+)$', text, re.M)
    return None if m is None else int(float(m.group(1)))


def gpudash(*args: str, tmp: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"XDG_CONFIG_HOME": str(tmp / "config"),
                        "XDG_STATE_HOME": str(tmp / "state")}
    return subprocess.run([sys.executable, "-m", "gpudash", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT,
                          stdin=subprocess.DEVNULL)


@contextlib.contextmanager
def reaping(name: str, host: Any, tmp: Path) -> Iterator[subprocess.CompletedProcess[str]]:
    """``gpudash reap NAME --yes --json`` over SSH, running while the block runs; its
    outcome in the yielded object once the block is done (waited for, at most 300 s)."""
    env = os.environ | {"XDG_CONFIG_HOME": str(tmp / "config"),
                        "XDG_STATE_HOME": str(tmp / "state")}
    argv = [sys.executable, "-m", "gpudash", "reap", name, "--yes", "--json", "--ssh-config",
            str(host.ssh_config_path), "--known-hosts", str(host.known_hosts_path)]
    done = subprocess.CompletedProcess(argv, -1, "", "")
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env, cwd=ROOT, stdin=subprocess.DEVNULL) as proc:
        try:
            yield done
        finally:
            try:
                done.stdout, done.stderr = proc.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                proc.kill()
                done.stdout, done.stderr = proc.communicate()
            done.returncode = proc.returncode


def snapshot(prom: Prometheus, tmp: Path) -> dict[str, dict[str, Any]]:
    cp = gpudash("snapshot", "--prometheus", "--json", tmp=tmp)
    assert cp.returncode == 0, cp.stderr
    assert "Traceback" not in cp.stderr
    return {h["host"]: h for h in json.loads(cp.stdout)["hosts"]}


def when_both(first: Callable[[], bool], then: Callable[[], bool], timeout: float,
              what: str) -> float:
    """Seconds from ``first`` holding (polled) to ``then`` holding too: how long the
    fleet row lags its exporter."""
    deadline = time.monotonic() + timeout
    seen: float | None = None
    while time.monotonic() < deadline:
        if seen is None and first():
            seen = time.monotonic()
        if seen is not None and then():
            return time.monotonic() - seen
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout:g} s (exporter first: "
                         f"{'yes' if seen is not None else 'no'})")


@contextlib.contextmanager
def fleet_client(prom: Prometheus) -> Iterator[Callable[[], dict[str, Any]]]:
    client = PromClient(PromSettings(url=prom.base))
    try:
        yield lambda: {h.name: h for h in asyncio.run(read_fleet(client)).hosts}
    finally:
        client.close()


def exposure(host: Any) -> float:
    out = host.exec(["systemd-analyze", "security", "--no-pager",
                     "gpudash-exporter.service"], check=False).stdout
    m = re.search(r"Overall exposure level for gpudash-exporter\.service: ([0-9.]+)", out)
    assert m, out[-2000:]
    return float(m.group(1))


def status_of(host: Any, pid: int) -> dict[str, str]:
    text = host.exec(["cat", f"/proc/{pid}/status"]).stdout
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def test_three_hosts_exporters_a_real_prometheus_the_incident_and_the_reap(
        lab_hosts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    hosts = lab_hosts(3)
    incident, calm, also = hosts
    ports = {}
    for h in hosts:
        wait_host(lambda h=h: len(workers(h)) == 8, what=f"{h.name}: 8 workers")
        ports[h.name] = port = free_port()
        install_exporter(h, port)
    for h in hosts:
        wait_host(lambda h=h: exporter_orphans(ports[h.name]) == 0, timeout=60,
                  what=f"{h.name}: the exporter's first exposition")

    # the unit as it runs: not root, CAP_SYS_PTRACE alone, no new privileges, a seccomp
    # filter; and systemd's own score of it
    for h in hosts:
        shown = h.unit_show("gpudash-exporter.service", ["ActiveState", "MainPID", "NRestarts"])
        assert shown["ActiveState"] == "active" and shown["NRestarts"] == "0", shown
        st = status_of(h, int(shown["MainPID"]))
        assert st["Uid"].split()[0] != "0", st["Uid"]
        assert int(st["CapEff"], 16) == 1 << CAP_SYS_PTRACE, st["CapEff"]
        assert st["NoNewPrivs"] == "1" and st["Seccomp"] == "2", st
    score = exposure(incident)
    assert score <= EXPOSURE_MAX, score
    print(f"systemd-analyze security gpudash-exporter.service: {score}")

    dcgm = dcgm_exposition(calm.name, [96801] * 8)  # dcgm-exporter beside gpudash's
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(serving(exposition_handler({"/metrics": dcgm})))
        prom = start(tmp_path / "prometheus",
                     [f"127.0.0.1:{ports[h.name]}" for h in hosts],
                     jobs={"dcgm": [url.removeprefix("http://")]})
        stack.callback(stop, prom)
        config = tmp_path / "config" / "gpudash"
        config.mkdir(parents=True)
        # one exporter per host, all on 127.0.0.1 here: the host label names the host
        (config / "config.toml").write_text(
            f'[prometheus]\nurl = "{prom.base}"\nssh_name = "{{host}}"\n')
        prom.wait('up{job="gpudash"}', lambda r: sorted(r.values()) == [1.0] * 3)
        prom.wait("DCGM_FI_DEV_FB_USED", lambda r: len(r) == 8)

        rows = snapshot(prom, tmp_path)
        assert sorted(rows) == sorted(h.name for h in hosts)
        for h in hosts:
            row = rows[h.name]
            assert row["link_up"] is True and row["gpus"] == 8, row
            assert row["orphans"] == 0 and row["orphaned_mib"] == 0, row
            assert row["ssh_name"] == h.name
            # the host's own numbers, as its driver says them
            assert row["used_mib"] == sum(h.gpu_used_mib()), (row, h.gpu_used_mib())
        assert rows[calm.name]["sources"] == ["gpudash", "dcgm"]  # one host, one row
        assert rows[incident.name]["sources"] == ["gpudash"]

        with fleet_client(prom) as fleet:
            # the seed's incident: stop the KillMode=process unit; its 8 workers stay
            old = workers(incident)
            incident.systemctl("stop", VLLM)
            lag = when_both(lambda: exporter_orphans(ports[incident.name]) == 8,
                            lambda: fleet()[incident.name].orphans == 8,
                            timeout=60, what="the row's orphans")
            assert lag <= SCRAPE_S + SLACK_S, f"the row lagged its exporter {lag:.1f} s"
            print(f"orphans: the row {lag:.2f} s after the exporter")
            rows = snapshot(prom, tmp_path)
            row = rows[incident.name]
            assert row["orphans"] == 8 and row["orphaned_mib"] == 8 * 96801, row
            assert {"orphans", "reclaim"} <= set(row["states"]), row
            assert rows[calm.name]["orphans"] == rows[also.name]["orphans"] == 0

            # Enter's way: the row's SSH name, the reap over SSH, planned and proven
            with reaping(row["ssh_name"], incident, tmp_path) as reap:
                # followed while the reap runs: the row goes to zero as the exporter does
                lag = when_both(lambda: exporter_orphans(ports[incident.name]) in (0, None),
                                lambda: (fleet()[incident.name].orphans or 0) == 0,
                                timeout=120, what="the row back to zero")
            assert reap.returncode == 0, reap.stderr[-3000:]
            assert json.loads(reap.stdout)["hosts"][0]["host"] == incident.name
            assert not any(incident.alive(p) for p in old)
            assert lag <= SCRAPE_S + SLACK_S, f"the row lagged its exporter {lag:.1f} s"
            print(f"reaped: the row {lag:.2f} s after the exporter")
        rows = snapshot(prom, tmp_path)
        assert rows[incident.name]["orphans"] in (0, None)
        assert rows[incident.name]["orphaned_mib"] in (0, None)
        assert "orphans" not in rows[incident.name]["states"]
    # what the unit's sandbox lets a program do to a root-owned process and the system
    root_pid = int(calm.unit_show("sglang-kimi.service", ["MainPID"])["MainPID"])
    assert sandbox_probe(calm, root_pid) == {
        "maps": "ok", "fd": "EACCES", "mem": "EACCES", "mem-write": "EROFS",
        "kill": "EPERM", "ptrace": "EPERM", "etc": "EROFS", "state": "ok"}
    for h in hosts:  # it ran the whole time, and said nothing it should not have
        assert h.unit_show("gpudash-exporter.service", ["NRestarts"])["NRestarts"] == "0"
        log = h.exec(["journalctl", "-u", "gpudash-exporter", "--no-pager", "-o", "cat"],
                     check=False).stdout
        assert "Traceback" not in log, log[-3000:]
