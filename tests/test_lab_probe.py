"""The lab decides whether it can run by trying, not by reading a list that lags behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from lab.lab import overlay_problem


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root")
def test_overlay_not_yet_listed_is_probed_with_a_real_mount(tmp_path: Path) -> None:
    # On a fresh machine the overlay module loads at the first overlay mount, so
    # /proc/filesystems does not list it yet: that must not make 17 lab tests skip.
    listed = tmp_path / "filesystems"
    listed.write_text("nodev\tsysfs\nnodev\ttmpfs\n\text4\n")
    assert overlay_problem(listed) is None
