"""Host text through every line-oriented sink, a hostile corpus and a fuzz (issue 29 item 9).

A host's text (a process name, a command line, a unit name, a journal line, an error)
is shown as ONE line of plain text, whatever it holds: a newline cannot forge a line of
the report below it, a control cannot drive the terminal, a bidi control cannot reorder
it, a noncharacter cannot break an SVG. The sinks: the CLI's streams (plans, the report,
``snapshot``), ``gpudash history``, ``gpudash report`` (text, SVG, HTML), the dashboard's
cells, journal lines and notices, and gpudash's own log file. What is unsafe is defined
here from Unicode's own tables, apart from the implementation under test.
"""

from __future__ import annotations

import copy
import io
import json
import logging
import time
import unicodedata
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console
from test_cli import gpudash
from test_cli_history import rec, write_audit
from test_wire import good

from gpudash.cli.args import parse
from gpudash.cli.history import cmd_history
from gpudash.cli.report import cmd_report
from gpudash.cli.terminal import Terminal
from gpudash.domain.untrusted import clean
from gpudash.protocol.source import LogLine
from gpudash.protocol.wire import to_snapshot
from gpudash.render.textreport import snapshot_text
from gpudash.state import logfile
from gpudash.ui.models import journal_text
from gpudash.ui.text import literal
from gpudash.ui.widgets.action_log import ActionLog, LogEntry

# Each one an attack seen or easy to make; kept fixed so a failure reproduces.
HOSTILE = [
    "a\n    ✔ ok",  # a forged verdict line under the real one
    "a\r\n    ✔ ok", "x\r    ✔ ok",  # CR: the line overwritten from its start
    "\x1b[3A\x1b[J", "\x1b]0;owned\x07", "\x1b]52;c;cHduZWQ=\x07", "\x9b2J",  # CSI, OSC, C1
    "\x00\x07\x08\x7f\x85",  # NUL, BEL, BS, DEL, NEL
    "\x0b\x0c\x1c\x1d\x1e",  # what str.splitlines also splits at
    "\u2028    ✔ ok\u2029",  # line and paragraph separators
    "evil\u202eexe.sh",  # right-to-left override: reads "evilhs.exe"
    "\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069\u200e\u200f\u061c",  # every bidi control
    "\ufffe\uffff\ufdd0\ufdef\U0001fffe\U0010ffff",  # noncharacters (XML forbids U+FFFE)
    "\ud800 \udfff\udc80",  # lone surrogates (apart: a high one then a low one is a pair)
    "\U000e0072\U000e006d \u200b\ufeff\xad",  # tag characters and invisible ones
    "[red]x[/red] [link=file:///etc/passwd]y[/link]",  # Rich markup
    "<script>alert(1)</script>&amp;]]><!--",  # HTML / XML
    "\t",
]
IDS = [ascii(s)[1:-1][:24] for s in HOSTILE]


def unsafe(ch: str) -> bool:
    """A character no line of gpudash's output may hold raw: controls (C0, DEL, C1),
    format characters (bidi controls, invisible ones), surrogates, line and paragraph
    separators, and noncharacters."""
    code = ord(ch)
    return (unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")
            or 0xFDD0 <= code <= 0xFDEF or code & 0xFFFE == 0xFFFE)


def one_safe_line(text: str) -> bool:
    return not any(unsafe(ch) for ch in text)  # no line break of any kind either


def bad_chars(text: str) -> list[str]:
    return sorted({f"U+{ord(c):04X}" for c in text if unsafe(c)})


hostile_text = st.lists(st.one_of(
    st.sampled_from(HOSTILE),  # the corpus's attacks, often
    st.sampled_from("".join(HOSTILE)),  # their characters
    st.characters(exclude_categories=()),  # any code point, surrogates included
), max_size=12).map("".join)
FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


# --- the sanitiser itself ---------------------------------------------------------------

@given(hostile_text)
def test_clean_is_one_safe_line_and_idempotent(text: str) -> None:
    shown = clean(text)
    assert one_safe_line(shown), bad_chars(shown)
    assert clean(shown) == shown
    if one_safe_line(text) and "\\" not in text:
        assert shown == text  # what is safe is shown as it is


@pytest.mark.parametrize("text", HOSTILE, ids=IDS)
def test_each_hostile_text_is_one_safe_line(text: str) -> None:
    assert one_safe_line(clean(text)), bad_chars(clean(text))


# --- the CLI's streams ------------------------------------------------------------------

