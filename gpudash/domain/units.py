"""How gpudash writes a quantity, wherever it shows one: the dashboard, the CLI's reports,
the plain-text snapshot. One definition per fact, so the screen and a script never
disagree about the same GPU (``94.5 GiB`` on one and ``96801 MiB`` on the other).

The rule: a number, one space, its unit. Memory in GiB (1024 MiB) with one decimal;
temperature in whole °C; power in whole watts; utilisation in whole percent. A value the
host did not report is ``N/A``, never 0.
"""

from __future__ import annotations

NA = "N/A"
MIB_PER_GIB = 1024


def gib_number(mib: int | float | None) -> str:
    """``94.5`` for 96801 MiB: the number alone, for a column whose header names the unit."""
    return NA if mib is None else f"{mib / MIB_PER_GIB:.1f}"


def gib(mib: int | float | None) -> str:
    """``94.5 GiB`` for 96801 MiB; ``N/A`` when unknown."""
    return NA if mib is None else f"{gib_number(mib)} GiB"


def gib_of(used_mib: int | float | None, total_mib: int | float | None) -> str:
    """``94.5/95.6 GiB``: used of total, one unit for both."""
    if used_mib is None and total_mib is None:
        return NA
    return f"{gib_number(used_mib)}/{gib_number(total_mib)} GiB"


def celsius(degrees: int | float | None) -> str:
    """``45 °C``."""
    return NA if degrees is None else f"{degrees:.0f} °C"


def watts(power_w: float | None, limit_w: float | None = None) -> str:
    """``119 W``, or ``119/600 W`` with the power limit."""
    if power_w is None:
        return NA
    if limit_w is None:
        return f"{power_w:.0f} W"
    return f"{power_w:.0f}/{limit_w:.0f} W"


def percent(value: int | float | None) -> str:
    """``3 %``."""
    return NA if value is None else f"{value:.0f} %"


def seconds(value: float | None) -> str:
    """``9.5 s``; whole seconds print without a decimal (``10 s``)."""
    return NA if value is None else f"{value:.1f}".removesuffix(".0") + " s"
