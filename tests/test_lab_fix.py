"""The proof that the cause is gone (issue 21, item 3), on a real systemd host of the lab:
after ``gpudash fix`` on the incident unit (Restart=always, KillMode=process), ``kill -9``
of its main PID leaves no ORPHAN (systemd stops the whole cgroup before it restarts) and
``systemctl stop`` leaves no process; after ``--revert`` the trap is back, and an
operator's own drop-in beside gpudash's is kept throughout. That drop-in sets
Restart=on-failure, which a vLLM whose engine died (it exits 0, vllm #48966) never comes
back from: the fix writes Restart=always over it (issue 34)."""

from __future__ import annotations

import json

import pytest
from lab.probes import wait_host, workers
from test_e2e_cli import gpudash, snapshot_json

pytestmark = pytest.mark.lab

VLLM = "vllm-minimax-m25.service"
DIR = f"/etc/systemd/system/{VLLM}.d"
OURS = f"{DIR}/50-gpudash.conf"
OPERATORS = f"{DIR}/10-operator.conf"
SHOW = ["MainPID", "NRestarts", "ActiveState", "KillMode", "Restart"]


def _exists(h, path: str) -> bool:  # type: ignore[no-untyped-def]
    return h.exec(["test", "-e", path], check=False).returncode == 0


def _orphans(h) -> list[int]:  # type: ignore[no-untyped-def]
    snap = snapshot_json(h)
    return [p["pid"] for p in snap["processes"] if "ORPHAN" in p.get("flags", ())]


def _kill_main(h) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """kill -9 of the main PID; (old main, new main) once systemd restarted it."""
    before = h.unit_show(VLLM, SHOW)
    main0, n0 = int(before["MainPID"]), int(before["NRestarts"])
    h.exec(["kill", "-9", str(main0)])
    after = wait_host(lambda: (s := h.unit_show(VLLM, SHOW))["NRestarts"] == str(n0 + 1)
                      and s["ActiveState"] == "active" and s["MainPID"] not in ("0", str(main0))
                      and s, timeout=20, what="the restart")
    return main0, int(after["MainPID"])


def test_fix_removes_the_trap_and_revert_brings_it_back(lab_host) -> None:  # type: ignore[no-untyped-def]
    h = lab_host
    h.sh(f"mkdir -p {DIR} && printf '[Service]\\nEnvironment=OPERATOR_SET=1\\n"
         f"Restart=on-failure\\n' > {OPERATORS} && systemctl daemon-reload")
    old = wait_host(lambda: len(w := workers(h)) == 8 and w, what="8 workers")
    assert h.unit_show(VLLM, SHOW)["KillMode"] == "process"
    assert h.unit_show(VLLM, SHOW)["Restart"] == "on-failure"

    dry = gpudash(h, "fix", h.alias, "--unit", "vllm-minimax-m25", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"+# {OURS}" in dry.stdout and "+KillMode=mixed" in dry.stdout
    assert "+Restart=always" in dry.stdout and "+StartLimitBurst=5" in dry.stdout
    assert "nothing sent" in dry.stderr  # the diff on stdout (`> fix.diff`), the word apart
    assert not _exists(h, OURS)  # --dry-run sent nothing

    cp = gpudash(h, "fix", h.alias, "--unit", "vllm-minimax-m25", "--yes", "--json",
                 "--timeout", "30")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert json.loads(cp.stdout)["action"] == "fix"
    s = h.unit_show(VLLM, SHOW)
    assert s["KillMode"] == "mixed" and s["Restart"] == "always"
    assert _exists(h, OURS) and _exists(h, OPERATORS)
    assert sorted(workers(h)) == sorted(old)  # the running unit kept running

    # kill -9 of the main: systemd stops the whole cgroup before it starts it again
    _kill_main(h)
    wait_host(lambda: not set(old) & set(workers(h)), timeout=20, what="old workers gone")
    wait_host(lambda: len(workers(h)) == 8, timeout=20, what="8 new workers")
    assert _orphans(h) == []
    # systemctl stop leaves no process
    h.systemctl("stop", VLLM)
    wait_host(lambda: workers(h) == [], timeout=20, what="no worker after stop")
    assert _orphans(h) == []

    h.systemctl("start", VLLM)
    wait_host(lambda: len(workers(h)) == 8, timeout=20, what="8 workers")
    cp = gpudash(h, "fix", h.alias, "--unit", "vllm-minimax-m25", "--revert", "--yes",
                 "--timeout", "30")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    s = h.unit_show(VLLM, SHOW)
    assert s["KillMode"] == "process" and s["Restart"] == "on-failure"
    assert not _exists(h, OURS) and _exists(h, OPERATORS)  # only gpudash's file went
    # the trap is back: the old workers outlive their main as orphans
    before = sorted(workers(h))
    _kill_main(h)
    wait_host(lambda: len(workers(h)) == 16, timeout=20, what="16 workers")
    assert set(before) <= set(workers(h))
    wait_host(lambda: set(before) <= set(_orphans(h)), timeout=20, what="ORPHANs")
