"""Where gpudash keeps its files on the operator's machine."""

from __future__ import annotations

import os
from pathlib import Path


def state_dir() -> Path:
    """``$XDG_STATE_HOME/gpudash`` (``~/.local/state/gpudash``): audit, log, footprints."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gpudash"
