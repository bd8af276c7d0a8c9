"""End to end: the model swap over real SSH against real systemd hosts (tests/lab).

The next model is the lab's model-server stand-in (payload.model_main): it checks free
GPU memory as vLLM does, takes its memory step by step through the stand-in driver while
logging shard progress to its journal, and answers /health on its port only once loaded.
``gpudash swap`` runs as a subprocess; every outcome is checked on the host itself.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from lab.fixtures import HostSpec, labmod
from lab.probes import alice_pid, wait_host, workers

pytestmark = pytest.mark.lab

MINIMAX = "vllm-minimax-m25.service"
KIMI = "vllm-kimi-k25.service"
DEEPSEEK = "vllm-deepseek-v3.service"
SWAP_HOST = HostSpec(units=labmod.SWAP_UNITS)


def gpudash(host, state: Path, *args: str, timeout: float = 180,  # type: ignore[no-untyped-def]
            ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_STATE_HOME": str(state / "state"),
           "XDG_CONFIG_HOME": str(state / "config")}
    return subprocess.run(
        [sys.executable, "-m", "gpudash", *args,
         "--ssh-config", str(host.ssh_config_path), "--known-hosts", str(host.known_hosts_path)],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, env=env,
    )


def health(host, port: int) -> str:  # type: ignore[no-untyped-def]
    cp = host.exec(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                    f"http://127.0.0.1:{port}/health"], check=False)
    return cp.stdout.strip()


@pytest.mark.parametrize("lab_host", [SWAP_HOST], indirect=True)
def test_swap_cli_reclaims_starts_and_proves_serving(lab_host, tmp_path: Path) -> None:
    h = lab_host
    alice = alice_pid(h)
    wait_host(lambda: len(workers(h)) == 8, what="8 MiniMax workers")
    cp = gpudash(h, tmp_path, "swap", h.alias, "--from", "vllm-minimax-m25",
                 "--to", "vllm-kimi-k25", "--enable", "--yes", "--json", "--timeout", "120")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    rec = json.loads(cp.stdout)
    assert rec["confirmed"] is True, rec
    # the plan took the ready URL from the unit's --port, read on the host
    assert f"http://127.0.0.1:{h.port(8001)}/health" in cp.stderr, cp.stderr
    assert f"{h.port(8001)}/health" in json.dumps(rec)
    # the host agrees: old gone and disabled, new active, enabled, answering, loaded
    assert h.unit_show(MINIMAX, ["ActiveState", "UnitFileState"]) == {
        "ActiveState": "inactive", "UnitFileState": "disabled"}
    assert h.unit_show(KIMI, ["ActiveState", "UnitFileState", "NRestarts"]) == {
        "ActiveState": "active", "UnitFileState": "enabled", "NRestarts": "0"}
    assert health(h, h.port(8001)) == "200"
    used = h.gpu_used_mib()
    assert used == [1024 + 88064, 88064, 88064, 88064, 88064, 512 + 88064, 512 + 88064,
                    512 + 88064], used
    assert workers(h) == [] and h.alive(alice)
    # learned: the next swap to it checks the fit against this
    fp = json.loads((tmp_path / "state/gpudash/footprints.json").read_text())
    [entry] = [v for host in fp.values() for k, v in host.items() if k == KIMI]
    assert entry["mib_per_gpu"] == {str(g): 88064 for g in range(8)}, entry


@pytest.mark.parametrize("lab_host", [SWAP_HOST], indirect=True)
def test_swap_into_a_crash_loop_is_stopped_and_explained(lab_host, tmp_path: Path) -> None:
    h = lab_host
    alice = alice_pid(h)
    wait_host(lambda: len(workers(h)) == 8, what="8 MiniMax workers")
    cp = gpudash(h, tmp_path, "swap", h.alias, "--from", "vllm-minimax-m25",
                 "--to", "vllm-deepseek-v3", "--yes", "--timeout", "120")
    out = cp.stdout + cp.stderr
    assert cp.returncode == 1, out
    assert "Free memory on device cuda:0" in out, out  # the failure line, from its journal
    assert f"{alice}" in out or "alice" in out, out  # who still holds GPU0's memory
    s = h.unit_show(DEEPSEEK, ["ActiveState", "UnitFileState"])
    assert s["ActiveState"] in ("inactive", "failed"), s  # stopped: no crash loop left
    # the swap enabled it (MiniMax was); the rollback disabled it again: it must not boot
    assert s["UnitFileState"] == "disabled", s
    assert f"boots: {MINIMAX} enabled, {DEEPSEEK} disabled" in out, out
    # the reclaim itself was done and proven, then rolled back: MiniMax serves again,
    # enabled again, on its own /health (issue 19, item 4)
    assert "phase reclaim: ok" in out, out
    assert "rollback: vllm-minimax-m25.service SERVING again" in out, out
    assert h.unit_show(MINIMAX, ["ActiveState", "UnitFileState"]) == {
        "ActiveState": "active", "UnitFileState": "enabled"}
    assert len(workers(h)) == 8 and h.alive(alice)
    assert health(h, h.port(8000)) == "200"


@pytest.mark.parametrize("lab_host", [SWAP_HOST], indirect=True)
def test_swap_that_cannot_fit_beside_alice_does_nothing(lab_host, tmp_path: Path) -> None:
    h = lab_host
    alice = alice_pid(h)
    old = wait_host(lambda: len(w := workers(h)) == 8 and w, what="8 MiniMax workers")
    store = tmp_path / "state/gpudash"
    store.mkdir(parents=True)
    # what DeepSeek took when it last served here (on a day alice had no kernel)
    (store / "footprints.json").write_text(json.dumps({h.alias: {DEEPSEEK: {
        "mib_per_gpu": {str(g): 97000 for g in range(8)}, "ready_s": 600.0,
        "seen_at": 1.0}}}))
    cp = gpudash(h, tmp_path, "swap", h.alias, "--from", "vllm-minimax-m25",
                 "--to", "vllm-deepseek-v3", "--yes", "--timeout", "120")
    out = cp.stdout + cp.stderr
    assert cp.returncode == 2, out  # a plan error: nothing was done
    assert "GPU0: needs 94.7 GiB, 94.6 GiB will be free" in out, out
    assert "alice's" in out and f"pid {alice}" in out, out
    # nothing done
    assert h.unit_show(MINIMAX, ["ActiveState", "UnitFileState"]) == {
        "ActiveState": "active", "UnitFileState": "enabled"}
    assert workers(h) == old
    assert h.unit_show(DEEPSEEK, ["ActiveState"])["ActiveState"] == "inactive"


# --- the same from the keyboard: the real dashboard (Pilot) over the real SSH transport ---

async def _app_swap(h, to: str, monkeypatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    from test_e2e_app import SIZE, make_app, open_lab, select, unit_of, wait_for

    from gpudash.ui.models import JournalScreen, ModelPicker
    from gpudash.ui.screens import ConfirmModal

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    source = open_lab(h)
    app = make_app([source])
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: unit_of(app, MINIMAX) is not None, what="snapshot")
            await select(pilot, app, f"u:{MINIMAX}")
            await pilot.press("w")
            await wait_for(pilot, lambda: isinstance(app.screen, ModelPicker), what="picker")
            picker = app.screen
            names = [c.name for c in picker.choices]  # type: ignore[attr-defined]
            assert KIMI in names and DEEPSEEK in names, names  # read from the real host
            await pilot.press(*to.removeprefix("vllm-").removesuffix(".service"), "enter")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal)
                           and app.screen.armed, what="plan")
            plan = "\n".join(app.screen.lines)  # type: ignore[attr-defined]
            assert f"$ systemctl start {to}" in plan, plan
            await pilot.press("y")
            await wait_for(pilot, lambda: app.last_report is not None, within=120,
                           what="swap report")
            report = app.last_report
            panel = str(app.query_one("#progress").render())
            # the started unit's journal, streamed over the same connection
            await select(pilot, app, f"u:{to}") if to == KIMI else None
            journal_lines: list[str] = []
            if to == KIMI:
                await pilot.press("j")
                await wait_for(pilot, lambda: isinstance(app.screen, JournalScreen),
                               what="journal")
                screen = app.screen
                await wait_for(pilot, lambda: any(  # type: ignore[attr-defined]
                    "Application startup complete" in ln.message for ln in screen.lines),
                    what="journal lines")
                journal_lines = [  # as the pane shows them: who logged each, then what
                    f"{ln.origin}: {ln.message}" for ln in screen.lines]  # type: ignore[attr-defined]
                await pilot.press("escape")
    finally:
        await source.close()
    return plan, report, panel, journal_lines


@pytest.mark.parametrize("lab_host", [SWAP_HOST], indirect=True)
async def test_swap_from_the_dashboard_serves(lab_host, monkeypatch, tmp_path: Path) -> None:
    h = lab_host
    wait_host(lambda: len(workers(h)) == 8, what="8 MiniMax workers")
    plan, report, panel, journal = await _app_swap(h, KIMI, monkeypatch, tmp_path)
    assert f"http://127.0.0.1:{h.port(8001)}/health answers 200" in plan, plan
    assert report is not None and report.confirmed, report.describe()
    assert report.serving is not None and report.serving.serving
    assert report.serving.ready_status == 200
    assert "serving after" in panel, panel
    assert any("Loading safetensors checkpoint shards: 100% Completed | 64/64" in ln
               for ln in journal), journal
    # systemd's own line of the start, from the real journal, beside the server's
    assert any(ln.startswith("systemd[1]: Started ") for ln in journal), journal
    assert h.unit_show(KIMI, ["ActiveState"])["ActiveState"] == "active"
    assert health(h, h.port(8001)) == "200"


@pytest.mark.parametrize("lab_host", [SWAP_HOST], indirect=True)
async def test_swap_from_the_dashboard_into_a_crash_loop(lab_host, monkeypatch,
                                                         tmp_path: Path) -> None:
    h = lab_host
    wait_host(lambda: len(workers(h)) == 8, what="8 MiniMax workers")
    _plan, report, panel, _j = await _app_swap(h, DEEPSEEK, monkeypatch, tmp_path)
    assert report is not None and not report.confirmed
    assert report.serving is not None and not report.serving.serving
    assert "Free memory on device cuda:0" in (report.serving.failure_line or ""), \
        report.describe()
    assert "Free memory on device" in panel or "Free memory on device" in "\n".join(
        report.describe()), panel
    assert h.unit_show(DEEPSEEK, ["ActiveState"])["ActiveState"] in ("inactive", "failed")


# --- a link cut while the next model loads: reconnect, follow again, never re-send -------

SLOW_KIMI = dataclasses.replace(  # ~16 s to load, then 3 s of warmup before /health
    labmod.VLLM_KIMI, env=("GPULAB_STEP_S=2", "GPULAB_READY_DELAY_S=3"))
SLOW_HOST = HostSpec(units=(*labmod.DEFAULT_UNITS, SLOW_KIMI))


def _ssh_sessions(h) -> list[int]:  # type: ignore[no-untyped-def]
    """The container's sshd processes serving a connection (not the listener)."""
    return [p for p in h.pids_of(r"^sshd(-session)?: ") if "listener" not in
            " ".join(h.proc(p).get("cmdline", "") if h.proc(p) else "")]


