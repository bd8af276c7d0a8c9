"""A unit's journal, as gpudash reads it, is bounded: each message cut at 4 KiB, and lines
of one host passed on at a bounded rate (the excess dropped, and said so).

Read through the real transport (``LocalSource``: real processes) from a stand-in
``journalctl`` on PATH that writes what a hostile or runaway unit's journal holds.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from gpudash.collector.host.protocol import TRUNCATED
from gpudash.transport.local import LocalSource
from gpudash.transport.loglines import JOURNAL_BURST, JOURNAL_MESSAGE_MAX, journal_line

FLOOD = 30000


def stand_in_journalctl(directory: Path) -> Path:
    """A ``journalctl`` that prints one 1 MiB message, one 1 MiB byte array, then a flood."""
    script = directory / "journalctl"
    script.write_text(f"""#!{sys.executable}
import json, sys
out = sys.stdout
def rec(i, msg):
    out.write(json.dumps({{"MESSAGE": msg, "__REALTIME_TIMESTAMP": "1700000000000000",
                          "__CURSOR": "s=%d" % i}}) + "\\n")
rec(0, "x" * (1 << 20))
rec(1, [0xff] * (1 << 20))
for i in range({FLOOD}):
    rec(i + 2, "line %d" % i)
out.flush()
""")
    script.chmod(0o755)
    return script


async def test_messages_are_cut_and_a_flood_is_rate_limited(tmp_path: Path) -> None:
    # before: a 1 MiB message came through whole, and every line of a flood was decoded
    # and passed on (to the journal view, the start's follower)
    stand_in_journalctl(tmp_path)
    source = LocalSource("local", env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    try:
        started = time.monotonic()
        lines = [line async for line in source.control.journal(  # type: ignore[attr-defined]
            "vllm.service", follow=False)]
        took = time.monotonic() - started
    finally:
        await source.close()
    big, array = lines[0].message, lines[1].message
    assert len(big.encode()) <= JOURNAL_MESSAGE_MAX and big.endswith(TRUNCATED)
    assert len(array.encode()) <= JOURNAL_MESSAGE_MAX and array.endswith(TRUNCATED)
    dropped = [ln.message for ln in lines if ln.message.startswith("[gpudash: ")]
    passed = [ln for ln in lines if ln.message.startswith("line ")]
    assert len(passed) < JOURNAL_BURST + 200 * (took + 1) < FLOOD
    assert dropped and all("journal line(s) dropped: more than 200 a second" in d
                           for d in dropped)
    counted = sum(int(d.split()[1]) for d in dropped)
    assert len(passed) + counted == FLOOD  # every line passed on or counted as dropped


def test_a_short_message_is_kept_as_it_is() -> None:
    raw = json.dumps({"MESSAGE": "Loading safetensors checkpoint shards: 37% (24/64)",
                      "__CURSOR": "s=1"}).encode()
    line = journal_line(raw, "u.service")
    assert line is not None and line.message.endswith("(24/64)") and line.cursor == "s=1"
    wide = json.dumps({"MESSAGE": "é" * 5000}).encode()  # 10,000 bytes of UTF-8
    cut = journal_line(wide, "u.service")
    assert cut is not None and len(cut.message.encode()) <= JOURNAL_MESSAGE_MAX
    assert cut.message.startswith("é" * 100) and cut.message.endswith(TRUNCATED)


def test_each_line_says_who_logged_it_as_journalctl_does() -> None:
    def line(**fields: object):  # type: ignore[no-untyped-def]
        return journal_line(json.dumps({"MESSAGE": "x", **fields}).encode(), "u.service")

    assert line(SYSLOG_IDENTIFIER="systemd", _PID="1").origin == "systemd[1]"
    assert line(_COMM="python3", _PID="4711").origin == "python3[4711]"
    assert line().origin is None
    assert line(SYSLOG_IDENTIFIER="x", _PID="1; rm").origin == "x"  # not a pid: left out
    long = line(SYSLOG_IDENTIFIER="a" * 5000).origin
    assert long is not None and len(long.encode()) <= 64  # host text, bounded
    assert line(SYSLOG_IDENTIFIER=["not", "text"]).origin is None
