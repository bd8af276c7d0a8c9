"""The command line as a script would use it: real subprocesses, exit codes, JSON, signals.

The contract (docs/GUIDE.md, gpudash/cli/contract.py): stdout carries only the result; plan,
prompt, progress and errors go to stderr; every exit code is documented, interrupts too.
"""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support import SelfSteppingClock

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
    assert doc["schema"] == 3
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


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_or_sighup_at_the_prompt_is_a_cancel_too(sig: int) -> None:
    # SIGTERM (`timeout`, systemd, CI) or SIGHUP before anything was sent killed gpudash:
    # exit 143 or 129, not the documented 5 ("cancelled: nothing done").
    g = Interactive(*RECLAIM)
    g.wait_for_stderr("Proceed? [y/N]")
    g.proc.send_signal(sig)
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
    assert "declined: nothing done" in err
    assert audit_records() == []


def test_answering_yes_runs_the_plan() -> None:
    g = Interactive(*RECLAIM, "--term-timeout", "2")
    g.wait_for_stderr("Proceed? [y/N]")
    g.type("y\n")
    code, out, err = g.finish(within=40)
    assert code == 0, err
    assert "confirmed: " in out


class Reader:
    """An operator at the prompt, in-process: each answer comes after ``meanwhile`` ran
    (the host changing while the plan is read)."""

    def __init__(self, answers: list[bool], meanwhile: list[object]) -> None:
        self.answers, self.meanwhile = answers, meanwhile
        self.asked = 0

    def __call__(self, question: str = "") -> bool | None:
        change = self.meanwhile[self.asked] if self.asked < len(self.meanwhile) else None
        if callable(change):
            change()
        self.asked += 1
        return self.answers.pop(0)


def run_in_process(argv: list[str], reader: Reader, demo: object) -> tuple[int, str, str]:
    import io

    from gpudash.cli import act
    from gpudash.cli.args import parse
    from gpudash.cli.terminal import Terminal

    out, err = io.StringIO(), io.StringIO()
    term = Terminal(stdout=out, stderr=err)
    term.confirm = reader  # type: ignore[method-assign]
    _command, args = parse(argv)
    code = act.run_reclaim(args, demo, term)  # type: ignore[arg-type]
    return code, out.getvalue(), err.getvalue()


def in_another_terminal(work: Any) -> None:
    """Run ``work`` to its end in a loop of its own: the prompt runs inside the CLI's."""
    import asyncio
    import threading

    t = threading.Thread(target=asyncio.run, args=(work,))
    t.start()
    t.join()


def test_the_cli_acts_on_the_host_as_it_is_when_you_answer_and_asks_again_if_it_changed() -> None:
    import signal as sig

    from gpudash.demo.host import DemoHost

    demo = DemoHost(clock=SelfSteppingClock())
    worker = next(p for p in demo.snapshot().processes if p.cmdline.startswith("VLLM::Worker_TP"))

    def worker_dies() -> None:  # an operator in another terminal killed one worker
        in_another_terminal(demo.signal(worker.pid, worker.start_ticks, sig.SIGKILL))

    reader = Reader([True, True], [worker_dies])
    code, out, err = run_in_process([*RECLAIM, "--term-timeout", "1"], reader, demo)
    assert reader.asked == 2  # asked again: what would be sent had changed
    assert "The host changed while you read the plan:" in err
    changed = err.split("The host changed while you read the plan:", 1)[1]
    assert str(worker.pid) in changed.split("Proceed?", 1)[0]
    assert code == 0, err
    assert f"SIGTERM {worker.pid}" not in out  # the dead worker was not signalled


def test_a_host_that_keeps_changing_under_the_prompt_is_left_alone() -> None:
    import signal as sig

    from gpudash.demo.host import DemoHost

    demo = DemoHost(clock=SelfSteppingClock())
    workers = [p for p in demo.snapshot().processes if p.cmdline.startswith("VLLM::Worker_TP")]

    def dies(p: object) -> object:
        return lambda: in_another_terminal(
            demo.signal(p.pid, p.start_ticks, sig.SIGKILL))  # type: ignore[attr-defined]

    reader = Reader([True, True, True], [dies(w) for w in workers[:3]])
    code, out, err = run_in_process(RECLAIM, reader, demo)
    assert code == 5 and "the plan keeps changing; nothing done" in err
    assert out == "" and audit_records() == []


