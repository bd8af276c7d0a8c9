"""Arguments of commands that act on a host are checked in full before anything runs."""

from __future__ import annotations

import pytest

from gpudash.transport.commands import systemctl_argv, validate_unit


def test_unit_names_match_in_full() -> None:
    for bad in ("a.service\n", "a.service\nb.service", "a.service\r", "\na.service"):
        with pytest.raises(ValueError):
            validate_unit(bad)
        with pytest.raises(ValueError):
            systemctl_argv("stop", bad, sudo=False)
    assert validate_unit("a.service") == "a.service"
