"""What the fleet table says of a host Prometheus has (``gpudash.fleetprom.rows.PromHost``):
its columns and the cells of its row, with what it sorts by and the filter words it
answers to. Label text is the server's: every cell that shows it is ``literal``."""

from __future__ import annotations

from functools import lru_cache

from rich.text import Text

from gpudash.domain.units import NA
from gpudash.fleetprom.rows import STALE_AFTER_S, PromHost
from gpudash.fleetprom.visit import Visit, as_visited
from gpudash.ui.fleet_rows import STATE_FILTERS, FleetColumn, FleetRow
from gpudash.ui.palette import Palette
from gpudash.ui.text import duration, literal

GIB = 2.0**30
PROM_FILTERS = {
    **STATE_FILTERS,
    "down": "hosts whose scrape target is down, that gpudash's exporter cannot read, or "
            "that SSH did not reach when opened",
    "alerting": "hosts with a firing gpudash alert (ALERTS)",
    "stale": f"hosts not scraped for {STALE_AFTER_S:.0f} s, gone from Prometheus' answers, "
             "or shown from before Prometheus failed",
}
PROM_COLUMNS = (
    FleetColumn("host", "Host", 18, narrow=12),
    FleetColumn("link", "Scrape", 0),
    FleetColumn("gpus", "GPUs", 5),
    FleetColumn("mem", "GPU memory", 15, wide_only=True),
    FleetColumn("reclaim", "Reclaim GiB", 12, "Reclaim", 8),
    FleetColumn("orphans", "Orphans", 7, "Orph", 5),
    FleetColumn("crash", "Crash loop", 16, "Loop", 8),
    FleetColumn("alerts", "Alerts", 7, "Alrt", 5),
    FleetColumn("unattr", "Unattr GiB", 11, wide_only=True),
    FleetColumn("noowner", "No owner GiB", 13, "NoOwn", 6),
)
PROM_COLUMN_HELP = (
    ("Host", "gpudash's host label, else dcgm-exporter's hostname (Hostname), else the "
             "scrape target without its port"),
    ("Scrape", "up and how long ago Prometheus scraped it; stale N s; target down; "
               "exporter cannot read it (gpudash's link to it is down); gone (no longer in "
               "the answers, kept as last seen); ssh failed (opened, SSH did not reach it); "
               "figures as ssh saw them (opened: its own figures, until Prometheus has a "
               "newer sample)"),
    ("GPUs", "GPUs some process holds memory on / GPUs (dcgm-exporter only: more than "
             "64 MiB used)"),
    ("GPU memory", "used / total over all its GPUs (from 140 columns)"),
    ("Reclaim GiB", "what reclaim would give back (gpudash's exporter only)"),
    ("Orphans", "processes holding GPU memory whose owner is gone (gpudash's exporter only)"),
    ("Crash loop", "units systemd keeps restarting (gpudash's exporter only)"),
    ("Alerts", "gpudash's alerts firing for the host (ALERTS)"),
    ("Unattr GiB", "memory used that no listed process accounts for (gpudash's exporter "
                   "only; from 140 columns)"),
    ("No owner GiB", "gpudash: held outside what Slurm allocated (stray); dcgm-exporter: "
                     "held on GPUs no job (hpc_job) and no pod has, where its scrape job "
                     "labels any"),
)
LINK_ORDER = {"error": 0, "warn": 1, "ok": 2}


def _gib(value: float | None) -> str:
    return NA if value is None else f"{value / GIB:.1f}"


@lru_cache(maxsize=4096)
def _cell(plain: str, style: str = "") -> Text:
    """A cell, one object for every row that shows the same: at 5,000 hosts most cells
    repeat ("0", "N/A", "6/8") and the rows are kept for the filter and the order. (The
    table never changes a cell it is given; cells here are made and then only read.)"""
    return Text(plain, style=style)


@lru_cache(maxsize=4096)
def _link(status: str, style: str) -> Text:
    link = Text("● ", style=style)
    link.append_text(literal(status, style=style))
    return link


def _num(value: float | None, bold: str) -> Text:
    if value is None:
        return _cell(NA, "dim")
    return _cell(_gib(value), bold if value > 0 else "dim")