# --- interrupted while acting -----------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_interrupt_mid_action_reports_what_was_sent_and_audits_it(sig: int) -> None:
    # SIGHUP: the operator's SSH session dropped. It killed gpudash with no outcome record.
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


def gpudash_signalled_at(hook: str, sig: str, *args: str) -> subprocess.CompletedProcess[str]:
    """gpudash with ``sig`` arriving from outside exactly as an audit record is written
    (``hook``: intent or outcome): the narrowest windows of an action, made certain."""
    code = (
        "import os, signal, sys\n"
        "from gpudash.session import audit\n"
        f"real = audit.AuditTrail.{hook}\n"
        "def hooked(self, *a):\n"
        f"    os.kill(os.getpid(), signal.{sig})\n"
        "    return real(self, *a)\n"
        f"audit.AuditTrail.{hook} = hooked\n"
        "from gpudash.cli.main import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=60, env=os.environ.copy())


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_an_interrupt_while_the_intent_is_written_cancels_and_still_audits(sig: str) -> None:
    # Ctrl+C there said "interrupted twice" and exited 6 (one Ctrl+C, nothing sent), and
    # SIGTERM killed gpudash: either way the audit kept an intent without an outcome.
    r = gpudash_signalled_at("intent", sig, *RECLAIM, "--yes")
    assert r.returncode == 5, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and "twice" not in r.stderr
    assert "sent: nothing" in r.stdout
    intent, outcome = audit_records()
    assert outcome["record"] == "outcome" and outcome["id"] == intent["id"]
    assert outcome["interrupted"] is True and outcome["commands"] == []


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_an_interrupt_while_the_outcome_is_written_keeps_the_outcome_and_the_report(
    sig: str,
) -> None:
    # SIGTERM once the engine had finished (its handler gone) killed gpudash before the
    # outcome record and the report: everything was sent and nothing said so.
    r = gpudash_signalled_at("outcome", sig, *RECLAIM, "--yes", "--term-timeout", "1",
                             "--json")
    assert "Traceback" not in r.stderr
    report = json.loads(r.stdout)  # the whole report, on stdout
    assert report["verdict"] == "confirmed"
    assert r.returncode == 0, (r.returncode, r.stderr)  # it had finished: the verdict stands
    intent, outcome = audit_records()
    assert outcome["id"] == intent["id"] == report["id"] and outcome["verdict"] == "confirmed"


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_an_interrupt_while_gpudash_starts_is_exit_5_without_a_traceback(sig: str) -> None:
    # Ctrl+C in the first ~0.3 s (imports, argument parsing) printed a KeyboardInterrupt
    # traceback and exited 130, outside the documented codes. Made certain here: the
    # interrupt arrives while gpudash.cli.main is being imported.
    code = (
        "import builtins, os, signal, sys\n"
        "real = builtins.__import__\n"
        "def hooked(name, *a, **k):\n"
        "    if name == 'gpudash.cli.main':\n"
        f"        os.kill(os.getpid(), signal.{sig})\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = hooked\n"
        "from gpudash.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    r = subprocess.run([sys.executable, "-c", code, *RECLAIM, "--yes"], capture_output=True,
                       text=True, timeout=60, env=os.environ.copy())
    assert r.returncode == 5, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and "nothing done" in r.stderr
    assert r.stdout == "" and audit_records() == []


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
        (["snapshot", "--demo-speed", "5"], "--demo-speed is for --demo"),
        (["--demo", "--demo-speed", "0"], "must be 0.1 to 1000, not 0"),
        (["--demo", "--demo-speed", "inf"], "must be 0.1 to 1000, not inf"),
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


# --- every exit code, as documented ------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed on return: connecting is refused


SSH_ISOLATED = ("--ssh-config", os.devnull, "--known-hosts", os.devnull)


@pytest.mark.parametrize("command", [("snapshot",), ("reclaim", "--unit", "x", "--yes")])
def test_an_unreachable_host_is_exit_3_with_its_name(command: tuple[str, ...]) -> None:
    host = f"ssh://root@127.0.0.1:{closed_port()}"
    r = gpudash(command[0], host, *command[1:], *SSH_ISOLATED)
    assert r.returncode == 3, r.stderr
    assert f"{host}: cannot connect" in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == "" and audit_records() == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("command", [("snapshot",), ("reclaim", "--unit", "x", "--yes")])
def test_an_interrupt_while_a_host_hangs_is_exit_5_with_nothing_done(
    command: tuple[str, ...], sig: int,
) -> None:
    with socket.socket() as silent:  # accepts (the kernel does) and never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        host = f"ssh://root@127.0.0.1:{silent.getsockname()[1]}"
        proc = subprocess.Popen([sys.executable, "-m", "gpudash", command[0], host,
                                 *command[1:], *SSH_ISOLATED], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=os.environ.copy())
        time.sleep(3)  # imported, connecting, waiting for a banner that never comes
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 5, err
    assert "nothing" in err and "Traceback" not in err
    assert out == "" and audit_records() == []


def test_a_bug_is_exit_70_with_one_line_and_the_traceback_in_the_log() -> None:
    code = (
        "import sys\n"
        "import gpudash.render.textreport as t\n"
        "def broken(snap): raise RuntimeError('a bug for the test')\n"
        "t.snapshot_lines = broken\n"
        "from gpudash.cli.main import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    r = subprocess.run([sys.executable, "-c", code, "snapshot", "--demo"], capture_output=True,
                       text=True, timeout=60, env=os.environ.copy())
    assert r.returncode == 70, r.stderr
    log = state() / "gpudash.log"
    assert r.stderr.strip().splitlines() == [
        f"gpudash: internal error: RuntimeError: a bug for the test (traceback in {log})"]
    text = log.read_text()
    assert "Traceback" in text and "RuntimeError: a bug for the test" in text


def test_the_guide_and_help_document_exactly_the_exit_codes_gpudash_uses() -> None:
    from gpudash.cli.contract import EXIT_CODES_HELP, Exit

    guide = (Path(__file__).parents[1] / "docs" / "GUIDE.md").read_text()
    contract = guide.split("\n## The CLI contract", 1)[1].split("\n## ", 1)[0]
    table = {int(m) for m in re.findall(r"^\| *(\d+) *\|", contract, re.MULTILINE)}
    assert table == {int(e) for e in Exit}
    helped = {int(m) for m in re.findall(r"^ *(\d+)  ", EXIT_CODES_HELP, re.MULTILINE)}
    assert helped == {int(e) for e in Exit}
    for promise in ("stdout carries only the result", "stderr", "Interrupts", "SIGTERM"):
        assert promise in contract, promise


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


def test_starting_a_model_that_does_not_fit_is_refused_and_nothing_sent() -> None:
    # issue 19, item 2: no Fit line, `systemctl start` sent, vLLM's crash named nobody
    r = gpudash("start", "--demo", "--unit", "vllm-kimi-k25", "--yes")
    assert r.returncode == 2, r.stderr[-2000:]
    # issue 33, item 11: one line of ~1,100 characters named each process, never the
    # unit that owns them: the owners in the way come first, over several lines
    lines = r.stderr.splitlines()
    at = lines.index("gpudash: vllm-kimi-k25.service does not fit (nothing done; --force "
                     "starts it anyway):")
    assert lines[at + 1].startswith("  in the way: vllm-minimax-m25.service holds 92.5 GiB on "
                                    "GPU0, 94.5 GiB on each of GPU1-7; alice's "
                                    "session-4.scope holds 2.0 GiB on GPU0"), lines[at + 1]
    assert "  GPU0-6: needs 86.0 GiB, 1.1 GiB will be free on each" in lines
    assert "  alice's session-4.scope: alice's Jupyter kernel (pid 90211)" in lines
    assert max(len(line) for line in lines) < 300
    assert "systemctl start" not in r.stderr and audit_records() == []


def test_starting_a_model_while_the_memory_is_held_exits_1_with_the_log_line() -> None:
    r = gpudash("start", "--demo", "--unit", "vllm-kimi-k25", "--yes", "--force")
    assert r.returncode == 1, r.stderr[-2000:]
    assert "Fit: FORCED: started although it does not fit" in r.stderr
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


CSWAP = ("swap", "--demo", "--from-container", "vllm-embed")


def test_swap_from_a_container_on_the_demo_exits_0_with_both_phases_proven() -> None:
    r = gpudash(*CSWAP, "--to", "vllm-rerank", "--yes", "--json", "--term-timeout", "3")
    assert r.returncode == 0, r.stderr[-3000:]
    rec = json.loads(r.stdout)
    assert [(ph["name"], ph["confirmed"]) for ph in rec["phases"]] == [
        ("reclaim", True), ("start", True)]
    assert rec["serving"]["serving"] is True
    assert rec["serving"]["ready_url"] == "http://127.0.0.1:8003/health"  # the unit's port
    assert "$ docker stop -t 10 vllm-embed" in r.stderr
    assert "$ systemctl start vllm-rerank.service" in r.stderr


def test_swap_from_a_container_into_a_model_that_cannot_load_exits_1() -> None:
    r = gpudash(*CSWAP, "--to", "vllm-kimi-k25", "--yes", "--term-timeout", "3", "--force")
    assert r.returncode == 1, r.stderr[-3000:]
    assert "vllm-kimi-k25.service NOT serving: crashed" in r.stdout
    assert "log: ValueError: Free memory on device" in r.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("swap", "--demo", "--from", "vllm-minimax-m25", "--from-container", "vllm-embed",
          "--to", "vllm-rerank"), "not allowed with argument"),
        (("swap", "--demo", "--to", "vllm-rerank"), "--from"),
        (("swap", "--demo", "--from-container=-rf", "--to", "vllm-rerank"),
         "not a container name or id"),
        ((*CSWAP[:3], "nope", "--to", "vllm-rerank", "--yes"), "container nope is not known"),
    ],
)
def test_container_swap_usage_errors_exit_2(args: tuple[str, ...], message: str) -> None:
    r = gpudash(*args)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and r.stdout == ""


