"""Text that comes from a host (process names, command lines, unit names, errors).

It is shown literally, as one line, and never reaches the terminal raw: every control
character (newlines too), the bidi controls that can make a command line read backwards,
the invisible characters that can hide part of it, Unicode's noncharacters and lone
surrogates become a visible ``\\xNN`` / ``\\uNNNN`` escape. This is the one sanitiser of
every sink: the dashboard's cells, journal lines and notices, the CLI's streams (plans,
reports, ``history``, ``report`` and its SVG/HTML), gpudash's log file and ``--json``.
A sink of several lines takes them as a list (``clean_lines``), never as text to split:
a host's newline cannot make a line of its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

# C0 controls (tab and newline too: every cell is one line), DEL, C1 controls; Arabic
# letter mark, zero-width space/joiners and LRM/RLM, line/paragraph separators, bidi
# embeddings/overrides/isolates, word joiner and invisible operators, deprecated format
# controls, the byte-order mark, interlinear annotations; lone surrogates (they cannot
# even be encoded as UTF-8).
_C0 = "\x00-\x1f"
_UNSAFE_BEYOND_C0 = (
    "\x7f-\x9f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2064"
    "\u2066-\u206f\ufeff\ufff9-\ufffb\ud800-\udfff"
    # every other format character (Unicode category Cf): the soft hyphen, Arabic and
    # Syriac marks, the Mongolian vowel separator, Egyptian hieroglyph and shorthand
    # format controls, musical formatting, and the tag characters, which hide ASCII
    # text that renders as nothing at all
    "\xad\u0600-\u0605\u06dd\u070f\u0890\u0891\u08e2\u180e"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0000-\U000e007f"
    # Unicode's noncharacters: U+FDD0..U+FDEF and the last two code points of each plane.
    # No font draws them, and XML forbids U+FFFE/U+FFFF (a report's SVG stops parsing).
    "\ufdd0-\ufdef"
    + "".join(chr(plane << 16 | last) for plane in range(17) for last in (0xFFFE, 0xFFFF))
)
_UNSAFE = re.compile(f"[{_C0}{_UNSAFE_BEYOND_C0}]")
# json.dumps escapes C0 inside strings itself; outside them only indentation whitespace.
_JSON_UNSAFE = re.compile(f"[{_UNSAFE_BEYOND_C0}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def clean(value: object) -> str:
    """``value`` as one line of plain text with every unsafe character made visible."""
    return _UNSAFE.sub(_escape, str(value))


def clean_lines(lines: str | Iterable[str]) -> list[str]:
    """Lines for a sink of several: each one ``clean``. A ``str`` is one line: its
    newlines are shown escaped, never split at (they may be a host's)."""
    return [clean(line) for line in ([lines] if isinstance(lines, str) else lines)]


def _json_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    high, low = divmod(code - 0x10000, 0x400)  # JSON spells these as a surrogate pair
    return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"


def json_dumps(obj: Any, **kwargs: Any) -> str:
    """JSON that keeps readable Unicode but escapes what could act on a terminal.

    ``json.dumps`` already escapes C0; DEL, C1, bidi and invisible characters and lone
    surrogates would otherwise pass raw (a lone surrogate even breaks UTF-8 output). They
    only ever occur inside JSON strings, so escaping them keeps the document equivalent.
    """
    return _JSON_UNSAFE.sub(_json_escape, json.dumps(obj, ensure_ascii=False, **kwargs))
