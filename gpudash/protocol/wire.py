"""Decoding the collector's JSON lines into ``HostSnapshot``s.

Everything here treats the host's output as untrusted (a compromised host, or one GPU
user's cmdline): any malformed, truncated, mistyped or out-of-bounds message raises
``ProtocolError`` and nothing else, and whatever decodes is within bounds (see
``schema``: identities out of range are refused, measurements become N/A, text is cut).

Counts are capped (``host.protocol.MAX_GPUS``, ``MAX_PROCS``, ``MAX_UNITS``, ``MAX_ERRORS``),
every object's key must name it (``"1234"`` holds pid 1234, so a pid or GPU index cannot
appear twice), and the state built from merge patches keeps only the keys a snapshot has,
with text cut, and changes only when the result decodes: a patch cannot grow it unbounded.
A message nests at most ``MAX_DEPTH`` deep, checked as it is read: Python 3.12's and
3.13's ``json`` read a thousand levels and more (3.11's refuses sooner), which the merge
patch's recursion would not survive.
"""

from __future__ import annotations

import json
import logging
from typing import Any

# The collector's side of the wire, for the hosts gpudash simulates (the demo, which may not
# import the host's program): the one definition of how a snapshot is written, whole or as
# the merge patch from the one before, and how a message becomes a line.
from gpudash.collector.host.protocol import CONTAINER as CONTAINER
from gpudash.collector.host.protocol import CONTAINER_KEY_FIELDS as CONTAINER_KEY_FIELDS
from gpudash.collector.host.protocol import (
    ERROR_MAX,
    GPU_KEYS,
    K_ERROR,
    K_PATCH,
    K_READY,
    MAX_ERRORS,
    MAX_GPUS,
    MAX_PROCS,
    MAX_UNITS,
    PROC_KEYS,
    SNAPSHOT_KEYS,
    UNIT_KEYS,
)
from gpudash.collector.host.protocol import K_FULL as K_FULL
from gpudash.collector.host.protocol import PROTOCOL as PROTOCOL
from gpudash.collector.host.protocol import SnapshotStream as SnapshotStream
from gpudash.collector.host.protocol import kind_owners as kind_owners
from gpudash.collector.host.protocol import message_line as message_line
from gpudash.collector.host.text import snapshot_bound
from gpudash.domain.model import (
    EVERYTHING,
    Changes,
    Gpu,
    HostSnapshot,
    Process,
    SourceKind,
    Unit,
)
from gpudash.protocol import schema
from gpudash.protocol.source import ProtocolError

log = logging.getLogger("gpudash.wire")

# A patch may name every key of the snapshot before it (as null) besides the new one.
MAX_LINE = 2 * snapshot_bound()
# Objects and lists in objects and lists: a message is 5 deep at most ({"s": {"procs":
# {"1234": {"gpu_memory_mib": {...}}}}}); anything deeper is refused before it is used.
MAX_DEPTH = 8
_SOURCES = {k.value: k for k in SourceKind}
_SECTIONS = {
    "gpus": frozenset(GPU_KEYS),
    "procs": frozenset(PROC_KEYS),
    "units": frozenset(UNIT_KEYS),
}
_TOP = frozenset(SNAPSHOT_KEYS)
_TEXT = {
    cls: {name: b.limit for name, b in bounds.items() if isinstance(b, schema.Text)}
    for cls, bounds in schema.BOUNDS.items()
}
_SECTION_TEXT = {"gpus": _TEXT[Gpu], "procs": _TEXT[Process], "units": _TEXT[Unit]}


def apply_merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386: ``null`` deletes, objects merge, everything else replaces."""
    out = dict(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict):
            before = out.get(key)
            out[key] = apply_merge_patch(before if isinstance(before, dict) else {}, value)
        else:
            out[key] = value
    return out


def check_version(version: object) -> None:
    """The collector's protocol ``v`` must be this gpudash's."""
    if version != PROTOCOL or isinstance(version, bool):
        said = "no protocol version" if version is None else f"protocol {schema.show(version)}"
        raise ProtocolError(f"collector speaks {said}, this gpudash speaks {PROTOCOL}")


def check_ready(message: dict[str, Any]) -> None:
    """The serve mode's first line: ``{"k": "ready", "v": PROTOCOL}``."""
    if message.get("k") != K_READY:
        raise ProtocolError("collector did not start")
    check_version(message.get("v"))


