"""Audit or nothing: no command or signal is sent unless the intent record is on disk,
whole. Reproduced on a real full disk (a tmpfs of a few pages mounted for the test), by
the CLI as a real process, by the dashboard's controller and by the dashboard itself;
and who the operator is, from the kernel's login uid rather than the environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import stepped

from gpudash.demo.host import MINIMAX, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.engine import ActionKind, ExecOptions, plan_action
from gpudash.session import audit
from gpudash.session.controller import ActionController

UNIT = "vllm-minimax-m25"


def need_root(what: str) -> None:
    if os.geteuid() != 0:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"required under CI=true: root ({what})", pytrace=False)
        pytest.skip(f"needs root: {what}")


@contextlib.contextmanager
def tiny_disk(where: Path, size: str = "32k") -> Iterator[Path]:
    """A real filesystem of ``size`` mounted at ``where`` (a tmpfs), unmounted after."""
    need_root("mounting a tmpfs")
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs",
                    str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path) -> Path:
    """Fill ``disk`` to the last byte; returns the filler (delete it to make room)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                if os.write(fd, b"\0" * 4096) < 4096:
                    break
            except OSError:
                break
    finally:
        os.close(fd)
    return filler


def gpudash(*args: str, state: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    return subprocess.run([sys.executable, "-m", "gpudash", *args], capture_output=True,
                          text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)


def test_reclaim_on_a_full_disk_is_refused_and_sends_nothing(tmp_path: Path) -> None:
    # before: it warned twice, reclaimed, exited 0, and no record existed
    with tiny_disk(tmp_path / "disk") as disk:
        (disk / "gpudash").mkdir(mode=0o700)
        fill(disk)
        r = gpudash("reclaim", "--demo", "--unit", UNIT, "--yes", "--json", state=disk)
        assert r.returncode == 7, r.stderr
        assert r.stdout == ""  # no report: nothing was done
        assert "refused: the audit record could not be written" in r.stderr
        assert "No space left on device" in r.stderr and "--no-audit" in r.stderr
        assert "nothing was sent" in r.stderr


def test_no_audit_acts_anyway_and_the_report_says_it_was_not_audited(tmp_path: Path) -> None:
    with tiny_disk(tmp_path / "disk") as disk:
        (disk / "gpudash").mkdir(mode=0o700)
        fill(disk)
        r = gpudash("reclaim", "--demo", "--unit", UNIT, "--yes", "--json", "--no-audit",
                    "--term-timeout", "1", state=disk)
        assert r.returncode in (0, 1), r.stderr  # acted (the verdict is the demo's)
        report = json.loads(r.stdout)
        assert report["audited"] is False
        assert any("not audited (--no-audit)" in w for w in report["warnings"])
        assert "acting without an audit record (--no-audit)" in r.stderr


async def test_the_dashboards_controller_refuses_without_its_intent_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    with tiny_disk(tmp_path / "disk") as disk:
        monkeypatch.setenv("XDG_STATE_HOME", str(disk))
        (disk / "gpudash").mkdir(mode=0o700)
        fill(disk)
        demo = DemoHost(clock=SteppedClock())
        plan = plan_action(await demo.sample(), ActionKind.RECLAIM, unit=UNIT)
        controller = ActionController(ExecOptions(term_timeout=1.0, poll=0.1,
                                                  verify_timeout=5.0))
        errors: list[str] = []
        running = controller.begin(plan, 0, act=True)
        outcome = await stepped(demo, controller.run(running, demo, lambda p: None,
                                                     errors.append))
        report, error = outcome.report, outcome.error
        assert report is None and error is not None
        assert error.startswith("refused: the audit record could not be written")
        assert demo.units[MINIMAX].active  # nothing was sent
        assert "No space left" in error and errors == []  # said once: in the refusal
        controller.finished(0, report, error)
        assert controller.shown is not None and controller.shown.error == error


async def test_the_dashboard_shows_the_refusal(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from test_ui import log_text, make_app, select, wait_for

    from gpudash.ui.screens import ConfirmModal

    with tiny_disk(tmp_path / "disk") as disk:
        monkeypatch.setenv("XDG_STATE_HOME", str(disk))
        (disk / "gpudash").mkdir(mode=0o700)
        fill(disk)
        demo = DemoHost(clock=SteppedClock(), release_delay=2)
        app = make_app(demo)
        async with app.run_test(size=(120, 35)) as pilot:
            await select(pilot, app, f"u:{MINIMAX}")
            await pilot.press("r")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal) and app.screen.armed)
            await pilot.press("y")
            # refused before anything is sent: no simulated time passes for it
            await wait_for(pilot, lambda: "refused" in log_text(app), within=20)
            assert demo.units[MINIMAX].active
            assert any("refused: the audit record" in n.message for n in app._notifications)


