"""Crash loops as only a history of samples shows them.

One respawn is the incident (``kill -9`` on a ``Restart=always`` server); a crash loop is
a unit that dies again and again (a model that does not fit, a bad flag). One snapshot
tells them apart in most cases (``owners.service.unit_crash_looping``, the fleet view's rule);
``RestartWatch`` adds what a follower of the host sees: restarts close together, and a
unit that drops out of the snapshot between crashes (it held no GPU memory just then).
Pure: the caller passes the time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from gpudash.domain.model import Unit
from gpudash.domain.owners.service import unit_crash_looping

WINDOW_RESTARTS = 2  # automatic restarts seen ...
CRASH_LOOP_WINDOW_S = 300.0  # ... within this many seconds make a crash loop too
# Units remembered per host: twice what one snapshot may carry (the collector's 256). A
# host that sends new names sample after sample (each one a series of the exporter's)
# pushes out the names it sent longest ago, never grows what is kept.
MAX_UNITS = 512
MAX_RESTARTS = 1 << 31  # NRestarts is a systemd unsigned


def looping_now(units: Iterable[Unit]) -> frozenset[str]:
    """What one sample says: the units systemd keeps restarting (a watch that has seen only
    this sample says the same: the rule is one)."""
    return frozenset(u.name for u in units if unit_crash_looping(u))


class RestartWatch:
    """Automatic restarts of one host's units, as seen sample after sample: crash-looping
    is what the fleet view says of one snapshot (``owners.service.unit_crash_looping``), or
    ``restarts`` seen within ``window_s``.

    ``NRestarts`` counts automatic restarts since the unit was last started by hand (a
    manual start resets it to 0); an increase between two samples is a restart that
    happened then. Restarts before the first sample have no time and never count.

    A host reports a unit only while it holds GPU memory (or is watched), so a unit that
    crashed may be missing from a few samples: it is remembered for a window after it was
    last reported, and stays crash-looping while its restarts in the window say so.

    What is kept is bounded whatever the host sends: at most ``max_units`` names (those
    reported longest ago are forgotten first), and per unit only the restarts that can
    still decide a loop.
    """

    def __init__(self, window_s: float = CRASH_LOOP_WINDOW_S,
                 restarts: int = WINDOW_RESTARTS, max_units: int = MAX_UNITS) -> None:
        self.window_s = window_s
        self.restarts = restarts
        self.max_units = max_units
        self._count: dict[str, int] = {}  # unit -> NRestarts when last reported
        self._seen: dict[str, float] = {}  # unit -> when last reported
        self._events: dict[str, deque[tuple[float, int]]] = {}  # unit -> (when, how many)

    def observe(self, units: Iterable[Unit], now: float) -> frozenset[str]:
        """Record one sample's units; the names of those crash-looping now."""
        units = tuple(units)
        looping = set(looping_now(units))
        for unit in units:
            self._seen.pop(unit.name, None)
            self._seen[unit.name] = now  # the newest last: the oldest are forgotten first
            # each event counts one restart or more: this many decide a loop
            events = self._events.setdefault(unit.name, deque(maxlen=max(1, self.restarts)))
            n = unit.n_restarts
            # a count no systemd writes (a host that lies, or a bug) is no restart: the
            # watch must never end the follower that asks it
            if isinstance(n, int) and not isinstance(n, bool) and 0 <= n < MAX_RESTARTS:
                before = self._count.get(unit.name)
                if before is not None and n > before:
                    events.append((now, n - before))
                self._count[unit.name] = n
        while len(self._seen) > self.max_units:
            self._forget(next(iter(self._seen)))
        cutoff = now - self.window_s
        for name in list(self._seen):
            if self._seen[name] < cutoff:  # not reported for a whole window: forget it
                self._forget(name)
                continue
            events = self._events[name]
            while events and events[0][0] < cutoff:
                events.popleft()
            if sum(n for _, n in events) >= self.restarts:
                looping.add(name)
        return frozenset(looping)

    def _forget(self, name: str) -> None:
        del self._seen[name], self._events[name]
        self._count.pop(name, None)

    def __len__(self) -> int:
        """How many units are remembered."""
        return len(self._seen)
