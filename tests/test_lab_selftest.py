"""Self-test of the container lab (tests/lab): real systemd, real sshd, stand-in GPUs.

The incident of shared/PRODUCT.md reproduces exactly as shared/LAB.md describes, and a
host starts only what the lab gives it. The checks that change nothing (or put back what
they change) share one host of the module; those that kill, stop or power off boot
their own.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

if not {"lab.fixtures", "tests.lab.fixtures"} & set(sys.modules):  # not a pytest plugin yet
    _spec = importlib.util.spec_from_file_location(
        "gpudash_lab_fixtures", Path(__file__).resolve().parent / "lab" / "fixtures.py"
    )
    _fx = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_fx)
    lab, lab_host, lab_hosts = _fx.lab, _fx.lab_host, _fx.lab_hosts  # noqa: F401
    lab_module_host = _fx.lab_module_host  # noqa: F401

L = sys.modules["gpudash_lab"]

pytestmark = pytest.mark.lab

VLLM = "vllm-minimax-m25.service"
SGLANG = "sglang-kimi.service"
EMBED = "embed-server.service"
WORKER_MIB = 96801


def _wait(pred, timeout=10.0, step=0.05, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _wait_n(fn, n, timeout=10.0, what="processes"):
    last = []

    def pred():
        nonlocal last
        last = fn()
        return last if len(last) == n else None

    try:
        return _wait(pred, timeout=timeout, what=what)
    except AssertionError:
        raise AssertionError(f"wanted {n} {what}, have {len(last)}: {last}") from None


def _workers(host) -> list[int]:
    return host.pids_of(r"VLLM::Worker_TP[0-7] ")


def _ancestors(host, pid: int) -> list[int]:
    out = []
    while pid > 1:
        p = host.proc(pid)
        if p is None:
            break
        pid = int(p["ppid"])
        out.append(pid)
    return out


def test_ssh_answers_and_users(lab_module_host):
    h = lab_module_host
    t0 = time.monotonic()
    cp = subprocess.run(
        ["ssh", "-F", str(h.ssh_config_path), h.alias, "true"],
        capture_output=True,
        text=True,
        timeout=20,
        stdin=subprocess.DEVNULL,
    )
    dt = time.monotonic() - t0
    assert cp.returncode == 0, cp.stderr
    assert dt < 5, f"ssh took {dt:.2f}s"
    assert h.ssh("hostname").stdout.strip() == h.name
    # the non-root operator logs in with the same key; sudo only after grant_sudo()
    assert h.ssh("id", "-un", user="operator").stdout.strip() == "operator"
    assert h.ssh("sudo", "-n", "true", user="operator").returncode != 0
    h.grant_sudo()
    try:
        assert h.ssh("sudo", "-n", "id", "-un", user="operator").stdout.strip() == "root"
    finally:
        h.revoke_sudo()  # the host is the module's: put back what this test changed
    assert h.ssh("sudo", "-n", "true", user="operator").returncode != 0
    # strict host key checking really is on: a wrong known_hosts entry is refused
    bad = h.dir / "bad_known_hosts"
    bad.write_text(
        f"[127.0.0.1]:{h.ssh_port} "
        + " ".join(h.lab.client_key_path.with_suffix(".pub").read_text().split()[:2])
        + "\n"
    )
    cp = subprocess.run(
        ["ssh", "-F", str(h.ssh_config_path), "-o", f"UserKnownHostsFile={bad}", h.alias, "true"],
        capture_output=True,
        text=True,
        timeout=20,
        stdin=subprocess.DEVNULL,
    )
    assert cp.returncode != 0


def test_asyncssh_with_lab_files(lab_module_host):
    asyncssh = pytest.importorskip("asyncssh")
    import asyncio

    h = lab_module_host

    async def go():
        async with asyncssh.connect(
            "127.0.0.1",
            port=h.ssh_port,
            username="root",
            known_hosts=str(h.known_hosts_path),
            client_keys=[str(h.client_key_path)],
            config=[],
        ) as conn:
            r = await conn.run(
                "hostname; nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits",
                check=True,
            )
            return r.stdout

    out = asyncio.run(asyncio.wait_for(go(), 20)).split()
    assert out[0] == h.name
    assert len(out) == 9 and all(int(x) >= WORKER_MIB for x in out[1:])


def test_incident_reproduces(lab_host):
    h = lab_host
    show = ["MainPID", "NRestarts", "ActiveState", "UnitFileState", "Restart", "KillMode"]
    before = h.unit_show(VLLM, show)
    assert before["Restart"] == "always" and before["KillMode"] == "process"
    assert before["UnitFileState"] == "enabled" and before["ActiveState"] == "active"
    assert before["NRestarts"] == "0"
    main0 = int(before["MainPID"])
    old = _wait_n(lambda: _workers(h), 8, what="workers")
    assert all(h.proc(p)["ppid"] == str(main0) for p in old)
    assert all(u >= WORKER_MIB for u in h.gpu_used_mib())

    # 1. kill -9 the main PID: systemd respawns it, the old workers are orphaned
    h.exec(["kill", "-9", str(main0)])
    after = _wait(
        lambda: (
            (s := h.unit_show(VLLM, show))["NRestarts"] == "1"
            and s["ActiveState"] == "active"
            and s["MainPID"] not in ("0", str(main0))
            and s
        ),
        timeout=10,
        what="restart",
    )
    main1 = int(after["MainPID"])
    allw = _wait_n(lambda: _workers(h), 16, what="workers")
    assert set(old) <= set(allw)
    for p in old:
        info = h.proc(p)
        assert info["ppid"] == "1", info
        assert info["cgroup"].endswith(f"/system.slice/{VLLM}"), info
    new = sorted(set(allw) - set(old))
    assert all(h.proc(p)["ppid"] == str(main1) for p in new)
    assert all(u >= WORKER_MIB for u in h.gpu_used_mib())

    # 2. stop + disable: unit inactive and disabled, all 16 workers still alive
    h.systemctl("stop", VLLM)
    h.systemctl("disable", VLLM)
    s = h.unit_show(VLLM, show)
    assert s["ActiveState"] == "inactive" and s["UnitFileState"] == "disabled"
    still = _workers(h)
    assert sorted(still) == sorted(allw)
    for p in still:
        info = h.proc(p)
        assert info["ppid"] == "1" and info["cgroup"].endswith(f"/system.slice/{VLLM}"), info
    assert all(u >= WORKER_MIB for u in h.gpu_used_mib())
    assert h.unit_show(VLLM, ["NRestarts"])["NRestarts"] == "1"  # no respawn after stop

    # 3. reap the orphans: memory comes back (stand-in may delay teardown)
    h.exec(["kill", "-9", *map(str, still)])
    _wait(lambda: not _workers(h), what="workers gone")
    _wait(lambda: max(h.gpu_used_mib()) < WORKER_MIB, timeout=15, what="memory freed")


def test_sglang_schedulers_escape_tree(lab_module_host):
    h = lab_module_host
    main = int(h.unit_show(SGLANG, ["MainPID"])["MainPID"])
    scheds = _wait_n(lambda: h.pids_of(r"sglang::scheduler_DP"), 2, what="schedulers")
    for pid in scheds:
        info = h.proc(pid)
        assert info["cgroup"].endswith(f"/system.slice/{SGLANG}"), info
        assert main not in _ancestors(h, pid), info
        sid = h.exec(["ps", "-o", "sid=", "-p", str(pid)]).stdout.strip()
        assert sid == str(pid), "scheduler leads its own session"


def test_term_ignoring_worker(lab_module_host):
    h = lab_module_host
    assert h.unit_show(EMBED, ["KillMode"])["KillMode"] == "control-group"
    [w] = _wait(lambda: h.pids_of(r"embed-worker hold"), what="embed worker")
    assert h.proc(w)["cgroup"].endswith(f"/system.slice/{EMBED}")
    sigcgt = h.exec(["grep", "SigIgn", f"/proc/{w}/status"]).stdout.split()[1]
    assert int(sigcgt, 16) & (1 << 14), "SIGTERM (15) is ignored"
    h.exec(["kill", "-TERM", str(w)])
    time.sleep(0.3)
    assert h.alive(w)


def test_alice_kernel_in_session_scope(lab_module_host):
    h = lab_module_host
    [k] = h.pids_of(r"ipykernel_launcher")
    info = h.proc(k)
    assert info["user"] == "alice"
    assert (
        "/user.slice/user-" in info["cgroup"]
        and info["cgroup"].split("/")[-1].startswith("session-")
        and info["cgroup"].endswith(".scope")
    ), info
    # GPU 0 carries minimax's worker and alice's kernel
    used = h.gpu_used_mib()
    assert used[0] >= WORKER_MIB + L.ALICE_KERNEL.mib


# --- a host starts what the lab gives it, nothing of this machine's own ---------------


def _given_links(spec) -> dict[str, str]:
    """The unit symlinks the lab writes under /etc/systemd for this spec, and no other."""
    system = "etc/systemd/system"
    given = {
        f"{system}/default.target": "/lib/systemd/system/multi-user.target",
        f"{system}/sysinit.target.wants/fakegpu-init.service":
            f"/{system}/fakegpu-init.service",
        **{f"{system}/{wants}/{unit}": f"/lib/systemd/system/{unit}"
           for wants, unit in L.WANTED_UNITS},
    }
    for u in spec.units:
        if u.enabled:
            given[f"{system}/{u.wanted_by}.wants/{u.name}"] = f"/{system}/{u.name}"
    return given


def test_a_host_enables_only_what_the_lab_gives(lab_module_host):
    h = lab_module_host
    # what this machine's /etc enables (prometheus, postgresql, docker, timers...) is gone
    assert L.enabled_links(h.root_dir) == _given_links(h.spec)
    # and every generator is masked: none turns /etc/init.d or /etc/fstab into units
    gens = h.exec(["ls", "-l", "/etc/systemd/system-generators"]).stdout
    assert "systemd-sysv-generator -> /dev/null" in gens, gens
    state = h.exec(["systemctl", "is-system-running"], check=False).stdout.strip()
    failed = h.exec(["systemctl", "--failed", "--no-legend", "--plain"]).stdout
    assert state == "running", (state, failed)  # nothing of the machine's failed to start


def test_the_machines_prometheus_does_not_run_in_a_host(lab_module_host):
    # tests/run.sh installs prometheus (the exporter's end-to-end test), and Debian's
    # package enables it on this machine: a host booted on this machine's / ran it, on
    # *:9090 of the network it shares with the machine
    h = lab_module_host
    if not Path("/lib/systemd/system/prometheus.service").exists():
        pytest.skip("prometheus is not installed on this machine (tests/run.sh installs it)")
    s = h.unit_show("prometheus.service", ["LoadState", "ActiveState", "UnitFileState"])
    assert s == {"LoadState": "loaded", "ActiveState": "inactive",
                 "UnitFileState": "disabled"}, s
    assert h.exec(["pgrep", "-x", "prometheus"], check=False).stdout == ""
    # the network is the machine's: only a process of this host may not hold the port
    held = h.exec(["ss", "-Hltnp", "sport", "=", ":9090"]).stdout
    assert "users:" not in held, held


SLEEPS = {"system": "86401", "sysv": "86402", "user": "86403"}


def _machine_layer(d: Path) -> Path:
    """More of a machine's own configuration: a unit it enables, a SysV script in its
    runlevels and a user unit every login starts (each sleeps a number of its own)."""
    def write(rel: str, text: str, mode: int = 0o644) -> None:
        f = d / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
        f.chmod(mode)

    def link(rel: str, target: str) -> None:
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).symlink_to(target)

    unit = "[Unit]\nDescription=the machine's own {0}\n\n[Service]\n" \
        "ExecStart=/bin/sleep {1}\n\n[Install]\nWantedBy={2}\n"
    write("etc/systemd/system/gpulab-machine.service",
          unit.format("service", SLEEPS["system"], "multi-user.target"))
    link("etc/systemd/system/multi-user.target.wants/gpulab-machine.service",
         "/etc/systemd/system/gpulab-machine.service")
    write("etc/systemd/user/gpulab-user.service",
          unit.format("user service", SLEEPS["user"], "default.target"))
    link("etc/systemd/user/default.target.wants/gpulab-user.service",
         "/etc/systemd/user/gpulab-user.service")
    write("etc/init.d/gpulab-sysv", (
        "#!/bin/sh\n### BEGIN INIT INFO\n# Provides: gpulab-sysv\n"
        "# Default-Start: 2 3 4 5\n# Default-Stop: 0 1 6\n### END INIT INFO\n"
        f"case \"$1\" in start) setsid -f /bin/sleep {SLEEPS['sysv']} ;; esac\n"), 0o755)
    for level in "2345":
        link(f"etc/rc{level}.d/S01gpulab-sysv", "../init.d/gpulab-sysv")
    return d


def test_what_the_machine_enables_does_not_start_in_a_host(lab_hosts, tmp_path):
    layer = _machine_layer(tmp_path / "machine")
    [h] = lab_hosts([L.HostSpec(machine_layer=str(layer))])
    # the layer reached the host: its units are there to be started...
    assert h.unit_show("gpulab-machine.service", ["LoadState"])["LoadState"] == "loaded"
    assert h.exec(["test", "-x", "/etc/init.d/gpulab-sysv"], check=False).returncode == 0
    uid = h.exec(["id", "-u", "alice"]).stdout.strip()
    _wait(lambda: h.unit_show(f"user@{uid}.service", ["ActiveState"])["ActiveState"]
          == "active", what="alice's user manager")
    user = ["systemctl", "--user", "--machine=alice@.host"]
    _wait(lambda: h.exec([*user, "is-system-running"], check=False).stdout.strip()
          in ("running", "degraded"), what="alice's user manager up")
    loaded = h.exec([*user, "show", "gpulab-user.service", "--property=LoadState"]).stdout
    assert loaded.strip() == "LoadState=loaded", loaded
    # ...and none of them ran
    for unit in ("gpulab-machine.service", "gpulab-sysv.service"):
        assert h.unit_show(unit, ["ActiveState"])["ActiveState"] == "inactive", unit
    active = h.exec([*user, "is-active", "gpulab-user.service"], check=False).stdout
    assert active.strip() == "inactive", active
    ran = h.exec(["pgrep", "-af", "sleep (" + "|".join(SLEEPS.values()) + ")"], check=False)
    assert ran.stdout == "", ran.stdout


def test_power_off_and_boot_again(lab_host):
    h = lab_host
    port, key = h.ssh_port, h.host_key_path.read_text()
    nspawn, pid1 = h.nspawn_pid, h.pid1
    h.power_off()
    assert not L._pid_alive(pid1) and not L._pid_alive(nspawn)
    assert not L.port_listening(port)
    assert h.ssh("true", timeout=10).returncode != 0
    took = h.boot()
    assert h.ssh_port == port and h.host_key_path.read_text() == key
    assert h.ssh("hostname").stdout.strip() == h.name  # same known_hosts still valid
    assert h.unit_show(VLLM, ["NRestarts"])["NRestarts"] == "0"
    assert len(_workers(h)) == 8
    print(f"\nreboot after power-off: {took:.2f}s")


SHARED_HOST_TESTS = """
import pytest

