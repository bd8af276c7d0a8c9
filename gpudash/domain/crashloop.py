"""Crash loops as only a history of samples shows them.

One respawn is the incident (``kill -9`` on a ``Restart=always`` server); a crash loop is
a unit that dies again and again (a model that does not fit, a bad flag). One snapshot
tells them apart in most cases (``fleet.unit_crash_looping``, the fleet view's rule);
``RestartWatch`` adds what a follower of the host sees: restarts close together, and a
unit that drops out of the snapshot between crashes (it held no GPU memory just then).
Pure: the caller passes the time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from gpudash.domain.fleet import unit_crash_looping
from gpudash.domain.model import Unit

WINDOW_RESTARTS = 2  # automatic restarts seen ...
CRASH_LOOP_WINDOW_S = 300.0  # ... within this many seconds make a crash loop too


class RestartWatch:
    """Automatic restarts of one host's units, as seen sample after sample: crash-looping
    is what the fleet view says of one snapshot (``fleet.unit_crash_looping``), or
    ``restarts`` seen within ``window_s``.

    ``NRestarts`` counts automatic restarts since the unit was last started by hand (a
    manual start resets it to 0); an increase between two samples is a restart that
    happened then. Restarts before the first sample have no time and never count.

    A host reports a unit only while it holds GPU memory (or is watched), so a unit that
    crashed may be missing from a few samples: it is remembered for a window after it was
    last reported, and stays crash-looping while its restarts in the window say so.
    """

    def __init__(self, window_s: float = CRASH_LOOP_WINDOW_S,
                 restarts: int = WINDOW_RESTARTS) -> None:
        self.window_s = window_s
        self.restarts = restarts
        self._count: dict[str, int] = {}  # unit -> NRestarts when last reported
        self._seen: dict[str, float] = {}  # unit -> when last reported
        self._events: dict[str, deque[tuple[float, int]]] = {}  # unit -> (when, how many)

    def observe(self, units: Iterable[Unit], now: float) -> frozenset[str]:
        """Record one sample's units; the names of those crash-looping now."""
        looping: set[str] = set()
        for unit in units:
            self._seen[unit.name] = now
            events = self._events.setdefault(unit.name, deque())
            if unit.n_restarts is not None:
                before = self._count.get(unit.name)
                if before is not None and unit.n_restarts > before:
                    events.append((now, unit.n_restarts - before))
                self._count[unit.name] = unit.n_restarts
            if unit_crash_looping(unit):
                looping.add(unit.name)
        cutoff = now - self.window_s
        for name in list(self._seen):
            if self._seen[name] < cutoff:  # not reported for a whole window: forget it
                del self._seen[name], self._events[name]
                self._count.pop(name, None)
                continue
            events = self._events[name]
            while events and events[0][0] < cutoff:
                events.popleft()
            if sum(n for _, n in events) >= self.restarts:
                looping.add(name)
        return frozenset(looping)
