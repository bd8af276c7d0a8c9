"""What a model took when gpudash last saw it serve on a host: per-GPU memory, time to ready.

Learned, not configured: when a start or a swap ends with the unit serving (ready answered,
memory steady), its processes' GPU memory per GPU and the seconds it took are kept in
``$XDG_STATE_HOME/gpudash/footprints.json``. The next swap to it checks the fit against
this before stopping anything. When an action stops the unit (a reclaim, a swap's first
phase), the seconds from ``systemctl stop`` until its memory was back are kept beside it
(``stop_s``): the unit lint holds ``TimeoutStopSec`` against them. When some of its
processes ignored gpudash's SIGTERM and were sent SIGKILL, when and how many is kept too
(``term_ignored_at``, ``term_ignored``): the lint says what a stop does to them. An entry
may have these and no footprint yet (stopped, never seen serving); one without them is a
file an older gpudash wrote, read as it was.

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
from pathlib import Path
from typing import Any

from gpudash.domain.lint import Learned
from gpudash.protocol.schema import MAX_GPUS, MIB_MAX, PID_MAX
from gpudash.record import record
from gpudash.state import files
from gpudash.state.paths import state_dir

log = logging.getLogger("gpudash.state.footprints")

FILE_MAX = 16 << 20  # bytes read from the file at most
READY_MAX_S = 7 * 86400.0  # a model that takes longer than a week to load is no number
SEEN_MAX = 1e10  # epoch seconds: the year 2286
STOP_MAX_S = 86400.0  # a stop that takes longer than a day is no number


@record
class Footprint:
    mib_per_gpu: Mapping[int, int]  # empty: never seen serving (only stopped)
    ready_s: float | None
    seen_at: float  # epoch seconds
    stop_s: float | None = None  # the last stop: systemctl stop until its memory was back
    term_ignored_at: float | None = None  # epoch s: its processes last ignored SIGTERM
    term_ignored: int = 0  # how many did then

    @property
    def total_mib(self) -> int:
        return sum(self.mib_per_gpu.values())

    @property
    def learned(self) -> Learned:
        """What the unit lint reads of it."""
        return Learned(self.stop_s, self.term_ignored_at, self.term_ignored)


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
    ignored_at = _seconds(entry.get("term_ignored_at"), "term_ignored_at", SEEN_MAX,
                          optional=True)
    ignored = entry.get("term_ignored", 0)
    if not (isinstance(ignored, int) and not isinstance(ignored, bool)
            and 0 <= ignored <= PID_MAX):
        raise ValueError(f"term_ignored: {ignored!r} is not a count of processes")
    per = entry.get("mib_per_gpu")
    if not isinstance(per, dict) or not (per or stop is not None or ignored_at is not None):
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
    return Footprint(mib_per_gpu, ready, seen, stop, ignored_at,
                     ignored if ignored_at is not None else 0)


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


def learned(host: str, path: Path | None = None) -> dict[str, Learned]:
    """Unit -> what gpudash saw of its stops on ``host`` (for the unit lint)."""
    store, problems = load(path)
    _report(problems)
    return _learned_of(store, host)


def _learned_of(store: Store, host: str) -> dict[str, Learned]:
    return {u: f.learned for u, f in store.get(host, {}).items()
            if f.stop_s is not None or f.term_ignored_at is not None}


def learn(host: str, unit: str, mib_per_gpu: Mapping[int, int], ready_s: float | None,
          path: Path | None = None) -> Footprint:
    """Remember what ``unit`` took when it served on ``host``; returns what was stored.
    Entries of the file that are not valid are dropped (and logged); the rest are kept."""
    return _update(host, unit, path, mib_per_gpu={str(k): v for k, v in mib_per_gpu.items()},
                   ready_s=ready_s)


def learn_stop(host: str, unit: str, stop_s: float, path: Path | None = None) -> Footprint:
    """Remember how long ``unit``'s stop took on ``host`` (its footprint, if any, kept)."""
    return _update(host, unit, path, stop_s=round(stop_s, 1))


def learn_term_ignored(host: str, unit: str, count: int, path: Path | None = None
                       ) -> Footprint:
    """Remember that ``count`` of ``unit``'s processes on ``host`` ignored gpudash's
    SIGTERM just now (the rest of its entry kept)."""
    return _update(host, unit, path, term_ignored_at=time.time(), term_ignored=count)


def _update(host: str, unit: str, path: Path | None, **changed: Any) -> Footprint:
    """``unit``'s entry on ``host`` with ``changed`` over what it had, checked and
    written; entries of the file that are not valid are dropped (and logged)."""
    target = path or store_path()
    store, problems = load(target)
    _report(problems)
    had = store.get(host, {}).get(unit)
    entry = {"mib_per_gpu": {}, "ready_s": None, "stop_s": None, "term_ignored_at": None,
             "term_ignored": 0} if had is None else _entry_json(had)
    fp = entry_of({**entry, **changed, "seen_at": time.time()})
    store.setdefault(host, {})[unit] = fp
    _write(target, store)
    return fp


def _entry_json(f: Footprint) -> dict[str, Any]:
    return {"mib_per_gpu": {str(k): v for k, v in sorted(f.mib_per_gpu.items())},
            "ready_s": f.ready_s, "seen_at": f.seen_at,
            **({} if f.stop_s is None else {"stop_s": f.stop_s}),
            **({} if f.term_ignored_at is None else {
                "term_ignored_at": f.term_ignored_at, "term_ignored": f.term_ignored})}


def _write(target: Path, store: Store) -> None:
    data = {h: {u: _entry_json(f) for u, f in units.items()} for h, units in store.items()}
    files.replace(target, json.dumps(data, indent=1, sort_keys=True).encode("utf-8"))


class LearnedUnits:
    """``learned`` for a screen that asks at every sample of every host: the file is
    looked at (stat) at most once per ``recheck_s``, read again only when it changed (its
    size or modification time), and each host's answer is kept until then."""

    def __init__(self, recheck_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.recheck_s = recheck_s
        self._clock = clock
        self._seen: dict[Path, tuple[tuple[int, int] | None, Store]] = {}
        self._checked: dict[Path, float] = {}
        self._answers: dict[tuple[Path, str], dict[str, Learned]] = {}

    def __call__(self, host: str, *, simulated: bool = False) -> Mapping[str, Learned]:
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
            answer = self._answers[key] = _learned_of(seen[1], host)
        return answer