class _Cache:
    """Decoded objects by section key, reused while the wire dict is the same object:
    ``apply_merge_patch`` copies only what a patch touches, so an unchanged process is
    not decoded again."""

    def __init__(self) -> None:
        self.entries: dict[str, dict[str, tuple[dict[str, Any], Any, tuple[str, ...]]]] = {
            "gpus": {},
            "procs": {},
            "units": {},
        }
        self.primed = False  # a message was decoded: changes are relative to it
        self.owners: tuple[object, schema.Owners] = (None, schema.Owners({}, (), ()))


def _gpu(d: dict[str, Any], where: str, notes: list[str]) -> Gpu:
    return Gpu(**schema.fields(Gpu, d, where, notes))


def _process(d: dict[str, Any], where: str, notes: list[str]) -> Process:
    return Process(
        **schema.fields(Process, d, where, notes),
        gpu_memory_mib=schema.gpu_memory(d.get("gpu_memory_mib", {}), where, notes),
        device_gpus=schema.gpu_indices(d.get("device_gpus", []), where),
    )


def _unit(d: dict[str, Any], where: str, notes: list[str]) -> Unit:
    return Unit(**schema.fields(Unit, d, where, notes))


_KINDS = {
    "gpus": (_gpu, "index", MAX_GPUS, "gpu"),
    "procs": (_process, "pid", MAX_PROCS, "process"),
    "units": (_unit, "name", MAX_UNITS, "unit"),
}


# A process's fields that are measurements: a change in them alone leaves its triage as
# it was (its state too, unless it enters or leaves D or Z).
MEASUREMENTS = frozenset({"cpu_pct", "rss_mib", "state"})
_FLAGGED_STATES = ("D", "Z")


class _Delta:
    """What one decoded message changed, section by section (``Changes`` once done)."""

    def __init__(self) -> None:
        self.keys: dict[str, set[str]] = {}
        self.structure = False

    def changed(self, section: str, name: str, before: dict[str, Any] | None,
                after: dict[str, Any] | None) -> None:
        self.keys.setdefault(section, set()).add(name)
        if self.structure:
            return
        if section != "procs" or before is None or after is None:
            self.structure = section != "gpus" or before is None or after is None
            return
        for k in before.keys() | after.keys():
            old, new = before.get(k), after.get(k)
            if old == new:
                continue
            if k not in MEASUREMENTS or (k == "state" and (old in _FLAGGED_STATES
                                                            or new in _FLAGGED_STATES)):
                self.structure = True
                return

    def changes(self) -> Changes:
        def of(section: str) -> frozenset[str]:
            return frozenset(self.keys.get(section, ()))

        return Changes(
            gpus=frozenset(int(k) for k in of("gpus")),
            processes=frozenset(int(k) for k in of("procs")),
            units=of("units"),
            structure=self.structure,
        )


def _section(state: dict[str, Any], key: str, notes: list[str], cache: _Cache | None,
             delta: _Delta | None = None) -> list[Any]:
    """One of ``gpus``/``procs``/``units``, each object named by its key, sorted by it."""
    section = state.get(key, {})
    decode, id_field, limit, what = _KINDS[key]
    if not isinstance(section, dict):
        raise ProtocolError(f"{key}: expected an object of objects")
    if len(section) > limit:
        raise ProtocolError(f"{key}: too many ({len(section)}, at most {limit})")
    seen = cache.entries[key] if cache is not None else {}
    fresh: dict[str, tuple[dict[str, Any], Any, tuple[str, ...]]] = {}
    out = []
    for name, d in section.items():
        hit = seen.get(name)
        if hit is not None and hit[0] is d:
            fresh[name] = hit
            notes.extend(hit[2])
            out.append(hit[1])
            continue
        if not isinstance(d, dict):
            raise ProtocolError(f"{key}: expected an object of objects")
        mine: list[str] = []
        obj = decode(d, f"{what} {schema.cut(name, 64)}", mine)
        if str(getattr(obj, id_field)) != name:
            raise ProtocolError(
                f"{key}: key {schema.show(name)} does not name its {what} "
                f"({id_field} {schema.show(getattr(obj, id_field))})"
            )
        fresh[name] = (d, obj, tuple(mine))
        notes.extend(mine)
        out.append(obj)
        if delta is not None:
            delta.changed(key, name, hit[0] if hit is not None else None, d)
    if cache is not None:
        if delta is not None:
            for name in seen.keys() - fresh.keys():
                delta.changed(key, name, seen[name][0], None)
        cache.entries[key] = fresh
    return sorted(out, key=lambda o: getattr(o, id_field))


