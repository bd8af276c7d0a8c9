"""What a model took when gpudash last saw it serve on a host: per-GPU memory, time to ready.

Learned, not configured: when a start or a swap ends with the unit serving (ready answered,
memory steady), its processes' GPU memory per GPU and the seconds it took are kept in
``$XDG_STATE_HOME/gpudash/footprints.json``. The next swap to it checks the fit against
this before stopping anything.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpudash.state.paths import state_dir


@dataclass(frozen=True, slots=True)
class Footprint:
    mib_per_gpu: Mapping[int, int]
    ready_s: float | None
    seen_at: float  # epoch seconds

    @property
    def total_mib(self) -> int:
        return sum(self.mib_per_gpu.values())


def store_path(*, simulated: bool = False) -> Path:
    """Where footprints live; the demo host's go to a file of their own."""
    return state_dir() / ("footprints-demo.json" if simulated else "footprints.json")


def _load(path: Path) -> dict[str, dict[str, dict[str, object]]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def lookup(host: str, unit: str, path: Path | None = None) -> Footprint | None:
    """The footprint learned for ``unit`` on ``host``, or None (never seen serving there)."""
    entry = _load(path or store_path()).get(host, {}).get(unit)
    if not isinstance(entry, dict):
        return None
    raw, ready, seen = entry.get("mib_per_gpu"), entry.get("ready_s"), entry.get("seen_at")
    if not isinstance(raw, dict) or not isinstance(seen, int | float) or not (
        ready is None or isinstance(ready, int | float)
    ):
        return None
    try:
        per = {int(k): int(v) for k, v in raw.items()}
    except (TypeError, ValueError):
        return None
    return Footprint(per, None if ready is None else float(ready), float(seen))


def learn(host: str, unit: str, mib_per_gpu: Mapping[int, int], ready_s: float | None,
          path: Path | None = None) -> Footprint:
    """Remember what ``unit`` took when it served on ``host``; returns what was stored."""
    target = path or store_path()
    data = _load(target)
    fp = Footprint(dict(mib_per_gpu), ready_s, time.time())
    data.setdefault(host, {})[unit] = {
        "mib_per_gpu": {str(k): v for k, v in sorted(fp.mib_per_gpu.items())},
        "ready_s": ready_s,
        "seen_at": fp.seen_at,
    }
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, target)  # a reader never sees half a file
    return fp
