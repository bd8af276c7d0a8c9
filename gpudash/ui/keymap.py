"""The user's keymap: ``$XDG_CONFIG_HOME/gpudash/keymap.toml`` rebinds keys by binding id.

    "gpudash.stop" = "S"
    "gpudash.reclaim" = "ctrl+r"

Every binding of the app has an id (``gpudash.<action>``); the help screen lists them.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path


def keymap_path() -> Path:
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "gpudash" / "keymap.toml"


def load_keymap(path: Path | None = None) -> tuple[dict[str, str], list[str]]:
    """The binding-id -> key mapping, and one line per problem found (file stays usable)."""
    target = path or keymap_path()
    if not target.is_file():
        return {}, []
    try:
        data = tomllib.loads(target.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        return {}, [f"{target.name}: {exc}"]
    keymap: dict[str, str] = {}
    errors: list[str] = []
    for binding_id, keys in data.items():
        if not isinstance(keys, str) or not keys.strip():
            errors.append(f"{target.name}: {binding_id}: expected a key string like \"ctrl+r\"")
        elif not binding_id.startswith("gpudash."):
            errors.append(f"{target.name}: {binding_id}: unknown binding id")
        else:
            keymap[binding_id] = keys.strip()
    return keymap, errors
