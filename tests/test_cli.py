"""The command line as a script would use it: real subprocesses, exit codes, JSON, signals.

The contract (README, gpudash/cli/contract.py): stdout carries only the result; plan,
prompt, progress and errors go to stderr; every exit code is documented, interrupts too.
"""

from __future__ import annotations

import json
import os
import pty
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

RECLAIM = ("reclaim", "--demo", "--unit", "vllm-minimax-m25")


def gpudash(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpudash", *args],
        capture_output=True, text=True, timeout=60, input=stdin, env=os.environ.copy(),
    )


def state() -> Path:
    return Path(os.environ["XDG_STATE_HOME"]) / "gpudash"


def audit_records(name: str = "audit-demo.jsonl") -> list[dict]:
    path = state() / name
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class Interactive:
    """gpudash with its stdin on a pseudo-terminal, as an operator at a prompt has it."""

    def __init__(self, *args: str) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpudash", *args], stdin=slave, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=os.environ.copy(),
        )
        os.close(slave)
        self.err = b""
        os.set_blocking(self.proc.stderr.fileno(), False)  # type: ignore[union-attr]

    def wait_for_stderr(self, text: str, within: float = 20.0) -> None:
        deadline = time.monotonic() + within
        while text.encode() not in self.err:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"no {text!r} on stderr: {self.err.decode()[-2000:]}")
            chunk = self.proc.stderr.read()  # type: ignore[union-attr]
            self.err += chunk or b""
            time.sleep(0.05)

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def finish(self, within: float = 20.0) -> tuple[int, str, str]:
        try:
            out, rest = self.proc.communicate(timeout=within)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("gpudash did not exit: " + self.err.decode()[-2000:]) from None
        finally:
            os.close(self.master)
        return self.proc.returncode, out.decode(), (self.err + (rest or b"")).decode()


# --- results on stdout, everything else on stderr -----------------------------------------


def test_snapshot_json_follows_schema_2() -> None:
    r = gpudash("snapshot", "--demo", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == 2
    (host,) = doc["hosts"]
    assert len(host["gpus"]) == 8
    g0 = host["gpus"][0]
    assert {"index", "uuid", "name", "memory_total_mib", "memory_used_mib"} <= set(g0)
    assert g0["memory_used_mib"] == 96801 and g0["memory_total_mib"] == 97887
    kernel = next(p for p in host["processes"] if p["pid"] == 90211)
    assert kernel["gpu_memory_mib"] == {"0": 2048} and kernel["flags"] == []
    unit = next(u for u in host["units"] if u["name"] == "vllm-minimax-m25.service")
    assert (unit["restart"], unit["kill_mode"], unit["n_restarts"]) == ("always", "process", 0)
    assert isinstance(unit["main_pid"], int)


def test_snapshot_text_names_units_and_warnings() -> None:
    r = gpudash("snapshot", "--demo")
    assert r.returncode == 0
    assert "vllm-minimax-m25.service" in r.stdout
    assert "Restart=always: killing the main PID respawns it" in r.stdout


def test_reclaim_prints_only_the_report_on_stdout_and_audits_intent_and_outcome() -> None:
    r = gpudash(*RECLAIM, "--yes")
    assert r.returncode == 0, r.stdout + r.stderr
    for i in range(8):
        assert f"GPU{i}: freed" in r.stdout
    assert "confirmed: " in r.stdout
    assert "ignored SIGTERM: escalated to SIGKILL" in r.stdout
    # the plan and the progress are for the operator's eyes: stderr
    assert "systemctl stop vllm-minimax-m25.service" in r.stderr
    assert "$ systemctl" not in r.stdout and ".. [" not in r.stdout
    # the demo touched nothing real: its records stay out of the real audit file
    assert audit_records("audit.jsonl") == []
    intent, outcome = audit_records()
    assert (intent["record"], outcome["record"]) == ("intent", "outcome")
    assert intent["id"] == outcome["id"] and intent["demo"] is True
    assert outcome["action"] == "reclaim" and outcome["confirmed"] is True
    assert len(outcome["gpus"]) == 8
    assert stat.S_IMODE((state() / "audit-demo.jsonl").stat().st_mode) == 0o600
    assert stat.S_IMODE(state().stat().st_mode) == 0o700


def test_reclaim_json_report_is_the_whole_stdout() -> None:
    r = gpudash(*RECLAIM, "--yes", "--json", "--term-timeout", "3")
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    assert any("-KILL after 3 s if alive" in line for line in rec["plan"])
    assert rec["confirmed"] is True and rec["verdict"] == "confirmed"
    assert all(g["confirmed"] for g in rec["gpus"])
    assert 90211 not in [t["pid"] for t in rec["targets"]]


def test_progress_in_a_pipe_is_a_line_per_change() -> None:
    r = gpudash(*RECLAIM, "--yes", "--term-timeout", "3")
    assert r.returncode == 0, r.stderr
    progress = [ln for ln in r.stderr.splitlines() if ln.startswith("  .. ")]
    assert len(progress) == len(set(progress)), progress  # no line twice in a row
    assert sum("to exit after TERM" in ln for ln in progress) == 1


def test_reclaim_without_yes_off_a_terminal_does_nothing_and_keeps_stdout_clean() -> None:
    r = gpudash(*RECLAIM, "--json", stdin="")
    assert r.returncode == 5
    assert "not a terminal and no --yes: nothing done" in r.stderr
    assert "systemctl stop vllm-minimax-m25.service" in r.stderr  # the plan was shown
    assert r.stdout == ""  # a redirect gets no half-written JSON, nor a prompt
    assert audit_records() == []


def test_piped_into_head_there_is_no_traceback() -> None:
    cmd = f"{sys.executable} -m gpudash snapshot --demo | head -1; " \
          f"{sys.executable} -m gpudash reclaim --demo --unit vllm-minimax-m25 --yes --json " \
          "--term-timeout 1 | head -c 10"
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60)
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr


