"""The tests' collector reader: a line that arrives with the one before it is not lost
(select() on a buffered pipe said nothing of it, and two probe tests waited 15 s for a
reply that had come; CI failed on them twice)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from collector_run import read_line


def test_lines_written_together_are_each_read() -> None:
    p = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.stdout.write('a\\nb\\n');"
                          "sys.stdout.flush(); time.sleep(30)"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert read_line(p, 10) == b"a\n"
        assert read_line(p, 2) == b"b\n"  # already here: no wait
        with pytest.raises(AssertionError, match="sent no line"):
            read_line(p, 0.5)
    finally:
        p.kill()
        p.wait()