def printed(lines: list[str]) -> tuple[list[str], list[str]]:
    """``lines`` through the terminal's result and its notices: the lines that came out."""
    out, err = io.StringIO(), io.StringIO()
    term = Terminal(out, err, io.StringIO())
    term.result(lines)
    term.say(lines)
    return out.getvalue().split("\n")[:-1], err.getvalue().split("\n")[:-1]


@given(st.lists(hostile_text, min_size=1, max_size=5))
def test_the_terminal_prints_a_line_for_each_line_whatever_it_holds(lines: list[str]) -> None:
    for stream in printed(lines):
        assert len(stream) == len(lines)
        assert all(one_safe_line(line) for line in stream)


def snapshot_with(text: str) -> Any:
    state = copy.deepcopy(good(n_gpus=2, n_procs=3))
    for p in state["procs"].values():
        p.update(name=text[:15], cmdline=text, user=text or "u")
    state["gpus"]["0"]["name"] = text
    state["errors"] = [text]
    return to_snapshot(state, "h")


@given(hostile_text)
def test_snapshot_text_keeps_its_lines_whatever_the_host_sends(text: str) -> None:
    shown = snapshot_text(snapshot_with(text))
    plain = snapshot_text(snapshot_with("x"))
    assert len(shown.split("\n")) == len(plain.split("\n"))
    assert all(one_safe_line(line) for line in shown.split("\n"))


# --- gpudash history and gpudash report -------------------------------------------------

def hostile_audit(text: str, now: float) -> None:
    text = f"<{text}>"  # never empty: an empty summary is not shown at all
    write_audit([
        rec("intent", "a1", now - 60, host=text, operator=text, subject=text),
        rec("outcome", "a1", now - 50, host=text, operator=text, subject=text,
            verdict="failed", summary=text,
            phases=[{"name": text, "confirmed": False, "seconds": 1.0},
                    {"name": "start", "confirmed": True, "seconds": 2.0}],
            memory={"t": [0, 1], "mib": {"0": [2048, 1024]}}),
    ])


def history_lines(text: str, now: float) -> list[str]:
    hostile_audit(text, now)
    out, err = io.StringIO(), io.StringIO()
    assert cmd_history(parse(["history"])[1], Terminal(out, err, io.StringIO())) == 0, err
    return out.getvalue().split("\n")[:-1]


@FUZZ
@given(hostile_text)
def test_history_keeps_its_lines_whatever_the_audit_holds(text: str) -> None:
    now = time.time()
    lines = history_lines(text, now)
    assert len(lines) == len(history_lines("x", now))
    assert all(one_safe_line(line) for line in lines), [bad_chars(x) for x in lines]


@pytest.mark.parametrize("text", HOSTILE, ids=IDS)
def test_gpudash_history_prints_host_text_on_its_own_line(text: str) -> None:
    hostile_audit(text, time.time())
    r = gpudash("history")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")[:-1]
    assert len(lines) == 4, lines  # the action, its verdict, its phases, its summary
    assert all(one_safe_line(line) for line in lines)
    assert lines[3].strip() == clean(f"<{text}>")  # the summary, escaped, nothing more
    assert not any(line.strip() == "✔ ok" for line in lines)


def report_files(tmp_path: Path) -> tuple[ET.Element, str, str]:
    svg, html = tmp_path / "r.svg", tmp_path / "r.html"
    for flag, path in (("--svg", svg), ("--html", html)):
        out, err = io.StringIO(), io.StringIO()
        code = cmd_report(parse(["report", flag, str(path)])[1],
                          Terminal(out, err, io.StringIO()))
        assert code == 0, err.getvalue()
    return ET.parse(svg).getroot(), svg.read_text(encoding="utf-8"), html.read_text(
        encoding="utf-8")


def assert_pictures_are_inert(root: ET.Element, svg: str, html: str) -> None:
    # ET.parse above: well-formed XML. Nothing unsafe in the text, nor markup from the host.
    for page in ("".join(root.itertext()), svg, html):
        assert not [c for c in bad_chars(page) if c not in ("U+000A",)], bad_chars(page)
    assert "<script" not in svg and "<script" not in html
    assert not any(el.tag.endswith("script") for el in root.iter())


@FUZZ
@given(text=hostile_text)
def test_report_pictures_are_well_formed_whatever_the_audit_holds(
        text: str, tmp_path: Path) -> None:
    hostile_audit(text, time.time())
    assert_pictures_are_inert(*report_files(tmp_path))


