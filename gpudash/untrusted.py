"""Text that comes from a host (process names, command lines, unit names, errors).

It is shown literally and never reaches the terminal raw: every control character,
and the bidi overrides that can make a command line read backwards, become a visible
``\\xNN`` / ``\\uNNNN`` escape. The dashboard and the plain-text output both use this.
"""

from __future__ import annotations

import re

# C0 controls (tab and newline too: every cell is one line), DEL, C1 controls, and the
# Unicode bidi overrides.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean(value: object) -> str:
    """``value`` as one line of plain text with every control character made visible."""
    return _UNSAFE.sub(_escape, str(value))
