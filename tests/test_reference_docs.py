"""The docs say what the code does: the reference pages and the man page are generated from
the code (``python -m gpudash.cli.reference``) and must equal what it generates now; the
README stays short and keeps its two set-up commands; every link between the pages lands.

Seen before (issue 33, item 13): a 1000-line README whose key table, JSON schema and metric
list were copied by hand, and nothing checked them.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpudash.cli.args import SUBCOMMANDS, build_parser
from gpudash.cli.reference import COMMAND, PAGES
from gpudash.cli.reference.manpage import roff
from gpudash.cli.reference.markdown import shown_keys
from gpudash.cli.reference.schema import UndescribedField, check, documents, fields_of
from gpudash.ui.bindings import KEYS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
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


# --- the README ----------------------------------------------------------------------------

def test_the_readme_is_short_and_keeps_the_two_set_up_commands() -> None:
    text = README.read_text()
    assert len(text.splitlines()) < 200
    setup = text.split("## Set-up (fresh machine, two commands)", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", setup, re.DOTALL)
    assert blocks == ["bash scripts/bootstrap.sh && .venv/bin/gpudash --demo\n",
                      "bash tests/run.sh\n"]
    assert "exec bash tests/run.sh" in (ROOT / ".ci" / "run").read_text()
    for command in SUBCOMMANDS:  # the cheat sheet names every subcommand
        assert f"`gpudash {command}" in text, command


def _known_keys() -> set[str]:
    out = set()
    for k in KEYS:
        for keys in (k.keys, k.help_keys):
            for key in re.split(r",| or ", shown_keys(keys) if keys else ""):
                out.add(key.strip().lower())
    return out - {""}


def _key_table_tokens(text: str) -> set[str]:
    """The backticked keys of the first column of the Markdown tables in ``text``."""
    out = set()
    for line in text.splitlines():
        if line.startswith("| `"):
            first = line.split(" | ", 1)[0]
            out |= {t.lower() for t in re.findall(r"`([^`]+)`", first)}
    return out


@pytest.mark.parametrize("where", ["README.md", "docs/GUIDE.md"])
def test_the_keys_written_by_hand_are_the_dashboards_keys(where: str) -> None:
    text = (ROOT / where).read_text()
    if where == "README.md":
        table = text.split("\nKeys (", 1)[1].split("\nCommands (", 1)[0]
    else:
        table = text.split("\n## Keys\n", 1)[1].split("\n## ", 1)[0]
    tokens = _key_table_tokens(table)
    assert {"r", "o", "q"} <= tokens
    unknown = tokens - _known_keys()
    assert not unknown, f"{where} names keys the dashboard does not have: {sorted(unknown)}"


# --- links -------------------------------------------------------------------------------

def _pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[`*]", "", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    out, seen = set(), dict[str, int]()
    for line in re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL).splitlines():
        if m := re.match(r"#{1,6} (.+)", line):
            slug = _slug(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_lands_on_a_file_and_heading_that_exist(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # a URL: not checked offline
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{target}: no such heading in {file.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)
