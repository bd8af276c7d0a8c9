"""The holders table's columns: declared once, with the priority that decides which go
first when the table is narrower than all of them.

One more column (a per-process SM utilisation, say) is one more ``HolderColumn`` here and one
more cell where ``holders.py`` builds a process row; the fitting, the sort indicator and
the cached cells follow from this list.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpudash.record import record

KEEP = 100  # a priority that is never dropped
# Flags take their short form when this is the lowest priority left: after User went
# (a wide terminal keeps the full flags rather than the user), before CPU, RSS, St, Age.
ABBREVIATE_FLAGS = 30

CELL_PAD = 2  # DataTable's cell padding, one column each side
COMMAND_MIN = 0  # the command line starts where the columns end; Right scrolls to it
# ... but keeps up to this many on screen while a column less needed than Flags can go
# for it: the cells past COMMAND_SOFT_FROM, at most COMMAND_SOFT (a wider table never
# shows fewer columns). An orphan's reason ("orphan: earlier run, main now 215207") and
# the start of its command line are read at 160 columns beside the unit panel; a table
# of 78 cells or less keeps its figures (CPU, RSS, St, Age) and Right scrolls to the
# command.
COMMAND_SOFT = 36
COMMAND_SOFT_FROM = 78
FLAGS_PRIORITY = 90
COMMAND_WIDTH = 200  # past the screen's edge: the rest scrolls into view with Right
FLAGS_MAX = 34  # "16×ORPHAN RESPAWNED UNIT INACTIVE" and a little more


@record
class HolderColumn:
    """One column. ``fits``: as wide as its widest cell (and its header), up to ``width``."""

    key: str
    label: str
    width: int
    priority: int  # the lowest goes first when space is short; KEEP never goes
    fits: bool = False


COLUMNS: tuple[HolderColumn, ...] = (
    HolderColumn("who", "Owner / PID", 28, KEEP, fits=True),  # fixed: it never scrolls away
    HolderColumn("mem", "GPU memory", 13, KEEP),
    # abbreviated (ORPH+2) before anything goes; an empty column took 15 cells that CPU
    # and RSS lack on a small terminal
    HolderColumn("flags", "Flags", FLAGS_MAX, FLAGS_PRIORITY, fits=True),
    HolderColumn("cpu", "CPU", 5, 60),  # % of one CPU: a spinning orphan from an idle one
    # its share of the GPU's SM time (NVML's per-process samples): busy or idle on the GPU.
    # It goes before St and Age: at 120x35 after the incident CPU, RSS, St and Age stay.
    HolderColumn("sm", "SM%", 4, 35),
    HolderColumn("rss", "RSS", 8, 50),
    # after CPU and RSS: ZOMBIE and D-STATE are flags already
    HolderColumn("st", "St", 2, 40),
    HolderColumn("age", "Age", 5, 45),
    HolderColumn("user", "User", 8, 20),  # the first to go: at 80 columns PIDs matter more
    HolderColumn("cmd", "Command", COMMAND_WIDTH, KEEP),
)
KEYS = tuple(c.key for c in COLUMNS)
INDEX = {c.key: i for i, c in enumerate(COLUMNS)}


@record
class Fit:
    """What the table shows at one width: (key, label, width) of each column shown, and
    whether Flags shows its short form."""

    columns: tuple[tuple[str, str, int], ...]
    short_flags: bool


def fit_columns(room: int, widest: dict[str, int], flags_short: int,
                labels: dict[str, str] | None = None, keep: str | None = None) -> Fit:
    """The columns that fit ``room`` cells (the table's width), the command line keeping
    up to ``COMMAND_SOFT`` (the cells past ``COMMAND_SOFT_FROM``) while columns below
    Flags can go, ``COMMAND_MIN`` after:
    the columns of the lowest priority go, one by one, Flags taking its short form at
    ``ABBREVIATE_FLAGS``. ``widest``: the widest cell of each
    column that fits its cells; ``labels`` replaces some headers (the sort indicator);
    ``keep``: a column that stays whatever its priority (the one sorted by: its header
    shows the order).
    """
    labels = labels or {}
    soft = max(COMMAND_MIN, min(COMMAND_SOFT, room - COMMAND_SOFT_FROM))

    def width(c: HolderColumn, short: bool) -> int:
        label = len(labels.get(c.key, c.label))
        if c.fits:
            need = flags_short if short and c.key == "flags" else widest.get(c.key, 0)
            return min(c.width, max(label, need))
        return max(c.width, label) if c.key != "cmd" else c.width

    def needed(shown: Sequence[HolderColumn], short: bool, command: int) -> int:
        return sum((command if c.key == "cmd" else width(c, short)) + CELL_PAD
                   for c in shown)

    shown = list(COLUMNS)
    short = False
    for c in sorted((c for c in COLUMNS if c.priority < KEEP and c.key != keep),
                    key=lambda c: c.priority):
        command = soft if c.priority < FLAGS_PRIORITY else COMMAND_MIN
        if needed(shown, short, command) <= room:
            break
        if c.priority > ABBREVIATE_FLAGS and not short:
            short = True
            if needed(shown, short, command) <= room:
                break
        shown.remove(c)
    else:
        short = short or needed(shown, short, COMMAND_MIN) > room
    return Fit(tuple((c.key, labels.get(c.key, c.label), width(c, short)) for c in shown),
               short)
