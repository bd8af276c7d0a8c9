"""What the fleet table says of one host: its columns (which a terminal of a given width
shows, and how wide), and the cells of its row, with what the row sorts by and which
state filter words it matches.

A row is made from a host's ``HostSummary`` (``gpudash.domain.fleet``), its link state
and the last action on it; ``gpudash.ui.fleet_screen`` draws the rows.
"""

from __future__ import annotations

from rich.text import Text

from gpudash.domain.fleet import HostSummary
from gpudash.domain.units import MIB_PER_GIB, NA, gib_of
from gpudash.record import record
from gpudash.ui.hosts import HostView
from gpudash.ui.palette import Palette
from gpudash.ui.state import LastAction
from gpudash.ui.text import literal

LINK_ORDER = {"error": 0, "reconnecting": 1, "stale": 2, "connecting": 3, "connected": 4}
# Filter words that pick hosts by state (a host whose name contains the word still shows).
STATE_FILTERS = {
    "orphans": "hosts with orphaned GPU processes",
    "crashloop": "hosts with a unit systemd keeps restarting",
    "down": "hosts gpudash cannot read now (failing or reconnecting)",
    "reclaim": "hosts with GPU memory reclaim would give back",
    "strays": "hosts where a process holds a GPU its scheduler did not allocate to it (Slurm)",
}
# What each column says (the help screen's second part).
COLUMN_HELP = (
    ("Host", "the host's name, as given on the command line or hosts file"),
    ("Link", "connected, stale N s (no sample for a while), connecting, reconnecting, or "
             "the error in full (wrapped) and when the next try is"),
    ("GPUs", "GPUs on which some process holds memory / GPUs on the host"),
    ("GPU memory", "used / total over all its GPUs (from 140 columns)"),
    ("Reclaim GiB", "what reclaim would give back: held by orphans, or by units down or "
                    "respawning; +? where the driver cannot tell a holder's memory"),
    ("Orphans", "processes holding GPU memory whose owner is gone"),
    ("Stray", "processes holding a GPU Slurm did not allocate to them: no running job has "
              "it, or another job does (from 140 columns; the filter word strays)"),
    ("Crash loop", "units systemd keeps restarting: how many, and the first"),
    ("Last action", "the last action on this host in this session, and its outcome"),
)
LINK_LINES_MAX = 3  # a long error wraps in its row, up to this many lines


@record
class FleetColumn:
    key: str
    title: str
    width: int  # 0: shares what the fixed columns leave (link, last action)
    short: str = ""  # the title on a narrow terminal
    narrow: int | None = None  # the width there (0: hidden); None: as wide
    wide_only: bool = False  # shown from 140 columns only


COLUMNS = (
    FleetColumn("host", "Host", 18, narrow=12),
    FleetColumn("link", "Link", 0),
    FleetColumn("gpus", "GPUs", 5),
    FleetColumn("mem", "GPU memory", 15, wide_only=True),
    FleetColumn("reclaim", "Reclaim GiB", 12, "Reclaim", 8),
    FleetColumn("orphans", "Orphans", 7, "Orph", 5),
    FleetColumn("stray", "Stray", 5, wide_only=True),
    FleetColumn("crash", "Crash loop", 16, "Loop", 8),
    FleetColumn("action", "Last action", 0),
)
COLUMN_KEYS = tuple(c.key for c in COLUMNS)
MODES = ((140, "wide"), (100, "medium"), (0, "narrow"))  # from this many columns
# Crash loop ("1 vllm-deepseek-v3.service") takes what its longest cell needs, wide: by
# all a terminal has over this many columns (at 200 it cut the name beside 30 empty ones)
CRASH_GROWS_FROM = 140


def mode_of(width: int) -> str:
    return next(mode for least, mode in MODES if width >= least)


