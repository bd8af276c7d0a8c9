"""The node-local exporter as it ships (contrib/systemd/): its unit is scored by systemd's
own ``systemd-analyze security`` (offline: no host needed) at the exposure the docs state,
its defaults file's ARGS are what ``gpudash exporter`` accepts, and the documented scrape
config and alert rules pass ``promtool check config``. tests/test_lab_prom_fleet.py runs
the unit itself on three lab hosts.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from gpudash.cli.args import build_parser

ROOT = Path(__file__).resolve().parent.parent
UNIT = ROOT / "contrib" / "systemd" / "gpudash-exporter.service"
DEFAULTS = ROOT / "contrib" / "systemd" / "gpudash-exporter.default"
DOC = ROOT / "docs" / "EXPORTER.md"
SCRAPE = ROOT / "docs" / "prometheus" / "gpudash-scrape.yml"


def offline_exposure(unit: Path) -> tuple[float, str]:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("no systemd-analyze")
    cp = subprocess.run([tool, "security", "--offline=true", "--no-pager", str(unit)],
                        capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", cp.stdout)
    if m is None and "--offline" in cp.stderr:
        pytest.skip(f"systemd-analyze too old for --offline: {cp.stderr.strip()}")
    assert m, cp.stdout[-2000:] + cp.stderr
    return float(m.group(1)), cp.stdout


def test_the_unit_scores_what_the_docs_say_and_no_worse_than_ok() -> None:
    score, report = offline_exposure(UNIT)
    assert score <= 2.5, report  # systemd's "OK" band starts below 4.9; hold it here
    stated = re.search(r"exposure (?:level |score )?of ([0-9.]+)", DOC.read_text())
    assert stated, "docs/EXPORTER.md states no exposure score for the unit"
    assert float(stated.group(1)) == score, (stated.group(0), score)
    # what it needs and nothing more
    for held in ("CapabilityBoundingSet=~CAP_KILL", "CapabilityBoundingSet=~CAP_SYS_ADMIN",
                 "CapabilityBoundingSet=~CAP_(DAC_*|FOWNER|IPC_OWNER)"):
        assert f"✓ {held}" in report, held


def test_a_unit_without_its_hardening_scores_worse(tmp_path: Path) -> None:
    """The score is the unit's, not systemd-analyze's floor."""
    bare = tmp_path / "gpudash-exporter.service"
    bare.write_text("[Service]\nExecStart=/usr/local/bin/gpudash exporter\n")
    score, _ = offline_exposure(UNIT)
    assert offline_exposure(bare)[0] > score + 5


def test_the_defaults_files_args_are_what_the_exporter_accepts() -> None:
    text = DEFAULTS.read_text()
    args = [m for m in re.findall(r'^#?ARGS="([^"]*)"$', text, re.M)]
    assert len(args) == 2, text  # the loopback one, and the commented off-loopback one
    for line in args:
        ns = build_parser("exporter").parse_args(shlex.split(line))
        assert ns.listen is not None
    unit = UNIT.read_text()
    assert "ExecStart=/usr/local/bin/gpudash exporter $ARGS\n" in unit
    assert "EnvironmentFile=-/etc/default/gpudash-exporter\n" in unit
    # the unit's own default is the loopback one the defaults file ships
    assert f'Environment="ARGS={args[0]}"' in unit


def test_the_documented_scrape_config_and_rules_pass_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("no promtool (apt-get install prometheus; tests/run.sh does)")
    for f in SCRAPE.parent.iterdir():
        shutil.copy(f, tmp_path / f.name)
    cp = subprocess.run([promtool, "check", "config", str(tmp_path / SCRAPE.name)],
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "SUCCESS: 4 rules found" in cp.stdout  # the alert rules
    assert "SUCCESS: 19 rules found" in cp.stdout  # the recording rules --prometheus reads


def test_every_file_the_set_up_installs_ships() -> None:
    """docs/EXPORTER.md's commands and the unit's header name files of contrib/systemd."""
    named = set(re.findall(r"contrib/systemd/[\w.-]+", DOC.read_text() + UNIT.read_text()))
    assert {"contrib/systemd/gpudash-exporter.service",
            "contrib/systemd/gpudash-exporter.default",
            "contrib/systemd/gpudash-exporter.sysusers"} <= named
    for rel in named:
        assert (ROOT / rel).is_file(), rel
    user = re.search(r"^User=(\S+)$", UNIT.read_text(), re.M)
    assert user and f"u {user.group(1)} " in (ROOT / "contrib/systemd/"
                                               "gpudash-exporter.sysusers").read_text()
    assert "DynamicUser=yes" not in UNIT.read_text()  # dbus-daemon refuses them
