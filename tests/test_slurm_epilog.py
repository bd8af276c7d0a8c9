"""``gpudash reap --slurm-epilog`` without a Slurm: what it reads of slurmd's environment,
what it refuses, and how it drains. scontrol here is a script that records its argv (the
layer below the one tested); tests/test_lab_slurm.py runs the epilog under a real slurmd."""

from __future__ import annotations

import argparse
import os
import stat
from pathlib import Path

import pytest

from gpudash.cli import epilog
from gpudash.cli.contract import Exit
from gpudash.cli.main import main
from gpudash.cli.terminal import Terminal
from gpudash.domain.owners import OwnerRef


def test_the_job_and_its_gpus_come_from_slurmds_environment() -> None:
    assert epilog.job_of({"SLURM_JOB_ID": "42", "SLURM_JOB_GPUS": "3,1"}) == ("42", (1, 3))
    assert epilog.job_of({"SLURM_JOB_ID": "42"}) == ("42", ())
    for bad in ({}, {"SLURM_JOB_ID": "4 2"}, {"SLURM_JOB_ID": "$(reboot)"},
                {"SLURM_JOB_ID": "42", "SLURM_JOB_GPUS": "gpu:0"}):
        with pytest.raises(epilog.EpilogError):
            epilog.job_of(bad)


def test_outside_an_epilog_it_refuses_and_does_nothing(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert main(["reap", "--slurm-epilog"]) == Exit.USAGE
    assert "SLURM_JOB_ID is not set" in capsys.readouterr().err
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    assert main(["reap", "--slurm-epilog", "--demo"]) == Exit.USAGE
    assert "no HOST, no --demo" in capsys.readouterr().err
    # a job without GPUs on this node left no GPU memory: nothing to do, success
    monkeypatch.delenv("SLURM_JOB_GPUS", raising=False)
    assert main(["reap", "--slurm-epilog"]) == Exit.OK
    assert "Slurm job 7: no GPUs on this node: nothing to reap" in capsys.readouterr().err


def test_a_job_id_must_be_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["reap", "--job", "12;reboot", "--demo"])
    assert exc.value.code == Exit.USAGE
    assert "not a Slurm job id" in capsys.readouterr().err


def _scontrol(tmp_path: Path, rc: int = 0) -> Path:
    log = tmp_path / "argv"
    tool = tmp_path / "bin" / "scontrol"
    tool.parent.mkdir()
    tool.write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done >{log}\n'
                    f'[ {rc} = 0 ] || echo "slurm_update error: Invalid node name" >&2\n'
                    f"exit {rc}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return log


def test_memory_not_back_drains_the_node_with_gpudashs_one_line_reason(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _scontrol(tmp_path)
    env = {"PATH": str(tmp_path / "bin"), "SLURMD_NODENAME": "node7"}
    code = epilog.verdict(Exit.NOT_FREED, "42", Terminal(), env)
    assert code == Exit.NOT_FREED  # non-zero: Slurm keeps the job's GPUs from the next one
    argv = log.read_text().splitlines()
    assert argv[:3] == ["update", "NodeName=node7", "State=DRAIN"]
    # quoted as every drain is: scontrol takes the pair off (tests/test_lab_slurm.py (c))
    assert argv[3] == 'Reason="gpudash: job 42 left GPU memory: not back after the reap"'
    assert "drained node7" in capsys.readouterr().err
    assert epilog.verdict(Exit.OK, "42", Terminal(), env) == Exit.OK  # no drain
    assert len(log.read_text().splitlines()) == 4


def test_a_drain_that_fails_is_said_and_the_exit_stays_non_zero(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _scontrol(tmp_path, rc=1)
    env = {"PATH": str(tmp_path / "bin"), "SLURMD_NODENAME": "node7"}
    assert epilog.verdict(Exit.UNKNOWN, "42", Terminal(), env) == Exit.UNKNOWN
    assert "could not drain node7: scontrol said: slurm_update error" in capsys.readouterr().err
    nowhere = {"PATH": str(tmp_path / "empty"), "SLURMD_NODENAME": "node7"}
    if not any(os.access(os.path.join(d, "scontrol"), os.X_OK) for d in epilog.TOOL_DIRS):
        assert not epilog.drain("42", "x", Terminal(), nowhere)
        assert "no scontrol found" in capsys.readouterr().err


def test_prepare_sets_the_jobs_leftovers_and_no_prompt() -> None:
    args = argparse.Namespace(hosts=[], hosts_file=None, demo=False, yes=False)
    assert epilog.prepare(args, {"SLURM_JOB_ID": "9", "SLURM_JOB_GPUS": "0,1"}) == ("0", "1")
    assert (args.yes, args.owner, args.gpus) == (True, OwnerRef("slurm job", "9"), (0, 1))
