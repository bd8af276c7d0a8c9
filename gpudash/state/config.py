"""The operator's settings: ``$XDG_CONFIG_HOME/gpudash/config.toml``.

    models = ["vllm-*", "sglang@*"]   # unit name globs that are model servers, beside the
                                      # services whose ExecStart runs a known server

A file that cannot be read, or a bad entry, is reported in one line each; the rest is used.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Settings:
    models: tuple[str, ...] = ()  # unit name globs


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpudash" / "config.toml"


def load(path: Path | None = None) -> tuple[Settings, list[str]]:
    """The settings, and one line per problem (the file stays usable where it can)."""
    target = path or config_path()
    if not target.is_file():
        return Settings(), []
    try:
        data = tomllib.loads(target.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        return Settings(), [f"{target.name}: {exc}"]
    errors: list[str] = []
    models = data.get("models", [])
    if not isinstance(models, list) or not all(
        isinstance(m, str) and m.strip() and len(m) <= 256 for m in models
    ):
        errors.append(f"{target.name}: models: expected a list of unit name globs "
                      '(e.g. ["vllm-*"])')
        models = []
    for key in sorted(set(data) - {"models"}):
        errors.append(f"{target.name}: {key}: unknown setting")
    return Settings(tuple(m.strip() for m in models)), errors
