"""The unit lint knows vllm #48966 (issue 34): when its EngineCore dies, vLLM's API server
exits 0 (fix PR #52178 still open), so a vLLM unit with Restart=on-failure is never
restarted; ``fix`` offers Restart=always bounded by a start limit.

Seen before: a vLLM unit with Restart=on-failure, KillMode=mixed and a start limit was
linted clean, and `gpudash fix` said "nothing to fix": the server stayed down after its
engine died, with systemd reporting a clean stop.
"""

from __future__ import annotations

import asyncio
import io

import pytest
from support import SelfSteppingClock

from gpudash.cli.args import parse
from gpudash.cli.fix import run_fix
from gpudash.cli.terminal import Terminal
from gpudash.demo.host import MINIMAX, DemoHost
from gpudash.domain.lint import lint_unit
from gpudash.domain.model import Unit

VLLM = "/opt/v/bin/vllm serve /models/llama --port 8000"
SGLANG = "/opt/s/bin/python3 -m sglang.launch_server --model-path /m --port 30000"


def unit(**kw: object) -> Unit:
    """A unit the lint finds nothing else in: KillMode=mixed, restarts 10 s apart, at
    most 5 in 10 minutes."""
    base = dict(name="vllm.service", active_state="active", restart="on-failure",
                kill_mode="mixed", timeout_stop_s=120.0, restart_s=10.0,
                start_limit_interval_s=600.0, start_limit_burst=5, exec_start=VLLM)
    base.update(kw)
    return Unit(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("restart", ["on-failure", "on-abnormal", "on-abort", "on-watchdog"])
def test_a_vllm_unit_that_skips_clean_exits_is_told_it_will_not_come_back(
        restart: str) -> None:
    [f] = lint_unit(unit(restart=restart))
    assert f.setting == f"Restart={restart}"
    assert "exits 0 when its engine dies" in f.why and "#48966" in f.why, f.why
    assert f.fix == (("Service", "Restart", "always"),
                     ("Unit", "StartLimitIntervalSec", "600s"),
                     ("Unit", "StartLimitBurst", "5"))


def test_restart_always_with_a_limit_and_other_servers_are_not_told() -> None:
    assert lint_unit(unit(restart="always")) == ()
    assert lint_unit(unit(restart="no")) == ()  # nobody asked for a restart
    # SGLang exits non-zero when a scheduler dies: on-failure restarts it
    assert lint_unit(unit(exec_start=SGLANG)) == ()
    # a unit that holds GPU memory but is no vLLM
    assert lint_unit(unit(exec_start="/usr/bin/python3 train.py"), holds_gpu_memory=True) == ()
    # vLLM started through a shell that execs it is still vLLM
    [f] = lint_unit(unit(exec_start=f"/bin/sh -c 'exec {VLLM}'"))
    assert f.setting == "Restart=on-failure"


def test_the_start_limit_written_is_one_a_crash_loop_reaches() -> None:
    # 5 starts 3 minutes apart never fall within 10 minutes: the limit would never stop
    # a crash loop; the fix widens the interval instead
    [f] = lint_unit(unit(restart_s=180.0, start_limit_interval_s=3600.0))
    assert ("Unit", "StartLimitIntervalSec", "1800s") in f.fix
    fixed = unit(restart="always", restart_s=180.0, start_limit_interval_s=1800.0)
    assert lint_unit(fixed) == ()


def _fix(demo: DemoHost, *argv: str) -> tuple[int, str, str]:
    _cmd, args = parse(["fix", "--demo", "--unit", "vllm-minimax-m25", *argv])
    out, err = io.StringIO(), io.StringIO()
    code = run_fix(args, demo, Terminal(out, err, io.StringIO()))
    return code, out.getvalue(), err.getvalue()


def test_fix_writes_restart_always_with_its_limit_and_proves_it() -> None:
    demo = DemoHost(clock=SelfSteppingClock())
    sim = demo.units[MINIMAX]
    sim.restart, sim.kill_mode, sim.restart_sec = "on-failure", "mixed", 10.0
    sim.start_limit_interval_s, sim.start_limit_burst = 600.0, 5
    code, out, err = _fix(demo, "--dry-run")
    assert code == 0, err
    assert "+Restart=always" in out and "+StartLimitIntervalSec=600s" in out, out
    assert "+StartLimitBurst=5" in out
    assert "Restart, StartLimitBurst, StartLimitIntervalSec: in force at once" in out, out
    code, out, err = _fix(demo, "--yes")
    assert code == 0, err + out  # proven: systemctl show reports Restart=always
    u = asyncio.run(demo.sample()).unit(MINIMAX)
    assert u is not None and u.restart == "always"
    text = asyncio.run(demo.unit_text(MINIMAX))
    assert "Restart=on-failure" in text and "Restart=always" in text  # its file, then ours
    code, _out, err = _fix(demo, "--revert", "--yes")
    assert code == 0, err
    assert asyncio.run(demo.sample()).unit(MINIMAX).restart == "on-failure"  # type: ignore[union-attr]
