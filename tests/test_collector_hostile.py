"""A GPU user, a login's environment or an odd account cannot blind or hijack the collector.

Each test runs the real collector the way gpudash does (bootstrap argv + payload on stdin),
against real processes.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import sys
from pathlib import Path

import collector_run
import pytest

from gpudash.collector.host.collector import HostCollector
from gpudash.collector.host.procs import ProcReader
from gpudash.collector.host.protocol import CMDLINE_MAX, CMDLINE_SHORT, TRUNCATED
from gpudash.collector.host.text import snapshot_bound
from gpudash.collector.host.units import UnitReader
from gpudash.protocol.wire import SnapshotDecoder
from gpudash.transport import LocalSource

# ---------------------------------------------------- one user's cmdlines cannot blind us


def test_huge_invalid_utf8_cmdlines_keep_the_snapshot_small(fakegpu_state) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    """Six holders with 64 KiB argv of invalid UTF-8 (the issue's attack): the first
    snapshot stays small, each cmdline ends in a visible mark, and the line is UTF-8 as is
    (U+FFFD written as its three bytes, not as a six-byte ``\\ufffd`` escape)."""
    st = fakegpu_state
    holders = [
        st.hold(i % 2, 100 + i, name=b"\xff\xfe" * 32768 + b"%d" % i)  # type: ignore[arg-type]
        for i in range(6)
    ]
    proc = collector_run.start(env=st.env)
    try:
        line = collector_run.read_line(proc)
    finally:
        collector_run.stop(proc)
    assert len(line) < 64 * 1024, f"first snapshot is {len(line)} bytes"
    text = line.decode("utf-8")  # strict: valid UTF-8
    assert "\\ufffd" not in text and "\ufffd" in text
    snap = SnapshotDecoder("h").feed(line)
    for holder in holders:
        p = snap.process(holder.pid)
        assert p is not None and p.cmdline.endswith(TRUNCATED)
        assert p.cmdline.startswith("\ufffd\ufffd")
        assert len(json.dumps(p.cmdline, ensure_ascii=False).encode()) - 2 <= CMDLINE_MAX


def _fake_host(root: Path, n: int, cmdline: bytes, unit: str = "hog.service") -> HostCollector:
    """A stand-in /proc with ``n`` processes of one unit, the first of them a GPU holder."""
    proc = root / "proc"
    proc.mkdir()
    (proc / "stat").write_text("cpu 0\nbtime 1000\n")
    cgroup = f"/system.slice/{unit}"
    cg = root / "cgroup" / cgroup.strip("/")
    cg.mkdir(parents=True)
    (root / "cgroup" / "cgroup.controllers").write_text("")
    pids = list(range(1000, 1000 + n))
    for pid in pids:
        d = proc / str(pid)
        d.mkdir()
        fields = ["S", "1"] + ["0"] * 17 + ["100"] + ["0"] * 30
        (d / "stat").write_text(f"{pid} (\x1b[31mhog) " + " ".join(fields) + "\n")
        (d / "cgroup").write_text(f"0::{cgroup}\n")
        (d / "cmdline").write_bytes(cmdline + b"%d\0" % pid)
    (cg / "cgroup.procs").write_text("\n".join(map(str, pids)) + "\n")
    systemctl = root / "systemctl"
    systemctl.write_text(f"#!/bin/sh\nprintf 'Id={unit}\\nActiveState=active\\n'\n")
    systemctl.chmod(systemctl.stat().st_mode | stat.S_IEXEC)
    (root / "run").mkdir()

    class Gpus:
        def read(self):  # type: ignore[no-untyped-def]
            return [{"index": 0}], {pids[0]: {0: 10}}, []

    return HostCollector(
        gpus=Gpus(),
        proc=ProcReader(str(proc), str(root / "cgroup")),
        units=UnitReader(str(systemctl), str(root / "run")),
    )


def test_many_long_cmdlines_in_one_unit_stay_within_the_snapshot_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A holder's unit with more processes than a snapshot lists, each with a long cmdline
    of control characters (six JSON bytes each): the process count is capped and said so,
    cmdlines past the host-text budget are cut short, and the whole snapshot stays
    within ``snapshot_bound()``."""
    for module in ("collector", "text"):  # each module that reads the limit
        monkeypatch.setattr(f"gpudash.collector.host.{module}.MAX_PROCS", 120)
    for module in ("collector", "procs", "text"):
        monkeypatch.setattr(f"gpudash.collector.host.{module}.CMDLINE_BUDGET", 64 * 1024)
    collector = _fake_host(tmp_path, 150, b"\x01\x02\xff" * 20000)
    snap = collector.sample()
    size = len(json.dumps(snap, ensure_ascii=False, separators=(",", ":")).encode())
    assert len(snap["procs"]) == 120 and "1000" in snap["procs"]  # the holder is listed
    assert any("30 processes of hog.service not listed" in e for e in snap["errors"])
    costs = sorted(
        len(json.dumps(p["cmdline"], ensure_ascii=False).encode()) - 2
        for p in snap["procs"].values()
    )
    assert costs[-1] <= CMDLINE_MAX
    assert sum(c for c in costs if c > CMDLINE_SHORT) <= 64 * 1024
    assert costs[0] <= CMDLINE_SHORT  # past the budget: cut short
    assert all(p["cmdline"].endswith(TRUNCATED) for p in snap["procs"].values())
    assert any("cut to" in e for e in snap["errors"])
    assert size <= snapshot_bound()
    decoded = SnapshotDecoder("h").feed(
        json.dumps({"k": "full", "s": snap}, ensure_ascii=False).encode()
    )
    assert {p.cmdline for p in decoded.processes} == {p["cmdline"] for p in snap["procs"].values()}


def test_snapshot_bound_is_a_few_mib() -> None:
    """The documented worst case of one full snapshot with the shipped limits."""
    assert 2 * 1024 * 1024 < snapshot_bound() <= 10 * 1024 * 1024


# ------------------------------------------- the login's cwd and environment are not code


async def test_queue_py_in_the_working_directory_is_not_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Local mode runs the collector's argv as a subprocess in gpudash's working directory:
    a ``queue.py`` there, a ``shutil.py`` on PYTHONPATH and a ``psutil.py`` in the user
    site-packages are never imported (the collector runs isolated, ``-I``)."""
    marker = tmp_path / "hijacked"
    here, path_dir, user_base = tmp_path / "cwd", tmp_path / "pythonpath", tmp_path / "userbase"
    user_site = user_base / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    for directory, module in (
        (here, "queue"),
        (path_dir, "shutil"),
        (user_site / "site-packages", "psutil"),
    ):
        directory.mkdir(parents=True)
        (directory / f"{module}.py").write_text(
            f"open({str(marker)!r}, 'a').write({module!r} + ' ')\n"
        )
    monkeypatch.chdir(here)
    source = LocalSource(
        "local", env={"PYTHONPATH": str(path_dir), "PYTHONUSERBASE": str(user_base)}
    )
    try:
        snap = await source.control.sample()
    finally:
        await source.close()
    assert snap.host == "local"
    assert not marker.exists(), f"imported: {marker.read_text()}"


# --------------------------------------------------- a uid with no passwd entry is a login


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None or not os.path.exists("/usr/bin/python3"),
    reason="needs root, setpriv and /usr/bin/python3 to run as another uid",
)
def test_collector_runs_as_a_uid_without_a_passwd_entry() -> None:
    uid = 43210
    with pytest.raises(KeyError):
        pwd.getpwuid(uid)
    proc = collector_run.start(
        python="/usr/bin/python3",  # pyenv's lives under /root, closed to other uids
        prefix=["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"],
        cwd="/",
        with_pynvml=True,
    )
    try:
        line = collector_run.read_line(proc)
    finally:
        collector_run.stop(proc)
    snap = SnapshotDecoder("h").feed(line)
    assert not snap.can_act
    assert snap.cannot_act_reason is not None and "uid 43210" in snap.cannot_act_reason