def _owners(state: dict[str, Any], notes: list[str], cache: _Cache | None,
            delta: _Delta | None) -> schema.Owners:
    """The ``owners`` section, decoded again only when a patch touched it (a change in it
    is a change of who owns what)."""
    raw = state.get("owners", {})
    if cache is not None and cache.owners[0] is raw:
        notes.extend(cache.owners[1].notes)
        return cache.owners[1]
    owners = schema.owners(raw)
    notes.extend(owners.notes)
    if cache is not None:
        if delta is not None and owners.facts != cache.owners[1].facts:
            delta.structure = True
        cache.owners = (raw, owners)
    return owners


def _flag(state: dict[str, Any], key: str) -> bool | None:
    value = state.get(key)
    if value is not None and not isinstance(value, bool):
        raise ProtocolError(f"snapshot.{key}: expected true or false")
    return value


def to_snapshot(
    state: dict[str, Any],
    host: str,
    *,
    source: SourceKind | None = None,
    degraded: bool = False,
    extra_errors: tuple[str, ...] = (),
    require_version: bool = False,
    cache: _Cache | None = None,
) -> HostSnapshot:
    """A wire snapshot (a dict as the collector writes it) as a ``HostSnapshot``.

    ``v``, where present (the plain-shell fallback has none), must be ``PROTOCOL``."""
    try:
        return _to_snapshot(state, host, source, degraded, extra_errors, require_version, cache)
    except ProtocolError:
        raise
    except (TypeError, ValueError, AttributeError, OverflowError, RecursionError) as exc:
        log.warning("undecodable snapshot from %s", host, exc_info=True)  # a decoder bug?
        raise ProtocolError(f"malformed snapshot: {schema.cut(str(exc), 200)}") from None


def _to_snapshot(
    state: dict[str, Any],
    host: str,
    source: SourceKind | None,
    degraded: bool,
    extra_errors: tuple[str, ...],
    require_version: bool,
    cache: _Cache | None,
) -> HostSnapshot:
    if "v" in state or require_version:
        check_version(state.get("v"))
    errors = state.get("errors", [])
    if not isinstance(errors, list) or not all(isinstance(e, str) for e in errors):
        raise ProtocolError("snapshot.errors: expected a list of strings")
    if len(errors) > MAX_ERRORS:
        raise ProtocolError(f"snapshot.errors: too many ({len(errors)}, at most {MAX_ERRORS})")
    kind_name = state.get("source", "nvml")
    kind = _SOURCES.get(kind_name) if isinstance(kind_name, str) else None
    if kind is None:
        raise ProtocolError(f"snapshot.source: unknown kind {schema.show(kind_name)}")
    notes: list[str] = []
    top = schema.fields(HostSnapshot, state, "snapshot", notes)
    # what changed is known from the cache of the previous message's objects: a section
    # entry the merge patch did not touch is the very same dict
    delta = _Delta() if cache is not None and cache.primed else None
    gpus = _section(state, "gpus", notes, cache, delta)
    processes = _section(state, "procs", notes, cache, delta)
    units = _section(state, "units", notes, cache, delta)
    owners = _owners(state, notes, cache, delta)
    if cache is not None:
        cache.primed = True
    said = [schema.cut(e, ERROR_MAX) for e in errors]
    if notes:
        shown = ", ".join(notes[:3]) + (", ..." if len(notes) > 3 else "")
        said.append(schema.cut(f"{len(notes)} values out of range, shown as N/A: {shown}", 300))
    can_act = _flag(state, "can_act")
    return HostSnapshot(
        host=host,
        gpus=tuple(gpus),
        processes=tuple(processes),
        units=tuple(units),
        containers=owners.containers,
        pods=owners.pods,
        owners=owners.facts,
        source=source or kind,
        degraded=degraded or bool(_flag(state, "degraded")),
        errors=tuple(said) + extra_errors,
        can_act=True if can_act is None else can_act,
        changes=delta.changes() if delta is not None else EVERYTHING,
        **top,
    )