def test_a_look(lab_module_host):
    assert lab_module_host.unit_show("vllm-minimax-m25.service", ["ActiveState"])

def test_a_kill(lab_module_host):
    main = lab_module_host.unit_show("vllm-minimax-m25.service", ["MainPID"])["MainPID"]
    lab_module_host.exec(["kill", "-9", main])
"""


def test_a_test_that_changes_the_shared_host_is_named(lab, tmp_path):
    # `lab` for its availability check; the pytest run below makes its own
    (tmp_path / "test_shared.py").write_text(SHARED_HOST_TESTS)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent),
           "GPUDASH_FAKEGPU_DIR": str(lab.fakegpu_dir)}
    cp = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "lab.fixtures",
         "--rootdir", str(tmp_path), str(tmp_path / "test_shared.py")],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    out = cp.stdout + cp.stderr
    assert "2 passed, 1 error" in out, out  # the kill itself passed; its teardown did not
    assert "ERROR at teardown of test_a_kill" in out, out
    assert "test_a_kill changed the module's shared host" in out, out


def _procs_under(base: Path) -> list[int]:
    """Processes whose root or command line is inside the run dir."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            root = str((p / "root").readlink())
            cmd = (p / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if root.startswith(str(base)) or str(base) in cmd:
            out.append(int(p.name))
    return out


def test_three_hosts_parallel_and_clean_teardown(lab, capsys):
    # `lab` only for its availability check (skip / fail under CI); this test makes its own
    lab = L.Lab(fakegpu=lab.fakegpu_dir)
    base = lab.base_dir
    try:
        t0 = time.monotonic()
        hosts = lab.start(3)
        wall = time.monotonic() - t0
        with capsys.disabled():
            print(
                f"\nlab boot: 3 hosts in parallel in {wall:.2f}s "
                f"(each {', '.join(f'{h.boot_seconds:.2f}s' for h in hosts)})"
            )
        ports = [h.ssh_port for h in hosts]
        pids = [p for h in hosts for p in (h.nspawn_pid, h.pid1)]
        assert len(set(ports)) == 3
        for h in hosts:
            cp = subprocess.run(
                ["ssh", "-F", str(lab.ssh_config_path), h.alias, "hostname"],
                capture_output=True,
                text=True,
                timeout=20,
                stdin=subprocess.DEVNULL,
            )
            assert cp.stdout.strip() == h.name, cp.stderr
        assert len(L.mounts_under(base)) == 3
        assert _procs_under(base)
        # they share this machine's network: each one's MiniMax (--port 8000 in its spec)
        # listens on a port of its own, and what answers there is that host's (the swap's
        # rollback was once proven by another host's MiniMax holding 127.0.0.1:8000)
        minimax = [h.port(8000) for h in hosts]
        assert len(set(minimax)) == 3 and 8000 not in minimax, minimax
        for h in hosts:
            port = h.port(8000)
            _wait(lambda h=h, port=port: h.exec(
                ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                 f"http://127.0.0.1:{port}/health"], check=False).stdout == "200",
                  timeout=60, what=f"{h.name}'s MiniMax on {port}")
            listener = h.exec(["ss", "-Htlnp", f"sport = :{port}"], check=False).stdout
            assert "python3" in listener, (h.name, listener)  # its own, seen from inside
    finally:
        lab.stop()
    assert not base.exists()
    assert L.mounts_under(base) == []
    assert not any(L._pid_alive(p) for p in pids)
    assert not any(L.port_listening(p) for p in ports)
    assert _procs_under(base) == []
    leftovers = [d for r in L._cgroup_roots() for d in r.glob(base.name + ".*")]
    assert leftovers == []