def test_leave_crashing_keeps_the_crash_looping_unit_for_inspection() -> None:
    r = gpudash("start", "--demo", "--unit", "vllm-kimi-k25", "--yes", "--leave-crashing",
                "--json", "--force")
    assert r.returncode == 1
    rec = json.loads(r.stdout)
    assert rec["serving"]["stopped"] is False
    assert "Free memory on device" in rec["serving"]["failure_line"]


def test_reclaim_waits_as_long_as_its_timeout_says() -> None:
    # --timeout 900 on reclaim gave up following the memory after 600 s, silently.
    from gpudash.cli.act import options_of
    from gpudash.cli.args import parse

    _c, args = parse([*RECLAIM, "--timeout", "900"])
    assert options_of(args).verify_timeout == 900
    _c, args = parse(["swap", "--demo", "--from", "a", "--to", "b", "--timeout", "3600"])
    opts = options_of(args)  # a swap's timeout is the loading's; its reclaim stays bounded
    assert opts.serve_timeout == 3600 and opts.verify_timeout == 600


def test_a_link_that_stays_down_is_exit_4_after_three_looks_and_nothing_is_resent() -> None:
    from gpudash.demo.host import DemoHost
    from gpudash.protocol.source import CommandResult, LinkLost

    class DropsAfterStop(DemoHost):
        """The link drops while `systemctl disable` runs and never comes back."""

        def __init__(self) -> None:
            super().__init__(clock=SelfSteppingClock())
            self.down = False
            self.sent: list[str] = []

        async def systemctl(self, verb: str, unit: str) -> CommandResult:
            self.sent.append(verb)
            if verb == "disable":
                self.down = True
                return CommandResult(("systemctl", verb, unit), None, "link lost")
            return await super().systemctl(verb, unit)

        async def sample(self):  # type: ignore[no-untyped-def]
            if self.down:
                raise LinkLost("demo-gpu01: link lost")
            return await super().sample()

    host = DropsAfterStop()
    code, out, err = run_in_process([*RECLAIM, "--json"], Reader([True], []), host)
    assert code == 4, err
    assert [f"({n}/3)" in err for n in (1, 2, 3)] == [True, True, True]
    assert host.sent == ["stop", "disable"]  # looked again three times, re-sent nothing
    report = json.loads(out)
    assert report["verdict"] == "unknown"
    assert report["sent"] == ["systemctl stop vllm-minimax-m25.service: exit 0",
                              "systemctl disable vllm-minimax-m25.service: no answer"]
    # an outcome record per look, as the dashboard writes (gpudash.session.history
    # counts the earlier ones as re-verifications): all of the one action
    intent, *outcomes = audit_records()
    assert len(outcomes) == 4 and {o["id"] for o in outcomes} == {intent["id"]}
    assert outcomes[-1]["verdict"] == "unknown"


