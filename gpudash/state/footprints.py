"""What a model took when gpudash last saw it serve on a host: per-GPU memory, time to ready.

Learned, not configured: when a start or a swap ends with the unit serving (ready answered,
memory steady), its processes' GPU memory per GPU and the seconds it took are kept in
``$XDG_STATE_HOME/gpudash/footprints.json``. The next swap to it checks the fit against
this before stopping anything. When an action stops the unit (a reclaim, a swap's first
phase), the seconds from ``systemctl stop`` until its memory was back are kept beside it
(``stop_s``): the unit lint holds ``TimeoutStopSec`` against them. An entry may have a stop
time and no footprint yet (stopped, never seen serving); one without ``stop_s`` is a file
an older gpudash wrote, read as it was.

The file is the operator's, yet read as if it were not: every entry is checked for type
and bounds (a GPU index the collector could report, MiB a GPU could hold, finite
seconds), and one that fails is skipped and named in the log (once per reason); the
others are used. It is read and rewritten by the rules of ``gpudash.state.files``.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpudash.protocol.schema import MAX_GPUS, MIB_MAX
from gpudash.state import files
from gpudash.state.paths import state_dir

log = logging.getLogger("gpudash.state.footprints")

FILE_MAX = 16 << 20  # bytes read from the file at most
READY_MAX_S = 7 * 86400.0  # a model that takes longer than a week to load is no number
SEEN_MAX = 1e10  # epoch seconds: the year 2286
STOP_MAX_S = 86400.0  # a stop that takes longer than a day is no number


@dataclass(frozen=True, slots=True)
class Footprint:
    mib_per_gpu: Mapping[int, int]  # empty: never seen serving (only stopped)
    ready_s: float | None
    seen_at: float  # epoch seconds
    stop_s: float | None = None  # the last stop: systemctl stop until its memory was back

    @property
    def total_mib(self) -> int:
        return sum(self.mib_per_gpu.values())


def store_path(*, simulated: bool = False) -> Path:
    """Where footprints live; the demo host's go to a file of their own."""
    return state_dir() / ("footprints-demo.json" if simulated else "footprints.json")


Store = dict[str, dict[str, Footprint]]
_reported: set[str] = set()  # problems already logged (a file is read at every plan)


def load(path: Path | None = None) -> tuple[Store, list[str]]:
    """Every valid footprint of the file (host -> unit -> footprint), and one line per
    entry (or file) that was skipped, saying why."""
    target = path or store_path()
    try:
        raw = files.read(target, FILE_MAX)
    except OSError as exc:
        return {}, [f"{target}: not read: {exc}"]
    if raw is None:
        return {}, []
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return {}, [f"{target}: not JSON: {exc}"]
    if not isinstance(data, dict):
        return {}, [f"{target}: not a JSON object of hosts"]
    store: Store = {}
    problems: list[str] = []
    for host, units in data.items():
        if not isinstance(units, dict):
            problems.append(f"{target}: {host!r}: not an object of units")
            continue
        for unit, entry in units.items():
            try:
                store.setdefault(host, {})[unit] = entry_of(entry)
            except ValueError as exc:
                problems.append(f"{target}: {host!r} {unit!r}: {exc}")
    return store, problems


def entry_of(entry: object) -> Footprint:
    """One stored footprint, checked; ``ValueError`` says what is wrong with it."""
    if not isinstance(entry, dict):
        raise ValueError("not an object")
    stop = _seconds(entry.get("stop_s"), "stop_s", STOP_MAX_S, optional=True)
    per = entry.get("mib_per_gpu")
    if not isinstance(per, dict) or not (per or stop is not None):
        raise ValueError("mib_per_gpu: not an object of GPU -> MiB")
    mib_per_gpu: dict[int, int] = {}
    for gpu, mib in per.items():
        if not (isinstance(gpu, str) and gpu.isdigit() and int(gpu) < MAX_GPUS):
            raise ValueError(f"mib_per_gpu: GPU {gpu!r} is not 0 to {MAX_GPUS - 1}")
        if not (isinstance(mib, int) and not isinstance(mib, bool) and 0 <= mib <= MIB_MAX):
            raise ValueError(f"mib_per_gpu: GPU {gpu}: {mib!r} is not 0 to {MIB_MAX} MiB")
        mib_per_gpu[int(gpu)] = mib
    ready = _seconds(entry.get("ready_s"), "ready_s", READY_MAX_S, optional=True)
    seen = _seconds(entry.get("seen_at"), "seen_at", SEEN_MAX, optional=False)
    assert seen is not None
    return Footprint(mib_per_gpu, ready, seen, stop)


