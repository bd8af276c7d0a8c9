"""What the plot draws: per GPU, its memory, SM utilisation and power over the last samples.

A sample keeps one small array of values in GPU order (the GPUs' indexes once per run of
samples with the same GPUs): utilisation and power change at every sample on a busy host,
and a fleet keeps 300 samples of each for every host. An unchanged sample shares the
previous one's array. Nothing here draws anything.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from gpudash.domain.model import Gpu, HostSnapshot
from gpudash.domain.units import MIB_PER_GIB
from gpudash.record import record

HISTORY = 300  # samples kept per host and metric


@record
class Metric:
    """One figure per GPU the plot can show."""

    name: str  # its key in settings and tests
    title: str  # above the plot
    unit: str  # the y axis' unit
    typecode: str  # of the array that keeps it (the range of its raw values)
    read: Callable[[Gpu], float | int | None]  # the raw value from a sample
    top: Callable[[HostSnapshot], float | None]  # the y axis' top (None: the highest drawn)
    scale: float = 1.0  # raw value / scale = the value drawn, in ``unit``


def _top(values: Iterable[float | int | None], scale: float = 1.0) -> float | None:
    """The highest of a host's figures that can be an axis' top (a host's NaN, infinity
    or absurd size is not: plotext aborts the process on some), None if none can."""
    tops = [v / scale for v in values
            if v is not None and 0 < v < 2**53 and math.isfinite(v)]
    return max(tops) if tops else None


def _memory_top(snapshot: HostSnapshot) -> float | None:
    return _top((g.memory_total_mib for g in snapshot.gpus), MIB_PER_GIB)


def _power_top(snapshot: HostSnapshot) -> float | None:
    return _top(g.power_limit_w for g in snapshot.gpus)


MEMORY = Metric("memory", "memory", "GiB", "L", lambda g: g.memory_used_mib, _memory_top,
                MIB_PER_GIB)
UTILISATION = Metric("utilisation", "SM utilisation", "%", "H", lambda g: g.utilization_pct,
                     lambda _s: 100.0)
POWER = Metric("power", "power", "W", "H", lambda g: g.power_w, _power_top)
METRICS = (MEMORY, UTILISATION, POWER)

_NONE = {"L": 0xFFFFFFFF, "H": 0xFFFF}  # the array's value for "not read" (N/A)


def _cell(value: float | int | None, none: int) -> int:
    """A host's figure as the array keeps it: N/A for none, NaN or infinity (a host's
    garbage), within the array's range otherwise."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return none
    return max(0, min(none - 1, round(value)))


class GpuHistory(Sequence[tuple[float, dict[int, int | None]]]):
    """One metric's last samples of every GPU of a host: ``(time, {gpu: value})``."""

    __slots__ = ("metric", "_samples")

    def __init__(self, metric: Metric, maxlen: int = HISTORY) -> None:
        self.metric = metric
        # (host time, the GPUs' indexes, their values in that order)
        self._samples: deque[tuple[float, tuple[int, ...], array[int]]] = deque(maxlen=maxlen)

    def record(self, snapshot: HostSnapshot) -> None:
        none = _NONE[self.metric.typecode]
        gpus = tuple(g.index for g in snapshot.gpus)
        values = array(self.metric.typecode,
                       (_cell(self.metric.read(g), none) for g in snapshot.gpus))
        if self._samples:
            _t, last_gpus, last = self._samples[-1]
            if last_gpus == gpus:
                gpus = last_gpus  # one tuple for a run of samples
                if last == values:
                    values = last  # unchanged: the same array
        self._samples.append((snapshot.taken_at, gpus, values))

    def __len__(self) -> int:
        return len(self._samples)

    def __getitem__(self, i: int) -> tuple[float, dict[int, int | None]]:  # type: ignore[override]
        return self._point(self._samples[i])  # (a slice is not asked for)

    def __iter__(self) -> Iterator[tuple[float, dict[int, int | None]]]:
        return (self._point(s) for s in self._samples)

    def shared(self, i: int, j: int) -> bool:
        """Whether samples ``i`` and ``j`` keep one array (nothing changed between them)."""
        return self._samples[i][2] is self._samples[j][2]

    def _point(self, sample: tuple[float, tuple[int, ...], array[int]]
               ) -> tuple[float, dict[int, int | None]]:
        t, gpus, values = sample
        none = _NONE[self.metric.typecode]
        return t, {gpu: (None if v == none else v) for gpu, v in zip(gpus, values, strict=True)}


def histories() -> Mapping[str, GpuHistory]:
    """A fresh history of every metric, by name."""
    return {m.name: GpuHistory(m) for m in METRICS}
