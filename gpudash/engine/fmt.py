"""Memory as the engine words it (temporary: to be replaced by gpudash.units)."""

from __future__ import annotations


def gib(mib: int | float | None, *, unit: bool = True) -> str:
    """``94.5 GiB`` (or ``94.5`` without the unit); ``N/A`` for an unknown amount."""
    if mib is None:
        return "N/A"
    return f"{mib / 1024:.1f}" + (" GiB" if unit else "")
