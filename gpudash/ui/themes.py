"""Theme files: ``themes/*.toml`` of the project and of the user, loaded into Textual themes.

A file is one theme::

    name = "gpudash-night"
    dark = true
    primary = "#5fafff"
    ...
    [variables]
    gpu-mem-critical = "#ff5f5f"

Every file that fails is reported, all together, by the caller (one toast).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from textual.color import Color, ColorParseError
from textual.theme import Theme

COLOR_KEYS = (
    "primary", "secondary", "warning", "error", "success", "accent",
    "foreground", "background", "surface", "panel", "boost",
)
OTHER_KEYS = {"name", "dark", "luminosity_spread", "text_alpha", "variables"}

# Variables the dashboard's widgets use, with defaults for themes that do not set them.
VARIABLE_DEFAULTS: dict[str, str] = {
    "gpu-mem-ok": "#5faf5f",
    "gpu-mem-warn": "#d7af00",
    "gpu-mem-critical": "#ff5f5f",
    "gpu-mem-empty": "#4e4e4e",
    "flag-orphan": "#ff5f5f",
    "flag-notice": "#d7af00",
}


def theme_dirs() -> list[Path]:
    """Where theme files are looked for: the project's, then the user's."""
    # gpudash/themes is a link to the project's themes/ in a checkout, files in a wheel.
    dirs = [Path(__file__).resolve().parents[1] / "themes"]
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    dirs.append(Path(config) / "gpudash" / "themes")
    return dirs


def theme_from_toml(path: Path) -> Theme:
    """Parse one theme file. Raises ``ValueError`` with a short reason."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"not TOML: {exc}") from exc
    unknown = set(data) - set(COLOR_KEYS) - OTHER_KEYS
    if unknown:
        raise ValueError(f"unknown keys {', '.join(sorted(unknown))}")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValueError("missing 'name'")
    if "primary" not in data:
        raise ValueError("missing 'primary'")
    colors: dict[str, str] = {}
    for key in COLOR_KEYS:
        if key in data:
            colors[key] = _color(key, data[key])
    variables = data.get("variables", {})
    if not isinstance(variables, dict):
        raise ValueError("'variables' must be a table")
    for key, value in variables.items():
        if not isinstance(value, str):
            raise ValueError(f"variable {key!r} must be a string")
        if key in VARIABLE_DEFAULTS:
            _color(key, value)
    dark = data.get("dark", True)
    if not isinstance(dark, bool):
        raise ValueError("'dark' must be true or false")
    extra: dict[str, float] = {}
    for key in ("luminosity_spread", "text_alpha"):
        if key in data:
            if not isinstance(data[key], int | float):
                raise ValueError(f"{key!r} must be a number")
            extra[key] = float(data[key])
    fields: dict[str, Any] = {**colors, **extra}  # checked above, key by key
    return Theme(name=name.strip(), dark=dark, variables=dict(variables), **fields)


def _color(key: str, value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{key!r} must be a colour string")
    try:
        Color.parse(value)
    except ColorParseError as exc:
        raise ValueError(f"{key!r}: {value!r} is not a colour") from exc
    return value


def load_themes(dirs: Iterable[Path] | None = None) -> tuple[list[Theme], list[str]]:
    """All themes found, and one line per file that failed (``file: reason``)."""
    themes: list[Theme] = []
    errors: list[str] = []
    seen: set[Path] = set()
    for directory in theme_dirs() if dirs is None else dirs:
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.toml")):
            real = path.resolve()
            if real in seen:
                continue
            seen.add(real)
            try:
                themes.append(theme_from_toml(path))
            except ValueError as exc:
                errors.append(f"{path.name}: {exc}")
    return themes, errors
