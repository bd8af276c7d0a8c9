"""``gpudash snapshot --prometheus [URL]``: the fleet table, once, from Prometheus.

stdout: the table (``--json``: ``gpudash.fleetprom.fleet.fleet_json``); stderr: why it
could not be read. Exit 0 with the table; 3 when Prometheus could not be read (down, slow,
refused 401/403, TLS, a query error, an answer too big or not Prometheus'), with one line
saying which; 2 for a [prometheus] setting or URL that cannot be used.
"""

from __future__ import annotations

import argparse

from gpudash.cli.closing import CommandLoop
from gpudash.cli.contract import Exit
from gpudash.cli.terminal import Terminal
from gpudash.domain.units import NA
from gpudash.domain.untrusted import clean, json_dumps
from gpudash.fleetprom.client import PromClient, PromError
from gpudash.fleetprom.fleet import fleet_json, read_current
from gpudash.fleetprom.rows import PromFleet, PromHost
from gpudash.fleetprom.sshname import SshNameTemplate

GIB = 2.0**30


def _gib(value: float | None) -> str:
    return NA if value is None else f"{value / GIB:.1f}"


def host_line(h: PromHost, now: float) -> str:
    """One host as a line of text (its name and labels cleaned)."""
    age = h.age(now)
    mem = NA if h.used_bytes is None else f"{_gib(h.used_bytes)}/{_gib(h.total_bytes)}"
    crash = NA if h.crash_looping is None else str(len(h.crash_looping))
    gpus = NA if h.gpus is None else f"{h.gpus_held if h.gpus_held is not None else NA}/{h.gpus}"
    cells = [f"{clean(h.name)[:40]:<40}", f"{gpus:>5}", f"{mem:>13}",
             f"{_gib(h.orphaned_bytes):>8}", f"{_gib(h.reclaimable_bytes):>8}",
             f"{_gib(h.unattributed_bytes):>8}", f"{_gib(h.unowned_bytes):>8}",
             f"{crash:>5}", f"{len(h.alerts):>6}",
             f"{NA if age is None else f'{age:.0f}':>6}", " ".join(sorted(h.states(now)))]
    return " ".join(cells)


HEADER = (f"{'host':<40} {'GPUs':>5} {'memory GiB':>13} {'orphan':>8} {'reclaim':>8} "
          f"{'unattr':>8} {'no job':>8} {'loops':>5} {'alerts':>6} {'age s':>6} states")


def fleet_lines(fleet: PromFleet) -> list[str]:
    return [HEADER, *(host_line(h, fleet.at) for h in fleet.hosts)]


def cmd_prom_snapshot(args: argparse.Namespace, term: Terminal) -> int:
    settings = args.prom
    client = PromClient(settings)
    try:
        with CommandLoop() as loop:
            fleet = loop.run(read_current(client))
    except PromError as exc:
        term.error(f"prometheus {clean(settings.url)}: {exc}")
        return Exit.CONNECT
    except KeyboardInterrupt:
        term.error("interrupted: nothing printed")
        return Exit.CANCELLED
    finally:
        client.close()
    if args.json:
        doc = fleet_json(fleet, settings.url, SshNameTemplate(settings.ssh_name))
        term.result_json(json_dumps(doc, indent=2))
    else:
        term.result(fleet_lines(fleet))
    return Exit.OK
