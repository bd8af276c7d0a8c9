"""gpudash's own drop-in: the one file ``gpudash fix`` writes, what goes in it, and how
the unit's configuration reads with it (the preview the operator confirms).

The file is ``/etc/systemd/system/UNIT.d/50-gpudash.conf``: for a template instance
``foo@bar.service`` that is ``foo@bar.service.d/``, the instance's own directory, which
systemd reads after the template's (``foo@.service.d/``). Nothing else is ever written or
removed: the operator's drop-ins are theirs, and ``--revert`` removes this file alone.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from gpudash.domain.lint import Finding

DROP_IN_DIR = "/etc/systemd/system"
DROP_IN_NAME = "50-gpudash.conf"
HEADER = "# Written by gpudash fix: what removes the unit lint's findings. " \
    "`gpudash fix --revert` removes this file."
# Settings systemd reads when the service next stops or starts: a running unit keeps
# running with its old ones until then. The start limits count from the next start on.
AT_NEXT_STOP = frozenset({"KillMode", "TimeoutStopSec", "RestartSec", "SendSIGKILL"})

Directive = tuple[str, str, str]  # (section, key, value)


def drop_in_dir(unit: str) -> str:
    """Where systemd reads ``unit``'s drop-ins (the name must be validated already)."""
    return f"{DROP_IN_DIR}/{unit}.d"


def drop_in_path(unit: str) -> str:
    """gpudash's drop-in of ``unit`` (the name must be validated already)."""
    return f"{drop_in_dir(unit)}/{DROP_IN_NAME}"


def directives(findings: Iterable[Finding]) -> tuple[Directive, ...]:
    """Every directive the findings' fixes set, once each (the last value wins)."""
    out: dict[tuple[str, str], str] = {}
    for finding in findings:
        for section, key, value in finding.fix:
            out[(section, key)] = value
    return tuple((s, k, v) for (s, k), v in out.items())


def render(settings: Iterable[Directive]) -> str:
    """The drop-in's text: sections in systemd's order, one directive a line."""
    by_section: dict[str, list[str]] = {}
    for section, key, value in settings:
        by_section.setdefault(section, []).append(f"{key}={value}")
    lines = [HEADER]
    for section in sorted(by_section, key=lambda s: (s != "Unit", s)):
        lines += ["", f"[{section}]", *by_section[section]]
    return "\n".join(lines) + "\n"


def parse(text: str) -> tuple[Directive, ...]:
    """The directives of a drop-in gpudash wrote (comments and blank lines skipped)."""
    out: list[Directive] = []
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif "=" in line and section:
            key, value = line.split("=", 1)
            out.append((section, key.strip(), value.strip()))
    return tuple(out)


def split_cat(text: str) -> list[tuple[str, str]]:
    """``systemctl cat`` output as (path, body) per file, in the order systemd read them."""
    files: list[tuple[str, list[str]]] = []
    previous = ""
    for line in text.splitlines():
        # systemctl cat heads each file with "# PATH", after a blank line (or first)
        if line.startswith("# /") and previous.strip() == "":
            files.append((line[2:].strip(), []))
        elif files:
            files[-1][1].append(line)
        else:
            files.append(("", [line]))
        previous = line
    return [(path, "\n".join(body).strip("\n")) for path, body in files]


def ours_in(cat_text: str, unit: str) -> str | None:
    """The body of gpudash's drop-in as ``systemctl cat`` shows it, or None."""
    path = drop_in_path(unit)
    for file, body in split_cat(cat_text):
        if file == path:
            return body
    return None


def with_ours(cat_text: str, unit: str, text: str | None) -> str:
    """``systemctl cat`` as it will read once gpudash's file is ``text`` (None: gone)."""
    path = drop_in_path(unit)
    parts = [(f, b) for f, b in split_cat(cat_text) if f != path]
    if text is not None:
        parts.append((path, text.strip("\n")))
    return "\n\n".join((f"# {f}\n{b}" if f else b) for f, b in parts) + "\n"


def preview(cat_text: str, unit: str, text: str | None) -> tuple[str, ...]:
    """The change as a unified diff of ``systemctl cat UNIT``, before and after."""
    before = with_ours(cat_text, unit, ours_in(cat_text, unit))
    after = with_ours(cat_text, unit, text)
    return tuple(line.rstrip("\n") for line in difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True),
        f"systemctl cat {unit} (now)", f"systemctl cat {unit} (after)", n=2))


def applies_at_next_stop(settings: Iterable[Directive]) -> list[str]:
    """The keys among ``settings`` a running service takes up only at its next stop."""
    return sorted({k for _s, k, _v in settings if k in AT_NEXT_STOP})