def parse_message(line: bytes) -> dict[str, Any]:
    """One JSON line from the collector as an object with a string ``k``."""
    if len(line) > MAX_LINE:
        raise ProtocolError("collector message too large")
    try:
        message = json.loads(line)
    except (ValueError, RecursionError) as exc:
        text = line[:120].decode("utf-8", "replace").strip()
        raise ProtocolError(f"collector sent something that is not JSON: {text!r}") from exc
    if not isinstance(message, dict) or not isinstance(message.get("k"), str):
        raise ProtocolError("collector message without a kind")
    if _deeper_than(message, MAX_DEPTH):
        raise ProtocolError(f"collector message nested more than {MAX_DEPTH} deep")
    return message


def _deeper_than(message: dict[str, Any], limit: int) -> bool:
    """Whether ``message`` has objects or lists more than ``limit`` deep (level by level,
    no recursion: the depth is the sender's)."""
    level: list[dict[str, Any] | list[Any]] = [message]
    for _ in range(limit):
        inner: list[dict[str, Any] | list[Any]] = []
        for container in level:
            for v in container.values() if isinstance(container, dict) else container:
                if isinstance(v, (dict, list)):
                    inner.append(v)
        if not inner:
            return False
        level = inner
    return True


def _prune(body: dict[str, Any]) -> dict[str, Any]:
    """A full snapshot or a patch with only the keys a snapshot has and its text cut, so
    the state kept between messages holds nothing the decoder would not read."""
    out: dict[str, Any] = {}
    for key, value in body.items():
        if key not in _TOP:
            continue
        allowed = _SECTIONS.get(key)
        if allowed is not None and isinstance(value, dict):
            limits = _SECTION_TEXT[key]
            value = {
                name: {
                    k: schema.cut(v, limits[k]) if isinstance(v, str) and k in limits else v
                    for k, v in entry.items()
                    if k in allowed
                }
                if isinstance(entry, dict)
                else entry
                for name, entry in value.items()
            }
        elif key == "errors" and isinstance(value, list):
            value = [schema.cut(e, ERROR_MAX) if isinstance(e, str) else e for e in value]
        elif isinstance(value, str):
            value = schema.cut(value, ERROR_MAX)
        out[key] = value
    return out


class SnapshotDecoder:
    """Folds the stream of full snapshots and merge patches into ``HostSnapshot``s."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.state: dict[str, Any] | None = None
        self._cache = _Cache()

    def feed(self, line: bytes) -> HostSnapshot:
        """Decode one line; raises ``ProtocolError`` for anything but a snapshot. A line
        that does not decode leaves the state as it was."""
        message = parse_message(line)
        kind = message["k"]
        body = message.get("s")
        if kind == K_ERROR:
            raise ProtocolError(f"collector error: {schema.cut(str(message.get('msg')), 300)}")
        if not isinstance(body, dict):
            raise ProtocolError(f"collector message {schema.show(kind)} without a snapshot")
        if kind == K_FULL:
            state = _prune(body)
        elif kind == K_PATCH:
            if self.state is None:
                raise ProtocolError("collector sent a patch before a full snapshot")
            state = apply_merge_patch(self.state, _prune(body))
        else:
            raise ProtocolError(f"unexpected collector message {schema.show(kind)}")
        snap = to_snapshot(state, self.host, require_version=True, cache=self._cache)
        self.state = state
        return snap