def column_widths(width: int, crash_len: int = 0, columns: tuple[FleetColumn, ...] = COLUMNS
                  ) -> list[tuple[FleetColumn, str, int]]:
    """(column, title, width) of the columns a terminal ``width`` wide shows: the memory
    column from 140, short titles under 100; Crash loop as wide as its longest cell
    (``crash_len``) where the terminal has the room; Link and Last action share the rest
    (Link alone takes it where there is no Last action)."""
    mode = mode_of(width)
    fixed: list[tuple[FleetColumn, str, int]] = []
    for col in columns:
        if col.wide_only and mode != "wide":
            continue
        narrow = mode == "narrow"
        title = col.short if narrow and col.short else col.title
        w = col.narrow if narrow and col.narrow is not None else col.width
        if col.key == "crash" and mode == "wide":  # room to spare: the unit's whole name
            w = max(w, min(crash_len + 1, w + max(0, width - CRASH_GROWS_FROM)))
        fixed.append((col, title, max(w, len(title) + 1) if w else 0))
    taken = sum(w + 2 for _c, _t, w in fixed if w)  # a cell is padded by one on each side
    rest = max(24, width - 4 - taken - 4)  # the border, the scrollbar, two flexible cells
    flexible = [c.key for c, _t, w in fixed if not w]
    link = rest if flexible == ["link"] else max(12, min(44, rest * 11 // 20))
    return [(c, t, w or (link if c.key == "link" else rest - link)) for c, t, w in fixed]


@record(frozen=False)
class FleetRow:
    """What one host's row shows, and what it sorts by."""

    cells: dict[str, Text]
    sort: dict[str, tuple[object, ...]]
    link_text: str
    states: frozenset[str] = frozenset()  # which of STATE_FILTERS it is in


def link_lines(row: FleetRow, width: int) -> int:
    """How many lines the row's Link cell needs at ``width`` (at most LINK_LINES_MAX)."""
    length = row.cells["link"].cell_len
    return max(1, min(LINK_LINES_MAX, -(-length // max(1, width))))


def _state_style(kind: str, pal: Palette) -> str:
    return {"ok": pal.success, "warn": pal.warning, "error": f"bold {pal.error}"}[kind]


def fleet_row(
    view: HostView, summary: HostSummary | None, last: LastAction | None, now: float,
    stale_after: float, pal: Palette,
) -> FleetRow:
    """The cells of one host's row (host text shown literally)."""
    raw, kind = view.status(now, stale_after)
    state = raw.split(" ", 1)[0].rstrip(":")
    # Errors name their host ("gpu07: no answer …"); the row already does.
    status = raw.replace(f"error: {view.name}: ", "error: ", 1)
    cells: dict[str, Text] = {"host": literal(view.name, style="bold")}
    link = Text("● ", style=_state_style(kind, pal))
    link.append_text(literal(status, style=_state_style(kind, pal)))
    cells["link"] = link
    sort: dict[str, tuple[object, ...]] = {
        "host": (view.name,), "link": (LINK_ORDER.get(state, 5), view.name)}
    states = {"down"} if view.state in ("error", "reconnecting") else set()
    if summary is not None:
        states |= {name for name, on in (("orphans", summary.orphans > 0),
                                         ("crashloop", bool(summary.crash_looping)),
                                         ("strays", summary.strays > 0),
                                         ("reclaim", summary.reclaimable_mib > 0
                                          or summary.unknown_holders > 0)) if on}
    if summary is None:
        for key in ("gpus", "mem", "reclaim", "orphans", "stray", "crash"):
            cells[key] = Text(NA, style="dim")
            sort[key] = (-1,)
    else:
        s = summary
        cells["gpus"] = Text(f"{s.gpus_in_use}/{s.gpus_total}")
        cells["mem"] = Text(gib_of(s.used_mib, s.total_mib))
        reclaim = f"{s.reclaimable_mib / MIB_PER_GIB:.1f}" + ("+?" if s.unknown_holders else "")
        cells["reclaim"] = Text(reclaim, style=f"bold {pal.orphan}" if s.reclaimable_mib
                                or s.unknown_holders else "dim")
        cells["orphans"] = Text(str(s.orphans), style=f"bold {pal.orphan}" if s.orphans
                                else "dim")
        cells["stray"] = Text(str(s.strays), style=f"bold {pal.warning}" if s.strays
                              else "dim")
        if s.crash_looping:
            crash = literal(f"{len(s.crash_looping)} {s.crash_looping[0].removesuffix('.service')}",
                            style=f"bold {pal.error}")
        else:
            crash = Text("0", style="dim")
        cells["crash"] = crash
        sort |= {"gpus": (s.gpus_in_use, s.gpus_total), "mem": (s.used_mib or 0,),
                 "reclaim": (s.reclaimable_mib, s.unknown_holders), "orphans": (s.orphans,),
                 "stray": (s.strays,),
                 "crash": (len(s.crash_looping),)}
    if last is None:
        cells["action"] = Text("—", style="dim")
        sort["action"] = (0.0,)
    elif last.running:  # where it stands first: the cell is narrow
        cells["action"] = literal(f"⋯ {last.outcome} · {last.title}", style="bold")
        sort["action"] = (last.at,)
    else:
        mark = {True: "✔ ", False: "✘ ", None: ""}[last.ok]
        style = {True: pal.success, False: pal.error, None: ""}[last.ok]
        cells["action"] = literal(f"{mark}{last.title}: {last.outcome}", style=style)
        sort["action"] = (last.at,)
    return FleetRow(cells, sort, raw, frozenset(states))


def error_row(view: HostView, exc: Exception, pal: Palette) -> FleetRow:
    """The row of a host whose row could not be made: the reason, in the row."""
    why = f"display error: {type(exc).__name__}: {exc}"
    cells = {k: Text("") for k in COLUMN_KEYS}
    cells["host"] = literal(view.name, style="bold")
    cells["link"] = literal(why, style=f"bold {pal.error}")
    return FleetRow(cells, {k: (-1,) for k in COLUMN_KEYS} | {"host": (view.name,)}, why)

