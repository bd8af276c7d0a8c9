"""Why a host's crash-looping units fail, as their journals say (no Textual here).

The fleet table and a swap know a crash loop's cause; the host screen reads it too: for
each unit systemd keeps restarting, its journal's last lines are read and the line that
explains the failure is kept (``gpudash.serving.logsigns``). A help, read again only when
the unit restarted since and ``REREAD_S`` has passed: never a read per sample.
"""

from __future__ import annotations

from gpudash.domain.model import HostSnapshot
from gpudash.engine.journal import journal_tail
from gpudash.protocol.source import Capability, HostControl
from gpudash.record import record
from gpudash.serving.logsigns import Failure, failure

REREAD_S = 30.0  # a unit that keeps crashing: its journal read again at most this often
MAX_UNITS = 8  # crash-looping units of one host whose reasons are kept


@record
class CrashReason:
    restarts: int | None  # NRestarts when its journal was read
    read_at: float
    failure: Failure | None  # None: the journal says nothing gpudash recognises


class CrashReasons:
    """One host's crash-looping units and why each fails, read from its journal."""

    def __init__(self) -> None:
        self._known: dict[str, CrashReason] = {}
        self._reading: set[str] = set()

    def due(self, snapshot: HostSnapshot, crash_looping: frozenset[str], control: HostControl,
            now: float) -> list[tuple[str, int | None]]:
        """The (unit, NRestarts) whose journal should be read now."""
        if Capability.JOURNAL not in control.capabilities:
            return []
        looping = [u for u in snapshot.units if u.name in crash_looping]
        names = {u.name for u in looping}
        for gone in [n for n in self._known if n not in names]:
            del self._known[gone]  # not crash-looping any more: forgotten
        out = []
        for unit in looping[:MAX_UNITS]:
            known = self._known.get(unit.name)
            if unit.name in self._reading or (known is not None and (
                    known.restarts == unit.n_restarts or now - known.read_at < REREAD_S)):
                continue
            out.append((unit.name, unit.n_restarts))
        return out

    async def read(self, control: HostControl, unit: str, restarts: int | None,
                   now: float) -> Failure | None:
        """Read ``unit``'s journal and keep the line that explains its failure."""
        self._reading.add(unit)
        try:
            lines = await journal_tail(control, unit)
        finally:
            self._reading.discard(unit)
        found = failure(lines)
        self._known[unit] = CrashReason(restarts, now, found)
        return found

    def reason(self, unit: str) -> CrashReason | None:
        return self._known.get(unit)
