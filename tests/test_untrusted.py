"""Host text can neither drive the operator's terminal nor hide part of itself."""

from __future__ import annotations

import json
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpudash.domain.untrusted import clean, json_dumps

INVISIBLE = [
    "\u061c",  # Arabic letter mark
    *[chr(c) for c in range(0x200B, 0x2010)],  # zero-width space .. RLM
    "\u2028", "\u2029",  # line / paragraph separator
    *[chr(c) for c in range(0x202A, 0x202F)],  # bidi embeddings and overrides
    *[chr(c) for c in range(0x2066, 0x206A)],  # bidi isolates
    "\ufeff",  # byte-order mark / zero-width no-break space
    "\ud800", "\udfff",  # lone surrogates
]


@pytest.mark.parametrize("char", INVISIBLE, ids=lambda c: f"U+{ord(c):04X}")
def test_invisible_and_reordering_characters_are_made_visible(char: str) -> None:
    shown = clean(f"rm{char}x")
    assert char not in shown
    assert shown == f"rm\\u{ord(char):04x}x"
    shown.encode("utf-8")  # a lone surrogate must not break the terminal writer


def test_controls_stay_escaped_and_markup_stays_text() -> None:
    assert clean("\x1b]0;owned\x07\x9b2J") == "\\x1b]0;owned\\x07\\x9b2J"
    assert clean("[bold]é日本[/bold]") == "[bold]é日本[/bold]"


@given(st.text(), st.sampled_from([None, 2]))
def test_json_output_is_equivalent_valid_utf8_and_inert(text: str, indent: int | None) -> None:
    doc = json_dumps({"cmdline": text, "n": 1}, indent=indent)
    doc.encode("utf-8")  # never raises, lone surrogates included
    assert json.loads(doc) == {"cmdline": text, "n": 1}
    # nothing in it can act on a terminal: only indentation's newlines are raw
    assert all(clean(line) == line for line in doc.split("\n"))


def test_json_output_keeps_readable_unicode() -> None:
    assert json_dumps("é日本") == '"é日本"'
    assert json_dumps("a\x1b[2Jb\u202e") == '"a\\u001b[2Jb\\u202e"'


# Every character that is a control, a format character (invisible: the tag characters
# hide whole ASCII words), a line/paragraph separator or a lone surrogate.
HIDDEN = [
    chr(c) for c in range(0x110000)
    if unicodedata.category(chr(c)) in ("Cc", "Cf", "Cs", "Zl", "Zp")
]


def test_every_control_format_character_and_surrogate_is_escaped() -> None:
    text = " ".join(HIDDEN)  # apart: a high surrogate then a low one is one JSON character
    shown = clean(text)
    assert not any(c in shown for c in HIDDEN)
    assert shown.isascii()
    doc = json_dumps({"t": text}, indent=2)
    assert json.loads(doc) == {"t": text} and all(clean(line) == line for line in doc.split("\n"))
    assert clean("run\U000e0072\U000e006d me") == "run\\U000e0072\\U000e006d me"


# Unicode's noncharacters: U+FDD0..U+FDEF and the last two code points of every plane.
# XML forbids U+FFFE/U+FFFF outright (a report's SVG with one does not parse) and no
# font draws any of them.
NONCHARACTERS = [chr(c) for c in range(0xFDD0, 0xFDF0)] + [
    chr(plane << 16 | low) for plane in range(17) for low in (0xFFFE, 0xFFFF)]


def test_every_noncharacter_is_escaped() -> None:
    shown = clean(" ".join(NONCHARACTERS))
    assert not any(c in shown for c in NONCHARACTERS) and shown.isascii()
    assert clean("a\ufffeb\uffff") == "a\\ufffeb\\uffff"
    assert clean("\U0010fffe") == "\\U0010fffe"
    doc = json_dumps({"t": "\ufffe\U0001ffff"})
    assert json.loads(doc) == {"t": "\ufffe\U0001ffff"} and doc.isascii()