def test_a_record_cut_short_by_a_full_disk_never_merges_with_the_next(tmp_path: Path) -> None:
    # before: os.write's short count was not checked: the cut record raised nothing and
    # the next one was glued to its half
    with tiny_disk(tmp_path / "disk") as disk:
        path = disk / "gpudash" / "audit.jsonl"
        audit.write({"record": "intent", "n": 1}, path)  # the file ends inside a page
        filler = fill(disk)
        big = {"record": "intent", "n": 2, "plan": ["x" * 100] * 80}  # ~8 KiB: a page more
        with pytest.raises(OSError, match="No space left on device"):
            audit.write(big, path)
        filler.unlink()
        audit.write({"record": "outcome", "n": 3}, path)
        lines = path.read_bytes().split(b"\n")
        assert json.loads(lines[0])["n"] == 1
        assert json.loads(lines[-2])["n"] == 3 and lines[-1] == b""  # a line of its own
        cut = [line for line in lines[1:-2] if line]
        assert len(cut) == 1 and cut[0].startswith(b'{"record": "intent", "n": 2')


def operator_of(*, loginuid: int | None, env: dict[str, str]) -> dict[str, object]:
    """``audit.operator()`` in a real process whose login uid is ``loginuid``."""
    code = "import json; from gpudash.session import audit; print(json.dumps(audit.operator()))"
    prefix = "" if loginuid is None else f"echo {loginuid} > /proc/self/loginuid && "
    r = subprocess.run(["sh", "-c", f'{prefix}exec "$0" -c "$1"', sys.executable, code],
                       capture_output=True, text=True, timeout=60, env=env)
    if r.returncode != 0 and "loginuid" in r.stderr:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"cannot set a login uid: {r.stderr}", pytrace=False)
        pytest.skip(f"cannot set a login uid here: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def test_the_operator_is_the_login_behind_sudo_not_the_environment() -> None:
    # before: getpass.getuser() (LOGNAME/USER first): "root" under sudo, and anyone's
    # choice through the environment
    need_root("setting a process's login uid")
    base = {k: v for k, v in os.environ.items() if k != "SUDO_USER"}
    lying = {**base, "LOGNAME": "mallory", "USER": "mallory"}
    fresh = Path("/proc/self/loginuid").read_text().strip() == str(audit.NO_LOGINUID)
    if fresh:  # a session with no login uid yet: set one, as pam_loginuid does at login
        who = operator_of(loginuid=65534, env=lying)
        assert who["operator"] == "nobody" and who["login_uid"] == 65534
    else:
        who = operator_of(loginuid=None, env=lying)
        assert who["login_uid"] is not None and who["operator"] != "mallory"
    assert who["effective_user"] == "root" and who["effective_uid"] == 0
    assert "mallory" not in json.dumps(who)
    if fresh:  # no login uid: sudo's SUDO_USER (only root's environment has it from sudo)
        who = operator_of(loginuid=None, env={**lying, "SUDO_USER": "alice"})
        assert who["operator"] == "alice" and who["sudo_user"] == "alice"


async def test_records_carry_the_login_and_the_effective_user(tmp_path: Path) -> None:
    demo = DemoHost()
    plan = plan_action(await demo.sample(), ActionKind.RECLAIM, unit=UNIT)
    trail = audit.AuditTrail(plan, 10.0, tmp_path / "a.jsonl")
    trail.intent()
    record = json.loads((tmp_path / "a.jsonl").read_text())
    assert {"operator", "login_uid", "sudo_user", "effective_user", "effective_uid"} <= set(
        record)
    assert record["effective_uid"] == os.geteuid()
