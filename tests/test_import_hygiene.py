"""The domain knows nothing of Textual: checked statically and at run time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOMAIN = ["model", "source", "triage", "engine", "demo", "jsonfmt", "audit", "textreport",
          "untrusted", "units", "collector", "transport", "logfile", "controller",
          "cli.contract", "cli.terminal", "cli.act", "cli.exporter", "exporter", "crashloop"]


LINT_IMPORTS = "from importlinter.cli import lint_imports_command; lint_imports_command()"


def test_import_linter_contract_holds() -> None:
    r = subprocess.run([sys.executable, "-c", LINT_IMPORTS, "--no-cache"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_domain_modules_import_without_textual_or_rich() -> None:
    code = (
        "import importlib, sys\n"
        f"for m in {DOMAIN!r}:\n"
        "    try:\n"
        "        importlib.import_module('gpudash.' + m)\n"
        "    except ModuleNotFoundError as e:\n"
        "        if e.name != 'gpudash.' + m: raise\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('textual', 'rich'))\n"
        "print(','.join(bad))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""
