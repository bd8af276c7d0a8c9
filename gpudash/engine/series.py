"""Each GPU's memory over an action, kept small whatever the action's length.

The outcome record carries it so that ``gpudash report`` can draw the memory beside the
action's timeline. It holds at most ``MAX_POINTS`` samples: when it fills up, every other
one goes and the spacing between kept samples doubles, so a two-minute reclaim and a
half-hour swap both fit in a few hundred bytes per GPU. The newest sample always stands
last (it may replace the previous last): the curve ends where the verdict was taken.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

from gpudash.record import record

MAX_POINTS = 60


@record(frozen=False)
class MemorySeries:
    """Used MiB per GPU at host times relative to the first sample (seconds)."""

    start: float | None = None  # the first sample's time on the host's clock
    times: list[float] = field(default_factory=list)
    used: list[dict[int, int | None]] = field(default_factory=list)
    spacing: float = 0.0  # the least gap kept between samples (grows as the series thins)

    def add(self, taken_at: float, used: Mapping[int, int | None]) -> None:
        """One sample; a host clock that steps back is clamped at the last time."""
        if self.start is None:
            self.start = taken_at
        rel = round(max(taken_at - self.start, self.times[-1] if self.times else 0.0), 1)
        point = {g: None if m is None else round(m) for g, m in used.items()}
        if len(self.times) >= 2 and rel - self.times[-2] < self.spacing:
            self.times[-1], self.used[-1] = rel, point  # the newest stands for its interval
        else:
            self.times.append(rel)
            self.used.append(point)
        if len(self.times) > MAX_POINTS:
            keep = list(range(0, len(self.times) - 1, 2)) + [len(self.times) - 1]
            self.times = [self.times[i] for i in keep]
            self.used = [self.used[i] for i in keep]
            self.spacing = max(self.spacing * 2, rel / (MAX_POINTS // 2))

    def gpus(self) -> list[int]:
        return sorted({g for point in self.used for g in point})

    def to_json(self) -> dict[str, Any] | None:
        """``{"t": [s...], "mib": {"0": [MiB or null...]}}``, or None with no sample."""
        if not self.times:
            return None
        return {"t": list(self.times),
                "mib": {str(g): [p.get(g) for p in self.used] for g in self.gpus()}}


def from_json(doc: object) -> list[tuple[float, dict[int, int | None]]]:
    """A recorded series as (seconds from the action's start, used MiB per GPU), oldest
    first; what is not a well-formed series (an old record, a hand-edited file) is none."""
    if not isinstance(doc, dict):
        return []
    times, mib = doc.get("t"), doc.get("mib")
    if not isinstance(times, list) or not isinstance(mib, dict) or len(times) > 4 * MAX_POINTS:
        return []
    if not all(_number(t) for t in times):
        return []
    columns: dict[int, list[object]] = {}
    for key, values in mib.items():
        if (isinstance(key, str) and key.isdigit() and len(key) < 4
                and isinstance(values, list) and len(values) == len(times)):
            columns[int(key)] = values
    out: list[tuple[float, dict[int, int | None]]] = []
    last = 0.0
    for i, t in enumerate(times):
        if float(t) < last:  # not a series gpudash wrote
            return []
        last = float(t)
        out.append((last, {g: _mib(col[i]) for g, col in columns.items()}))
    return out


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e9


def _mib(v: object) -> int | None:
    if isinstance(v, (int, float)) and _number(v):
        return int(v)
    return None
