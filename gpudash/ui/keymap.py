"""The user's keymap: ``$XDG_CONFIG_HOME/gpudash/keymap.toml`` rebinds keys by binding id.

    "gpudash.stop_unit" = "S"
    "gpudash.reclaim" = "ctrl+r"

Every binding of the app has an id (``gpudash.<action>``); the help screen lists the keys.
An entry that names no binding, or takes a key another binding of the same screen already
uses, is left out and reported: it never silently takes a key away from another action.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path

# Keys the dashboard's tables and Textual itself use on the main screen.
RESERVED = {
    "up": "moving the cursor", "down": "moving the cursor", "left": "moving the cursor",
    "right": "moving the cursor", "pageup": "moving the cursor",
    "pagedown": "moving the cursor", "home": "moving the cursor", "end": "moving the cursor",
    "enter": "opening the selected row", "tab": "moving the focus",
    "shift+tab": "moving the focus", "ctrl+p": "the command palette", "ctrl+q": "quitting",
    "ctrl+c": "copying",
}


def keymap_path() -> Path:
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "gpudash" / "keymap.toml"


def split_keys(keys: str) -> list[str]:
    """``"S, ctrl+r"`` -> ``["S", "ctrl+r"]``; ``shift+d`` is the key ``D``."""
    out = []
    for key in keys.split(","):
        key = key.strip()
        if key.startswith("shift+") and len(key) == 7 and key[6].isalpha():
            key = key[6].upper()
        if key:
            out.append(key)
    return out


def _scope(binding_id: str) -> str:
    """Bindings of one screen share a scope: ``gpudash.confirm.yes`` -> ``gpudash.confirm``."""
    return binding_id.rsplit(".", 1)[0]


def load_keymap(
    path: Path | None = None, bindings: Mapping[str, tuple[str, str]] | None = None
) -> tuple[dict[str, str], list[str]]:
    """The binding-id -> key mapping, and one line per entry left out (file stays usable).

    ``bindings`` (id -> (default keys, description)) lets unknown ids and keys that
    collide with another binding of the same screen be reported instead of applied.
    """
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
        elif not binding_id.startswith("gpudash.") or (
            bindings is not None and binding_id not in bindings
        ):
            hint = ""
            if bindings is not None:
                close = difflib.get_close_matches(binding_id, list(bindings), n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
            errors.append(f"{target.name}: {binding_id}: unknown binding id{hint}")
        else:
            keymap[binding_id] = keys.strip()
    if bindings is not None:
        errors += [f"{target.name}: {e}" for e in drop_conflicts(keymap, bindings)]
    return keymap, errors


def drop_conflicts(keymap: dict[str, str], bindings: Mapping[str, tuple[str, str]]) -> list[str]:
    """Remove (in place) entries whose key another binding of the same screen uses, or
    that the tables need; one line per entry removed. Swapping two keys is fine."""
    problems: list[str] = []
    while True:
        owners: dict[tuple[str, str], list[str]] = {}
        for binding_id, (default, _desc) in bindings.items():
            for key in split_keys(keymap.get(binding_id, default)):
                owners.setdefault((_scope(binding_id), key), []).append(binding_id)
        culprit = None
        for binding_id in keymap:  # file order: the later entry of two is the one left out
            scope = _scope(binding_id)
            for key in split_keys(keymap[binding_id]):
                others = [o for o in owners[(scope, key)] if o != binding_id]
                if scope == "gpudash" and key in RESERVED:
                    culprit = (binding_id, f"{key} is used for {RESERVED[key]}")
                elif others and not any(o in keymap and _later(keymap, o, binding_id)
                                        for o in others):
                    other = others[0]
                    culprit = (binding_id, f"{key} is already {bindings[other][1]} ({other})")
                if culprit:
                    break
            if culprit:
                break
        if culprit is None:
            return problems
        binding_id, why = culprit
        keys = keymap.pop(binding_id)
        problems.append(f"{binding_id} = \"{keys}\": {why}; "
                        f"kept {bindings[binding_id][0]}")


def _later(keymap: dict[str, str], a: str, b: str) -> bool:
    """Whether entry ``a`` comes after entry ``b`` in the file."""
    order = list(keymap)
    return order.index(a) > order.index(b)
