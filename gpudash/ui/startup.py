"""What the dashboard reads from the user's files when it starts: settings, keymap and
themes. A file that is wrong never stops it: what could not be used is one warning each."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import field
from pathlib import Path

from textual.theme import Theme

from gpudash.record import record
from gpudash.state import config
from gpudash.ui.bindings import binding_table
from gpudash.ui.keymap import load_keymap
from gpudash.ui.text import clean
from gpudash.ui.themes import load_themes


@record(frozen=False)
class UserFiles:
    settings: config.Settings
    keymap: dict[str, str]
    themes: list[Theme]
    warnings: list[list[str]] = field(default_factory=list)  # one toast each, as its lines

    def warn(self, title: str, errors: Sequence[str]) -> None:
        if errors:
            self.warnings.append([title, *errors])  # each error one line (notify cleans)


def load_user_files(theme_dirs: Sequence[Path] | None) -> UserFiles:
    """The settings, keymap and themes, and a warning per file (or entry) left out."""
    settings, settings_errors = config.load()
    keymap, keymap_errors = load_keymap(bindings=binding_table())
    themes, theme_errors = load_themes(theme_dirs)
    files = UserFiles(settings, keymap, themes)
    files.warn("Settings ignored:", [str(p) for p in settings_errors])
    files.warn("Keymap entries ignored:", keymap_errors)
    files.warn("Theme files that could not be loaded:", theme_errors)
    return files


def chosen_theme(wanted: str | None, available: Iterable[str], default: str
                 ) -> tuple[str | None, str | None]:
    """(the theme to start in, or None for Textual's; a warning if ``wanted`` is unknown)."""
    names = set(available)
    wanted = wanted or (default if default in names else None)
    if wanted is None or wanted in names:
        return wanted, None
    return None, (f"Unknown theme {clean(wanted)!r}; available: " + ", ".join(sorted(names)))
