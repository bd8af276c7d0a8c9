"""The reference pages, generated from the code: the keys (``ui.bindings``), the command
line (the parsers of ``cli.args``), the ``snapshot --json`` schema and the exporter's
metrics, and the man page. ``python -m gpudash.cli.reference`` writes them;
tests/test_reference_docs.py fails when a committed page differs from what the code
generates now.

Not part of the ``gpudash`` command: a tool for whoever changes the code (it imports the
dashboard's key table, so Textual).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

COMMAND = "python -m gpudash.cli.reference"
ROOT = Path(__file__).resolve().parents[3]  # the checkout (gpudash is installed editable)


def _keys() -> str:
    from gpudash.cli.reference.markdown import keys_page

    return keys_page()


def _cli() -> str:
    from gpudash.cli.reference.markdown import cli_page

    return cli_page()


def _json() -> str:
    from gpudash.cli.reference.schema import json_page

    return json_page()


def _metrics() -> str:
    from gpudash.cli.reference.metricsdoc import metrics_page

    return metrics_page()


def _man() -> str:
    from gpudash.cli.reference.manpage import man_page

    return man_page()


# path under the checkout -> what writes it
PAGES: dict[str, Callable[[], str]] = {
    "docs/reference/KEYS.md": _keys,
    "docs/reference/CLI.md": _cli,
    "docs/reference/JSON.md": _json,
    "docs/reference/METRICS.md": _metrics,
    "docs/gpudash.1": _man,
}


def stale(root: Path = ROOT) -> list[str]:
    """The pages whose committed text differs from what the code generates now."""
    out = []
    for path, make in PAGES.items():
        file = root / path
        if not file.is_file() or file.read_text(encoding="utf-8") != make():
            out.append(path)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 naming each page that differs")
    parser.add_argument("--root", type=Path, default=ROOT,
                        help=f"the checkout to write into (default {ROOT})")
    args = parser.parse_args(argv)
    if args.check:
        out = stale(args.root)
        for path in out:
            print(f"{path}: differs from the code; regenerate with `{COMMAND}`",
                  file=sys.stderr)
        return 1 if out else 0
    for path, make in PAGES.items():
        file = args.root / path
        file.parent.mkdir(parents=True, exist_ok=True)
        text = make()
        if not file.is_file() or file.read_text(encoding="utf-8") != text:
            file.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    return 0