def scrape_state(host: PromHost, now: float, failing: bool) -> tuple[str, str]:
    """(text, kind: ok | warn | error) of the host's Scrape cell."""
    age = host.age(now)
    if host.target_down:
        return "target down", "error"
    if host.link_up is False:
        return "exporter cannot read it", "error"
    if host.gone_since is not None:
        return f"gone {duration(max(0.0, now - host.gone_since))}", "warn"
    if age is None:
        return "not scraped", "warn"
    if failing or age > STALE_AFTER_S:
        return f"stale {duration(age)}", "warn"
    return f"up {duration(age)}", "ok"


def row_status(host: PromHost, visit: Visit | None, now: float, failing: bool
               ) -> tuple[str, str]:
    """(text, kind) of the host's Scrape cell, with what opening it over SSH found: SSH
    did not reach it; or the row shows the host's own figures, newer than Prometheus'."""
    if visit is not None and visit.error is not None:
        return (f"ssh failed {duration(max(0.0, now - visit.ended_at))} ago: "
                f"{visit.error}", "error")
    status, kind = scrape_state(host, now, failing)
    if visit is not None and visit.newer_than(host):
        return f"{status} · figures as ssh saw them", kind
    return status, kind


def noowner_bytes(host: PromHost) -> float | None:
    """Memory held by nobody the scheduler knows: gpudash's stray bytes, or dcgm's held on
    GPUs no job and no pod has."""
    return host.stray_bytes if "gpudash" in host.sources else host.unowned_bytes


def prom_row(host: PromHost, now: float, failing: bool, pal: Palette,
             visit: Visit | None = None) -> FleetRow:
    """The cells of one host's row (label text shown literally); ``visit``: what opening
    it over SSH found (``gpudash.fleetprom.visit``)."""
    status, kind = row_status(host, visit, now, failing)
    host = as_visited(host, visit)
    style = {"ok": pal.success, "warn": pal.warning, "error": f"bold {pal.error}"}[kind]
    link = _link(status, style)
    orphan = f"bold {pal.orphan}"
    cells: dict[str, Text] = {"host": literal(host.name, style="bold"), "link": link}
    cells["gpus"] = _cell(NA if host.gpus is None else
                          f"{NA if host.gpus_held is None else host.gpus_held}/{host.gpus}",
                          "dim" if host.gpus is None else "")
    cells["mem"] = _cell(NA if host.used_bytes is None
                         else f"{_gib(host.used_bytes)}/{_gib(host.total_bytes)} GiB")
    cells["reclaim"] = _num(host.reclaimable_bytes, orphan)
    cells["orphans"] = (_cell(NA, "dim") if host.orphans is None else
                        _cell(str(host.orphans), orphan if host.orphans else "dim"))
    loops = host.crash_looping
    cells["crash"] = (_cell(NA, "dim") if loops is None else _cell("0", "dim")
                      if not loops else literal(f"{len(loops)} {loops[0].removesuffix('.service')}",
                                                style=f"bold {pal.error}"))
    cells["alerts"] = _cell(str(len(host.alerts)), f"bold {pal.error}" if host.alerts else "dim")
    cells["unattr"] = _num(host.unattributed_bytes, pal.warning)
    cells["noowner"] = _num(noowner_bytes(host), orphan)
    states = (set(host.states(now)) | ({"stale"} if failing else set())
              | ({"down"} if visit is not None and visit.error is not None else set()))

    def n(value: float | None) -> tuple[object, ...]:
        return (-1.0 if value is None else value,)

    sort: dict[str, tuple[object, ...]] = {
        "host": (host.name,), "link": (LINK_ORDER[kind], host.name),
        "gpus": (host.gpus_held if host.gpus_held is not None else -1, host.gpus or -1),
        "mem": n(host.used_bytes), "reclaim": n(host.reclaimable_bytes),
        "orphans": n(host.orphans), "crash": n(None if loops is None else len(loops)),
        "alerts": (len(host.alerts),), "unattr": n(host.unattributed_bytes),
        "noowner": n(noowner_bytes(host)),
    }
    return FleetRow(cells, sort, status, frozenset(states))
