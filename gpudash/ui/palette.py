"""Colours the widgets draw with in Python (bars, flags), taken from the current theme."""

from __future__ import annotations

from typing import Any

from textual.app import App

from gpudash.record import record
from gpudash.ui.themes import VARIABLE_DEFAULTS


@record
class Palette:
    ok: str
    warn: str
    critical: str
    empty: str
    orphan: str
    notice: str
    success: str
    error: str
    warning: str
    muted: str

    def fullness(self, fraction: float) -> str:
        """The colour of a memory bar that is ``fraction`` full."""
        if fraction >= 0.9:
            return self.critical
        if fraction >= 0.6:
            return self.warn
        return self.ok


def palette(app: App[Any]) -> Palette:
    v = {**VARIABLE_DEFAULTS, **getattr(app, "theme_variables", {})}
    return Palette(
        ok=v["gpu-mem-ok"],
        warn=v["gpu-mem-warn"],
        critical=v["gpu-mem-critical"],
        empty=v["gpu-mem-empty"],
        orphan=v["flag-orphan"],
        notice=v["flag-notice"],
        success=v.get("success", "green"),
        error=v.get("error", "red"),
        warning=v.get("warning", "yellow"),
        muted=v.get("foreground-muted", v.get("text-muted", "grey50")),
    )