@pytest.mark.parametrize("lab_host", [SLOW_HOST], indirect=True)
def test_link_cut_while_loading_is_followed_again_not_resent(lab_host, tmp_path: Path) -> None:
    h = lab_host
    wait_host(lambda: len(workers(h)) == 8, what="8 MiniMax workers")
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"),
           "XDG_CONFIG_HOME": str(tmp_path / "config")}
    cli = subprocess.Popen(
        [sys.executable, "-m", "gpudash", "swap", h.alias, "--from", "vllm-minimax-m25",
         "--to", "vllm-kimi-k25", "--yes", "--timeout", "120",
         "--ssh-config", str(h.ssh_config_path), "--known-hosts", str(h.known_hosts_path)],
        stdout=subprocess.PIPE, stderr=open(tmp_path / "stderr", "w"), text=True,
        stdin=subprocess.DEVNULL, env=env)
    try:
        # loading: the unit is up, its memory part way, /health not answering yet
        wait_host(lambda: h.unit_show(KIMI, ["ActiveState"])["ActiveState"] == "active"
                  and 0 < h.gpu_used_mib()[1] < 88064, timeout=60, what="Kimi loading")
        main = h.unit_show(KIMI, ["MainPID"])["MainPID"]
        assert health(h, h.port(8001)) != "200"
        sessions = wait_host(lambda: _ssh_sessions(h), what="gpudash's ssh session")
        h.exec(["kill", "-9", *map(str, sessions)])  # the link drops mid-load
        out, _ = cli.communicate(timeout=150)
        err = (tmp_path / "stderr").read_text()
    except AssertionError:
        cli.kill()
        out, _ = cli.communicate()
        err = (tmp_path / "stderr").read_text()
        raise AssertionError(f"{h.gpu_used_mib()} {out} {err[-3000:]}") from None
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
    assert cli.returncode == 0, out + err
    # the cut was met while loading (the progress it had then), and the journal followed
    # on after it: the shards' progress reached 100 % over the new link
    cut_at = err.index("[loading]")
    assert "100% of checkpoint shards (64/64)" in err[cut_at:], err[-3000:]
    assert "serving after" in out, out
    # followed to serving; nothing re-sent: the same main process, started once
    s = h.unit_show(KIMI, ["ActiveState", "MainPID", "NRestarts"])
    assert s == {"ActiveState": "active", "MainPID": main, "NRestarts": "0"}, s
    log = h.exec(["journalctl", "--no-pager", "-o", "cat", "-u", KIMI]).stdout
    assert log.count("vLLM API server version") == 1, log
    assert health(h, h.port(8001)) == "200"
