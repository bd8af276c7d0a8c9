"""Theme files: ``themes/*.toml`` of the project and of the user, loaded into Textual themes.

A file is one theme::

    name = "gpudash-night"
    dark = true
    primary = "#5fafff"
    ...
    [variables]
    gpu-mem-critical = "#ff5f5f"

Every file that fails is reported, all together, by the caller (one toast) with its
name; the app starts without it. A file is checked as Textual will use it (see
``theme_from_toml``), so no theme that loads can end the app.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from textual.color import Color, ColorParseError
from textual.css.stylesheet import Stylesheet, StylesheetParseError
from textual.css.tokenize import tokenize_values
from textual.css.tokenizer import TokenError
from textual.theme import Theme

COLOR_KEYS = (
    "primary", "secondary", "warning", "error", "success", "accent",
    "foreground", "background", "surface", "panel", "boost",
)
OTHER_KEYS = {"name", "dark", "luminosity_spread", "text_alpha", "variables"}
VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")

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
    """Parse one theme file and check that Textual can use it: every value parses, the
    colours derived from it exist, every variable is CSS the stylesheet takes (a colour
    where Textual's own variable of that name is one). Raises ``ValueError`` with a short
    reason: a theme that would end the app at start (a variable ``border = "}}} ; ;"``,
    ``luminosity_spread = nan``) is refused here instead."""
    data = _read(path)
    unknown = set(data) - set(COLOR_KEYS) - OTHER_KEYS
    if unknown:
        raise ValueError(f"unknown keys {', '.join(sorted(unknown))}")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip() or not name.isprintable():
        raise ValueError("missing 'name'")
    if "primary" not in data:
        raise ValueError("missing 'primary'")
    colors = {key: _color(key, data[key]) for key in COLOR_KEYS if key in data}
    variables = _variables(data.get("variables", {}))
    dark = data.get("dark", True)
    if not isinstance(dark, bool):
        raise ValueError("'dark' must be true or false")
    fields: dict[str, Any] = {**colors, **_fractions(data)}  # checked above, key by key
    theme = Theme(name=name.strip(), dark=dark, variables=variables, **fields)
    _usable(theme)
    return theme


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"not TOML: {exc}") from exc


def _variables(variables: object) -> dict[str, str]:
    if not isinstance(variables, dict):
        raise ValueError("'variables' must be a table")
    for key, value in variables.items():
        if not VARIABLE_NAME.fullmatch(key):
            raise ValueError(f"variable {key!r} is not a CSS variable name")
        if not isinstance(value, str):
            raise ValueError(f"variable {key!r} must be a string")
        if key in VARIABLE_DEFAULTS:
            _color(key, value)
    return dict(variables)


def _fractions(data: dict[str, Any]) -> dict[str, float]:
    """``luminosity_spread`` and ``text_alpha``: finite numbers from 0 to 1."""
    extra: dict[str, float] = {}
    for key in ("luminosity_spread", "text_alpha"):
        if key in data:
            value = data[key]
            if (not isinstance(value, int | float) or isinstance(value, bool)
                    or not math.isfinite(value) or not 0 <= value <= 1):
                raise ValueError(f"{key!r} must be a number from 0 to 1, not {value!r}")
            extra[key] = float(value)
    return extra


def _usable(theme: Theme) -> None:
    """What Textual does with the theme at start, done now: derive its colours, tokenize
    every variable, and parse each variable the theme sets that Textual or gpudash use
    in a declaration of its kind (a colour, a text style)."""
    try:
        derived = theme.to_color_system().generate()
        known = set(Theme(name="plain", primary=theme.primary).to_color_system().generate())
    except (ValueError, ArithmeticError, ColorParseError) as exc:
        raise ValueError(f"its colours cannot be derived: {exc}") from None
    for key, value in {**VARIABLE_DEFAULTS, **derived}.items():
        try:
            tokenize_values({key: value})
        except TokenError as exc:
            raise ValueError(f"variable {key!r}: {value!r} is not CSS ({exc})") from None
        if key in theme.variables and (key in known or key in VARIABLE_DEFAULTS):
            _declares(key, value)


def _declares(key: str, value: str) -> None:
    """``value`` parses where Textual uses ``$key`` (a text style, else a colour)."""
    rule = "text-style" if key.endswith("style") else "color"
    sheet = Stylesheet(variables={key: value})
    sheet.add_source(f"Screen {{ {rule}: ${key}; }}", read_from=("theme", key))
    try:
        sheet.parse()
    except (StylesheetParseError, TokenError):
        kind = "a text style" if rule == "text-style" else "a colour"
        raise ValueError(f"variable {key!r}: {value!r} is not {kind}") from None


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