@pytest.mark.parametrize("text", HOSTILE, ids=IDS)
def test_report_pictures_of_the_hostile_corpus(text: str, tmp_path: Path) -> None:
    hostile_audit(text, time.time())
    root, svg, html = report_files(tmp_path)
    assert_pictures_are_inert(root, svg, html)
    page = "".join(root.itertext()).replace("\xa0", " ")
    assert clean(f"<{text}")[:8] in page  # the host's name in the title, escaped


def test_gpudash_report_svg_with_a_noncharacter_parses_as_xml(tmp_path: Path) -> None:
    hostile_audit("model\ufffe\uffff", time.time())
    picture = tmp_path / "r.svg"
    r = gpudash("report", "--svg", str(picture))
    assert r.returncode == 0, r.stderr
    page = "".join(ET.parse(picture).getroot().itertext())  # raised before: not well-formed
    assert "model\\ufffe\\uffff" in page


# --- the dashboard's cells, journal lines, Action log, notices --------------------------

def rendered(renderable: Any) -> str:
    """As the terminal gets it (no wrapping: a line the log wraps is still one line)."""
    console = Console(file=io.StringIO(), width=100_000, color_system=None, markup=False)
    with console.capture() as seen:
        console.print(renderable)
    return seen.get()


@given(hostile_text)
def test_cells_and_journal_lines_are_one_safe_line(text: str) -> None:
    cell = literal(text)
    assert one_safe_line(cell.plain) and cell.plain == clean(text)
    line = journal_text(LogLine(text, time=1.7e9, origin=text))
    assert one_safe_line(line.plain)
    assert len(rendered(line).split("\n")) == 2  # one line, then the print's own end
    entry = LogEntry(1.7e9, text, text, text, False, (text, "second"))
    detail = ActionLog.detail(entry).plain.split("\n")
    assert all(one_safe_line(x) for x in detail)
    assert len(detail) == len(ActionLog.detail(
        LogEntry(1.7e9, "h", "a", "o", False, ("x", "second"))).plain.split("\n"))


async def test_the_dashboard_shows_the_hostile_corpus_in_one_safe_line_each() -> None:
    from test_ui import SIZE, make_app, wait_for

    from gpudash.demo.host import DemoHost
    from gpudash.domain.clock import SteppedClock
    from gpudash.ui.widgets.holders import HoldersTable

    class Hostile(DemoHost):
        def line(self, message: dict[str, Any]) -> bytes:
            # JSON's escapes, as a hostile host may write them: a lone surrogate arrives
            # as one (the collector's own lines carry "?" for it)
            return json.dumps(message).encode() + b"\n"

    demo = Hostile(clock=SteppedClock())
    pids = [demo.spawn(ppid=1, user=text, name=text, cmdline=text, unit=None,
                       gpu_memory_mib={3: 100 + i}).pid for i, text in enumerate(HOSTILE)]
    app = make_app(demo)
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(HoldersTable)
        await wait_for(pilot, lambda: all(f"p:{pid}" in [str(k.value) for k in table.rows]
                                          for pid in pids))
        for pid in pids:
            cells = [c.plain if hasattr(c, "plain") else str(c)
                     for c in table.get_row(f"p:{pid}")]
            assert all(one_safe_line(c) for c in cells), [bad_chars(c) for c in cells]
        for text in HOSTILE:  # notices: a reason naming a host's unit, say
            app.notify(f"not started: {text}", title=text, severity="warning")
        app.notify(["Settings ignored:", *HOSTILE])  # a notice of several lines
        await pilot.pause()
        shown = [(str(n.message), n.title) for n in app._notifications]
        for message, title in shown[-len(HOSTILE) - 1:-1]:
            assert "\n" not in message and one_safe_line(message) and one_safe_line(title)
        many = shown[-1][0].split("\n")
        assert len(many) == 1 + len(HOSTILE) and all(one_safe_line(x) for x in many)


# --- gpudash's own log file -------------------------------------------------------------

def test_the_log_file_has_a_line_per_record_whatever_a_host_sent(tmp_path: Path) -> None:
    path = tmp_path / "state" / "gpudash.log"
    assert logfile.setup("warning", path) == path
    log = logging.getLogger("gpudash.test")
    try:
        for text in HOSTILE:
            log.warning("undecodable snapshot from %s", text)
    finally:
        logfile.setup("warning", tmp_path / "other" / "gpudash.log")  # let go of the file
    lines = path.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(lines) == len(HOSTILE)
    assert all(" WARNING gpudash.test: undecodable snapshot from " in x for x in lines)
    assert all(one_safe_line(x) for x in lines), [bad_chars(x) for x in lines]
