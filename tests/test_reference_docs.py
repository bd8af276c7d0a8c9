"""The docs say what the code does: the reference pages and the man page are generated from
the code (``python -m gpudash.cli.reference``) and must equal what it generates now.

Seen before (issue 33, item 13): a 1000-line README whose key table, JSON schema and metric
list were copied by hand, and nothing checked them.
"""

from __future__ import annotations

import difflib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpudash.cli.args import SUBCOMMANDS, build_parser
from gpudash.cli.reference import COMMAND, PAGES
from gpudash.cli.reference.manpage import roff
from gpudash.cli.reference.schema import UndescribedField, check, documents, fields_of

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


# --- generated pages ---------------------------------------------------------------------

@pytest.mark.parametrize("path", sorted(PAGES))
def test_the_committed_page_is_what_the_code_generates(path: str) -> None:
    file = ROOT / path
    assert file.is_file(), f"{path} is missing: generate it with `{COMMAND}` and commit it"
    committed, generated = file.read_text(encoding="utf-8"), PAGES[path]()
    if committed != generated:
        diff = list(difflib.unified_diff(committed.splitlines(), generated.splitlines(),
                                         f"{path} (committed)", f"{path} (from the code)",
                                         lineterm="", n=1))
        shown = "\n".join(diff[:40]) + ("\n…" if len(diff) > 40 else "")
        pytest.fail(f"{path} differs from the code: regenerate it with `{COMMAND}` and "
                    f"commit it\n{shown}")


def test_the_generator_writes_every_page_and_its_check_names_a_stale_one(tmp_path: Path
                                                                          ) -> None:
    env = {**os.environ, "COLUMNS": "40"}  # a narrow terminal changes nothing on a page

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gpudash.cli.reference", *args,
                               "--root", str(tmp_path)], capture_output=True, text=True,
                              timeout=120, env=env)

    r = run("--check")
    assert r.returncode == 1
    for path in PAGES:
        assert f"{path}: differs from the code; regenerate with `{COMMAND}`" in r.stderr
    assert run().returncode == 0
    for path in PAGES:
        assert (tmp_path / path).read_text() == (ROOT / path).read_text(), path
    assert run("--check").returncode == 0
    keys = tmp_path / "docs/reference/KEYS.md"
    keys.write_text(keys.read_text().replace("Stop unit", "Stop the unit"))
    r = run("--check")
    assert r.returncode == 1
    assert r.stderr.strip() == ("docs/reference/KEYS.md: differs from the code; "
                                f"regenerate with `{COMMAND}`"), r.stderr


def test_a_json_field_without_a_meaning_or_a_meaning_without_a_field_fails() -> None:
    docs = documents()
    check(fields_of(docs))  # as the code is: every field described
    docs[0]["hosts"][0]["gpus"][0]["fan_pct"] = 30
    with pytest.raises(UndescribedField, match=r"hosts\[\]\.gpus\[\]\.fan_pct: no meaning"):
        check(fields_of(docs))
    docs = documents()
    for gpu in docs[0]["hosts"][0]["gpus"]:
        del gpu["power_limit_w"]
    with pytest.raises(UndescribedField,
                       match=r"hosts\[\]\.gpus\[\]\.power_limit_w: described, not in"):
        check(fields_of(docs))


def test_every_command_and_option_is_on_the_cli_page_and_in_the_man_page() -> None:
    cli = (DOCS / "reference" / "CLI.md").read_text()
    man = (DOCS / "gpudash.1").read_text()
    for command in (None, *SUBCOMMANDS):
        parser = build_parser(command)
        assert f"## {parser.prog}\n" in cli, parser.prog
        assert f".SS {roff(parser.prog)}\n" in man or command is None, parser.prog
        for action in parser._actions:
            for option in action.option_strings:
                if option in ("-h", "--help") or action.help == "==SUPPRESS==":
                    continue
                assert f"`{option}" in cli or f", {option}" in cli, (parser.prog, option)
                assert roff(option) in man, (parser.prog, option)


def _groff() -> str | None:
    groff = shutil.which("groff")
    if groff is None and os.environ.get("CI") == "true":
        pytest.fail("groff is missing (tests/run.sh installs groff-base)")
    return groff


def test_the_man_page_renders_without_a_warning() -> None:
    groff = _groff()
    if groff is None:
        pytest.skip("no groff here (tests/run.sh installs groff-base)")
    page = str(DOCS / "gpudash.1")
    r = subprocess.run([groff, "-man", "-Tutf8", "-ww", "-z", page], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    r = subprocess.run([groff, "-man", "-Tascii", "-P", "-cbou", page], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for section in ("NAME", "SYNOPSIS", "OPTIONS", "COMMANDS", "KEYS", "EXIT STATUS",
                    "FILES"):
        assert f"\n{section}\n" in r.stdout, section
    text = " ".join(r.stdout.split())  # justified: words, not spaces
    for command in SUBCOMMANDS:
        assert f"gpudash {command} [-h]" in text, command
    assert "--accept-new-host-key, --no-accept-new-host-key" in text