@pytest.mark.parametrize(("flag", "enabled"), [((), True), (("--no-enable",), False),
                                               (("--enable",), True)])
def test_a_swap_leaves_the_new_unit_enabled_as_the_old_one_was(flag: tuple[str, ...],
                                                              enabled: bool) -> None:
    # MiniMax is enabled: a swap that left Kimi disabled brought up no model after a reboot
    r = gpudash(*SWAP, *flag, "--yes", "--json")
    assert r.returncode == 0, r.stderr
    assert ("$ systemctl enable vllm-kimi-k25.service" in r.stderr) is enabled, r.stderr
    sent = json.loads(r.stdout)["sent"]
    assert any(s.startswith("systemctl enable vllm-kimi-k25") for s in sent) is enabled


@pytest.mark.parametrize("stdin", ["", None])
def test_the_dashboard_without_a_terminal_says_what_to_run_and_exits_2(stdin: str | None) -> None:
    # issue 33, item 12: `gpudash --demo </dev/null` (cron, a pipe, a script's mistake)
    # wrote terminal escape codes and exited 0 silently; once it printed a traceback
    r = subprocess.run([sys.executable, "-m", "gpudash", "--demo"], capture_output=True,
                       text=True, timeout=60, stdin=subprocess.DEVNULL if stdin is None else None,
                       input=stdin, env=os.environ.copy())
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""  # no escape codes where nobody can see them
    assert "the dashboard needs a terminal" in r.stderr and "snapshot --json" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("argv", [
    ("reclaim", "--demo", "--unit", "vllm-minimax-m25"),
    ("swap", "--demo", "--from", "vllm-minimax-m25", "--to", "vllm-kimi-k25"),
])
def test_a_dry_run_prints_its_plan_on_stdout_and_sends_nothing(argv: tuple[str, ...]) -> None:
    # issue 33, item 7: `reclaim --dry-run` did not exist
    r = gpudash(*argv, "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "$ systemctl stop vllm-minimax-m25.service" in r.stdout, r.stdout
    assert "--dry-run: nothing sent" in r.stderr and "Proceed?" not in r.stderr
    assert audit_records() == []  # nothing planned to be sent: nothing audited
    j = gpudash(*argv, "--dry-run", "--json")
    doc = json.loads(j.stdout)
    assert doc["dry_run"] is True and doc["action"] == argv[0]
    assert any("systemctl stop" in line for line in doc["plan"])
    assert audit_records() == []


def test_snapshot_help_names_the_schema_it_prints() -> None:
    # issue 33, item 7: `snapshot --help` said schema 1; the output is schema 2
    from gpudash.render.jsondoc import SCHEMA

    r = gpudash("snapshot", "--help")
    assert f"schema {SCHEMA}" in " ".join(r.stdout.split()), r.stdout
    doc = json.loads(gpudash("snapshot", "--demo", "--json").stdout)
    assert doc["schema"] == SCHEMA


@pytest.mark.parametrize(("argv", "speed"), [
    (["--demo"], 1.0),  # the dashboard: the incident as it happens
    (["--demo", "--demo-speed", "10"], 10.0),  # a presenter's, or a test's, faster one
    (["snapshot", "--demo", "--demo-speed", "0.5"], 0.5),
])
def test_demo_speed_is_how_fast_the_demo_hosts_clock_runs(argv: list[str], speed: float) -> None:
    from gpudash.cli.args import parse
    from gpudash.cli.main import open_sources
    from gpudash.domain.clock import ScaledClock

    _command, args = parse(argv)
    [demo] = open_sources(args)
    clock = demo.sim_clock  # type: ignore[attr-defined]
    assert isinstance(clock, ScaledClock) and clock.speed == speed
    # a command that acts plays it at 20x unless told
    [acting] = open_sources(args, demo_speed=20.0)
    assert acting.sim_clock.speed == (speed if "--demo-speed" in argv else 20.0)  # type: ignore[attr-defined]
