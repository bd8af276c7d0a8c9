"""Which parts of the dashboard a terminal of a given size has room for.

The screen carries one CSS class per threshold it is under (app.tcss says what each
hides or squeezes); widgets that draw their own text (the action panel's columns, the
log's header) ask here too, so the stylesheet and the code agree on the numbers.
"""

from __future__ import annotations

WIDE = 130  # columns for the memory plot beside the GPU table
THIN = 100  # below: GPUs as a grid, Holders take the unit panel's columns
SHORT = 40  # rows; below: a shorter log, the action panel two GPUs to a line
TINY = 30  # below: GPUs as a grid; while acting, the action panel takes their place

PLOT_MIN = f"{WIDE}x{TINY}"

MIDDLE_MIN = 5  # rows Holders keep whatever else is shown (app.tcss #middle)
PROGRESS_MAX = 16  # rows of the action panel at most (app.tcss #progress), and when short
PROGRESS_MAX_SHORT = 12


def progress_room(height: int, others: int) -> int:
    """Rows the action panel may take: its cap, or what the rest of the screen leaves once
    Holders have their least (``others``: the rows of everything else shown). Past that
    the whole screen scrolled, header and GPUs out of view."""
    cap = PROGRESS_MAX if height >= SHORT else PROGRESS_MAX_SHORT
    return max(3, min(cap, height - others - MIDDLE_MIN))


def size_classes(width: int, height: int) -> dict[str, bool]:
    """Screen CSS class -> whether it applies at ``width`` x ``height``."""
    return {
        "-narrow": width < WIDE,
        "-thin": width < THIN,
        "-short": height < SHORT,
        "-tiny": height < TINY,
    }


PROGRESS_CELL = 31 + 3  # a compact GPU cell of the action panel, and the gap after it


def progress_columns(width: int, height: int) -> int:
    """GPUs per line in the action panel: one with room to spare, else as many as fit."""
    if height >= SHORT:
        return 1
    return max(1, (width - 4 + 3) // PROGRESS_CELL)
