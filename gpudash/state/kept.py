"""What the dashboard keeps between runs: the theme last chosen with T (or the palette).

``$XDG_STATE_HOME/gpudash/ui.json``, written whole (files.replace) when the theme changes.
A theme named on the command line wins over it, and it wins over config.toml's ``theme``
(the file's default, until the operator picks another).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from gpudash.state import files
from gpudash.state.paths import state_dir

log = logging.getLogger(__name__)
MAX_BYTES = 4096


def kept_path() -> Path:
    return state_dir() / "ui.json"


def kept_theme(path: Path | None = None) -> str | None:
    """The theme chosen last time, or None (never chosen, or the file is not ours)."""
    try:
        raw = files.read(path or kept_path(), MAX_BYTES)
        data = json.loads(raw) if raw else None
    except (OSError, ValueError) as exc:
        log.warning("kept settings not read: %s", exc)
        return None
    theme = data.get("theme") if isinstance(data, dict) else None
    return theme if isinstance(theme, str) and 0 < len(theme) <= 64 else None


def keep_theme(theme: str, path: Path | None = None) -> str | None:
    """Keep ``theme`` for the next run; the problem in words if it could not be."""
    try:
        files.replace(path or kept_path(), json.dumps({"theme": theme}).encode())
    except OSError as exc:
        log.warning("theme not kept: %s", exc)
        return str(exc)
    return None


def resolve_theme(flag: str | None, configured: str | None) -> str | None:
    """--theme, else the theme kept from last time, else config.toml's."""
    return flag or kept_theme() or configured