def _seconds(value: Any, key: str, high: float, *, optional: bool) -> float | None:
    if value is None and optional:
        return None
    if (not isinstance(value, int | float) or isinstance(value, bool)
            or not math.isfinite(value) or not 0 <= value <= high):
        raise ValueError(f"{key}: {value!r} is not a number of seconds from 0 to {high:g}")
    return float(value)


def _report(problems: list[str]) -> None:
    for problem in problems:
        if problem not in _reported:
            _reported.add(problem)
            log.warning("footprint skipped: %s", problem)


def lookup(host: str, unit: str, path: Path | None = None) -> Footprint | None:
    """The footprint learned for ``unit`` on ``host``, or None (never seen serving there,
    or its entry is not valid: skipped and logged)."""
    store, problems = load(path)
    _report(problems)
    found = store.get(host, {}).get(unit)
    return found if found is not None and found.mib_per_gpu else None


def stop_times(host: str, path: Path | None = None) -> dict[str, float]:
    """Unit -> the seconds its last stop took on ``host`` (for the unit lint)."""
    store, problems = load(path)
    _report(problems)
    return {u: f.stop_s for u, f in store.get(host, {}).items() if f.stop_s is not None}


def learn(host: str, unit: str, mib_per_gpu: Mapping[int, int], ready_s: float | None,
          path: Path | None = None) -> Footprint:
    """Remember what ``unit`` took when it served on ``host``; returns what was stored.
    Entries of the file that are not valid are dropped (and logged); the rest are kept."""
    target = path or store_path()
    store, problems = load(target)
    _report(problems)
    had = store.get(host, {}).get(unit)
    fp = entry_of({"mib_per_gpu": {str(k): v for k, v in mib_per_gpu.items()},
                   "ready_s": ready_s, "seen_at": time.time(),
                   "stop_s": had.stop_s if had is not None else None})
    store.setdefault(host, {})[unit] = fp
    _write(target, store)
    return fp


def learn_stop(host: str, unit: str, stop_s: float, path: Path | None = None) -> Footprint:
    """Remember how long ``unit``'s stop took on ``host`` (its footprint, if any, kept)."""
    target = path or store_path()
    store, problems = load(target)
    _report(problems)
    had = store.get(host, {}).get(unit)
    fp = entry_of({"mib_per_gpu": {str(k): v for k, v in (
                       had.mib_per_gpu.items() if had is not None else ())},
                   "ready_s": had.ready_s if had is not None else None,
                   "seen_at": time.time(), "stop_s": round(stop_s, 1)})
    store.setdefault(host, {})[unit] = fp
    _write(target, store)
    return fp


def _write(target: Path, store: Store) -> None:
    data = {
        h: {u: {"mib_per_gpu": {str(k): v for k, v in sorted(f.mib_per_gpu.items())},
                "ready_s": f.ready_s, "seen_at": f.seen_at,
                **({} if f.stop_s is None else {"stop_s": f.stop_s})}
            for u, f in units.items()}
        for h, units in store.items()
    }
    files.replace(target, json.dumps(data, indent=1, sort_keys=True).encode("utf-8"))


class StopTimes:
    """``stop_times`` for a screen that asks at every sample of every host: the file is
    looked at (stat) at most once per ``recheck_s``, read again only when it changed (its
    size or modification time), and each host's answer is kept until then."""

    def __init__(self, recheck_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.recheck_s = recheck_s
        self._clock = clock
        self._seen: dict[Path, tuple[tuple[int, int] | None, Store]] = {}
        self._checked: dict[Path, float] = {}
        self._answers: dict[tuple[Path, str], dict[str, float]] = {}

    def __call__(self, host: str, *, simulated: bool = False) -> Mapping[str, float]:
        path = store_path(simulated=simulated)
        now = self._clock()
        seen = self._seen.get(path)
        if seen is None or now - self._checked.get(path, -1e18) >= self.recheck_s:
            self._checked[path] = now
            try:
                st = path.stat()
                stamp: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
            except OSError:
                stamp = None
            if seen is None or seen[0] != stamp:
                store, problems = load(path) if stamp is not None else ({}, [])
                _report(problems)
                seen = self._seen[path] = (stamp, store)
                self._answers = {k: v for k, v in self._answers.items() if k[0] != path}
        key = (path, host)
        answer = self._answers.get(key)
        if answer is None:
            answer = self._answers[key] = {
                u: f.stop_s for u, f in seen[1].get(host, {}).items() if f.stop_s is not None}
        return answer