# --- the prompt -------------------------------------------------------------------------


def test_ctrl_c_at_the_prompt_ends_at_once_with_nothing_done() -> None:
    g = Interactive(*RECLAIM)
    g.wait_for_stderr("Proceed? [y/N]")
    g.proc.send_signal(signal.SIGINT)  # what the terminal sends for Ctrl+C
    code, out, err = g.finish(within=10)
    assert code == 5, err
    assert "nothing done" in err and "Traceback" not in err
    assert out == "" and audit_records() == []


def test_answering_no_says_so_and_exits_5() -> None:
    g = Interactive(*RECLAIM)
    g.wait_for_stderr("Proceed? [y/N]")
    g.type("n\n")
    code, out, err = g.finish()
    assert code == 5
    assert "not confirmed: nothing done" in err
    assert audit_records() == []


def test_answering_yes_runs_the_plan() -> None:
    g = Interactive(*RECLAIM, "--term-timeout", "2")
    g.wait_for_stderr("Proceed? [y/N]")
    g.type("y\n")
    code, out, err = g.finish(within=40)
    assert code == 0, err
    assert "confirmed: " in out


# --- interrupted while acting -----------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_mid_action_reports_what_was_sent_and_audits_it(sig: int) -> None:
    # TERM -> KILL after 600 simulated s (30 s real): interrupt while waiting to escalate.
    g = Interactive(*RECLAIM, "--yes", "--term-timeout", "600")
    g.wait_for_stderr("to exit after TERM")
    g.proc.send_signal(sig)
    code, out, err = g.finish(within=15)
    assert code == 6, err
    assert "Traceback" not in err
    assert "interrupted before the outcome was verified" in out
    assert "sent: systemctl stop vllm-minimax-m25.service: exit 0" in out
    assert "SIGKILL" not in out  # the escalation was dropped, and the report says what went
    intent, outcome = audit_records()
    assert outcome["interrupted"] is True and outcome["verdict"] == "interrupted"
    assert outcome["id"] == intent["id"]
    assert [c["argv"][1] for c in outcome["commands"]] == ["stop", "disable"]
    assert {s["signal"] for s in outcome["signals"]} == {"SIGTERM"}


# --- arguments are checked before anything is done ---------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([*RECLAIM, "--unit", "nope", "--yes"], "not known"),
        ([*RECLAIM, "--unit", "session-4.scope", "--yes"], "not a system service"),
        (["--demo", "--interval", "0"], "must be >= 0.05"),
        ([*RECLAIM, "--yes", "--timeout", "0"], "--timeout: must be > 0"),
        ([*RECLAIM, "--yes", "--timeout", "-5"], "--timeout: must be > 0"),
        ([*RECLAIM, "--yes", "--timeout", "nan"], "--timeout: must be > 0"),
        ([*RECLAIM, "--yes", "--term-timeout", "0"], "--term-timeout: must be > 0"),
        (["snapshot", "--demo", "gpu01"], "--demo takes no HOST"),
        (["reclaim", "a", "b", "--unit", "x"], "one host at a time"),
    ],
)
def test_usage_errors_are_clear_exit_2_and_do_nothing(args: list[str], message: str) -> None:
    r = gpudash(*args)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert "Traceback" not in r.stderr
    assert r.stdout == ""
    assert audit_records() == []


def test_help_documents_every_exit_code() -> None:
    r = gpudash("reclaim", "--help")
    for code in ("0", "1", "2", "3", "4", "5", "6", "70"):
        assert f"\n {code:>2}  " in r.stdout, code


# --- the model swap ------------------------------------------------------------------------

SWAP = ("swap", "--demo", "--from", "vllm-minimax-m25", "--to", "vllm-kimi-k25")


def test_swap_on_the_demo_exits_0_with_both_phases_proven_and_learns_the_footprint() -> None:
    r = gpudash(*SWAP, "--yes", "--json", "--term-timeout", "3")
    assert r.returncode == 0, r.stderr[-3000:]
    rec = json.loads(r.stdout)
    assert [ph["name"] for ph in rec["phases"]] == ["reclaim", "start"]
    assert all(ph["confirmed"] for ph in rec["phases"])
    sv = rec["serving"]
    assert sv["serving"] is True and sv["ready_status"] == 200
    assert sv["ready_url"] == "http://127.0.0.1:8001/health"  # the unit's port, found on the host
    learned = json.loads((state() / "footprints-demo.json").read_text())
    assert set(learned["demo-gpu01"]["vllm-kimi-k25.service"]["mib_per_gpu"]) == {
        str(g) for g in range(8)}
    # the next swap checks the fit against what it learned
    again = gpudash(*SWAP, "--yes", "--term-timeout", "3")
    assert again.returncode == 0
    assert "Fit: fits: up to 86.0 GiB per GPU on 8 GPU(s)" in again.stderr


def test_starting_a_model_while_the_memory_is_held_exits_1_with_the_log_line() -> None:
    r = gpudash("start", "--demo", "--unit", "vllm-kimi-k25", "--yes")
    assert r.returncode == 1, r.stderr[-2000:]
    assert "NOT serving: crashed" in r.stdout
    assert "log: ValueError: Free memory on device" in r.stdout
    assert "was stopped: it was crash-looping" in r.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((*SWAP[:3], "x", "--to", "x"), "name the same unit"),
        (("swap", "--demo", "--from", "vllm-minimax-m25"), "--to"),
        (("start", "--demo", "--unit", "vllm-minimax-m25", "--yes"), "already active"),
    ],
)
def test_swap_and_start_usage_errors_exit_2(args: tuple[str, ...], message: str) -> None:
    r = gpudash(*args)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and r.stdout == ""


def test_leave_crashing_keeps_the_crash_looping_unit_for_inspection() -> None:
    r = gpudash("start", "--demo", "--unit", "vllm-kimi-k25", "--yes", "--leave-crashing",
                "--json")
    assert r.returncode == 1
    rec = json.loads(r.stdout)
    assert rec["serving"]["stopped"] is False
    assert "Free memory on device" in rec["serving"]["failure_line"]
