"""What a host may say about one GPU, process or unit, field by field, and how it is read.

The keys are the model's dataclass fields (``host.protocol.GPU_KEYS`` and friends list the
same names for the collector; a test holds them equal). Each field has a bound here, checked at
import: a field added to the model without one is an error, not a silent pass-through.

What a value outside its bound means (the host is untrusted, see ``wire``):

- an identity or structure value (pid, ppid, start ticks, GPU index, unit name, boot id,
  the snapshot's time) is refused with ``ProtocolError``: the kernel cannot produce it,
  so the host is broken or lying, and nothing it says in that message can be used;
- a measurement (memory, utilisation, temperature, power, CPU %, RSS, restarts, a start
  time in epoch seconds) becomes N/A (``None``), and the snapshot's errors say which
  value of what was out of range: one odd sensor must not take a host out of view;
- text longer than its limit is cut and ends in ``host.protocol.TRUNCATED``.
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from typing import Any, cast

from gpudash.collector.host.protocol import (
    BOOT_ID,
    CGROUP_MAX,
    CMDLINE_MAX,
    CONTAINER,
    CONTAINER_ID,
    CONTAINER_KEY_FIELDS,
    DEVICE_SCANS,
    ERROR_MAX,
    EXEC_MAX,
    MAX_FACT_LIST,
    MAX_FACTS,
    MAX_OWNERS,
    OWNER_KEYS,
    OWNER_KINDS,
    PID_VIEWS,
    POD,
    POD_KEY_FIELDS,
    POD_UID,
    PROCESS_LISTS,
    TEXT_MAX,
    TRUNCATED,
    UNREADABLE_REASONS,
    WORD_MAX,
)
from gpudash.collector.host.protocol import (
    MAX_GPUS as MAX_GPUS,  # the bound of a GPU index, for the rest of gpudash
)
from gpudash.domain.model import Container, Fact, Gpu, HostSnapshot, Pod, Process, Unit
from gpudash.protocol.source import ProtocolError
from gpudash.record import record

MIB_MAX = 2**24  # 16 TiB: GPU memory, or one process's RSS
HOST_MIB_MAX = 2**30  # 1 PiB of host RAM
PID_MAX = 2**22  # the largest pid_max Linux allows
TICKS_MAX = 2**62
EPOCH_MAX = 1e10  # epoch seconds: the year 2286


@record
class Number:
    low: float
    high: float
    identity: bool = False  # out of range: ProtocolError (else N/A)


@record
class Text:
    limit: int  # characters
    identity: bool = False  # too long or not matching: ProtocolError (else cut)
    pattern: re.Pattern[str] | None = None


Bound = Number | Text


def _one_of(words: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(map(re.escape, words)))


_ON_OFF = _one_of(("on", "off"))

BOUNDS: dict[type, dict[str, Bound]] = {
    Gpu: {
        "index": Number(0, MAX_GPUS - 1, identity=True),
        "uuid": Text(TEXT_MAX),
        "name": Text(TEXT_MAX),
        "memory_total_mib": Number(0, MIB_MAX),
        "memory_used_mib": Number(0, MIB_MAX),
        "memory_reserved_mib": Number(0, MIB_MAX),
        "utilization_pct": Number(0, 100),
        "temperature_c": Number(-100, 300),
        "power_w": Number(0, 100_000),
        "power_limit_w": Number(0, 100_000),
        "error": Text(ERROR_MAX),
        # what a GPU reset's plan is decided on: a value that is none is refused
        "process_list": Text(16, identity=True, pattern=_one_of(PROCESS_LISTS)),
        "device_scan": Text(16, identity=True, pattern=_one_of(DEVICE_SCANS)),
        "mig_mode": Text(4, identity=True, pattern=_ON_OFF),
        "display_active": Text(4, identity=True, pattern=_ON_OFF),
        "persistence_mode": Text(4, identity=True, pattern=_ON_OFF),
    },
    Process: {
        "pid": Number(1, PID_MAX, identity=True),
        "ppid": Number(0, PID_MAX, identity=True),
        "start_ticks": Number(0, TICKS_MAX, identity=True),
        "started_at": Number(0, EPOCH_MAX),
        "state": Text(TEXT_MAX),
        "user": Text(TEXT_MAX),
        "name": Text(TEXT_MAX),
        "cmdline": Text(CMDLINE_MAX),
        "cgroup": Text(CGROUP_MAX),
        "unit": Text(TEXT_MAX),
        "cpu_pct": Number(0, 2**20),  # % of one CPU: 100 per busy thread
        "rss_mib": Number(0, MIB_MAX),
        "sm_util_pct": Number(0, 100),
        "pgid": Number(0, PID_MAX, identity=True),
        # who owns a process is decided on these: a value that is none is refused
        "user_uid": Number(0, 2**32 - 1, identity=True),
        "user_unit": Text(TEXT_MAX),
        "unreadable": Text(16, identity=True,
                           pattern=re.compile("|".join(UNREADABLE_REASONS))),
        "claim": Text(TEXT_MAX, identity=True, pattern=re.compile("|".join(
            f"{re.escape(kind)}:(?:{OWNER_KEYS[kind].pattern})" for kind in OWNER_KINDS))),
    },
    Unit: {
        "name": Text(TEXT_MAX, identity=True),
        "active_state": Text(TEXT_MAX),
        "sub_state": Text(TEXT_MAX),
        "unit_file_state": Text(TEXT_MAX),
        "restart": Text(TEXT_MAX),
        "kill_mode": Text(TEXT_MAX),
        "n_restarts": Number(0, 2**32),
        "main_pid": Number(1, PID_MAX, identity=True),
        "control_group": Text(CGROUP_MAX),
        "description": Text(TEXT_MAX),
        "timeout_stop_s": Number(0, 2**40),
        "restart_s": Number(0, 2**40),
        "start_limit_interval_s": Number(0, 2**40),
        "start_limit_burst": Number(0, 2**32),
        "exec_start": Text(EXEC_MAX),
        "cuda_visible_devices": Text(TEXT_MAX, pattern=re.compile(r"[0-9]{1,2}(,[0-9]{1,2})*")),
        "send_sigkill": Text(WORD_MAX),
    },
    Container: {
        "id": Text(64, identity=True, pattern=CONTAINER_ID),
        "runtime": Text(8, identity=True, pattern=re.compile("docker|podman")),
        "name": Text(TEXT_MAX),
        "image": Text(TEXT_MAX),
        "state": Text(WORD_MAX),
        "restart_policy": Text(WORD_MAX),
        "restart_count": Number(0, 2**31),
        "main_pid": Number(1, PID_MAX, identity=True),
        "health": Text(WORD_MAX),
        "init": Text(WORD_MAX),
        "pid_mode": Text(WORD_MAX),
        "port": Number(1, 65535),  # published TCP host port: the ready URL's
    },
    Pod: {
        "uid": Text(64, identity=True, pattern=POD_UID),
        "namespace": Text(TEXT_MAX),
        "name": Text(TEXT_MAX),
    },
    HostSnapshot: {
        "taken_at": Number(0, EPOCH_MAX, identity=True),
        "boot_id": Text(64, identity=True, pattern=BOOT_ID),
        "cannot_act_reason": Text(ERROR_MAX),
        "pid_view": Text(16, identity=True, pattern=_one_of(PID_VIEWS)),
        "cpu_pct": Number(0, 100),
        "mem_used_mib": Number(0, HOST_MIB_MAX),
        "mem_total_mib": Number(0, HOST_MIB_MAX),
        "collector_cpu_s": Number(0, 2**40),
    },
}
# Fields read elsewhere: a Process's GPU memory map (``gpu_memory``), and what a snapshot
# assembles from sections, flags and its caller (``wire.to_snapshot``).
SPECIAL = {
    Process: {"gpu_memory_mib", "device_gpus"},
    HostSnapshot: {
        "host", "gpus", "processes", "units", "source", "degraded", "errors", "can_act",
        "containers", "pods", "owners", "changes",
    },
}


@record
class Field:
    name: str
    kind: type  # int, float or str
    required: bool
    default: Any
    bound: Bound


def _plan(cls: type) -> tuple[Field, ...]:
    """The fields of ``cls`` to read from a wire dict, with their types and bounds."""
    hints = typing.get_type_hints(cls)
    plan = []
    for f in dataclasses.fields(cls):
        if f.name in SPECIAL.get(cls, ()):
            continue
        hint = hints[f.name]
        kinds = [k for k in typing.get_args(hint) or (hint,) if k is not type(None)]
        if len(kinds) != 1 or kinds[0] not in (int, float, str):
            raise TypeError(f"{cls.__name__}.{f.name}: no wire decoding for {hints[f.name]}")
        bound = BOUNDS[cls].get(f.name)
        if bound is None or isinstance(bound, Text) != (kinds[0] is str):
            raise TypeError(f"{cls.__name__}.{f.name}: no bound of its kind in schema.BOUNDS")
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        default = None if required else f.default
        plan.append(Field(f.name, kinds[0], required, default, bound))
    return tuple(plan)


PLANS: dict[type, tuple[Field, ...]] = {cls: _plan(cls) for cls in BOUNDS}


def cut(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, ending in the collector's mark if cut."""
    return text if len(text) <= limit else text[: limit - len(TRUNCATED)] + TRUNCATED


def show(value: object) -> str:
    """A value from the host for a message: short, whatever its size."""
    if isinstance(value, int) and abs(value) >= 10**20:
        return f"about 10^{len(str(abs(value))) - 1}"
    return cut(repr(value), 40)


def value(d: dict[str, Any], field: Field, where: str, notes: list[str]) -> Any:
    """One field of ``d`` as the model holds it; see the module docstring for bounds."""
    raw = d.get(field.name)
    if raw is None:
        if field.required:
            raise ProtocolError(f"{where} without {field.name}")
        return field.default
    bound = field.bound
    if isinstance(bound, Text):
        if not isinstance(raw, str):
            raise ProtocolError(f"{where}.{field.name}: expected text, got {type(raw).__name__}")
        if len(raw) <= bound.limit and (bound.pattern is None or bound.pattern.fullmatch(raw)):
            return raw
        if bound.identity:
            raise ProtocolError(f"{where}.{field.name}: not a valid value: {show(raw)}")
        return cut(raw, bound.limit)
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise ProtocolError(f"{where}.{field.name}: expected a number, got {type(raw).__name__}")
    if field.kind is int and not isinstance(raw, int):
        raise ProtocolError(f"{where}.{field.name}: expected an integer, got {show(raw)}")
    if (isinstance(raw, int) or math.isfinite(raw)) and bound.low <= raw <= bound.high:
        return float(raw) if field.kind is float else raw
    if bound.identity:
        raise ProtocolError(f"{where}.{field.name} out of range: {show(raw)}")
    notes.append(f"{where} {field.name} = {show(raw)}")
    return None


def fields(cls: type, d: dict[str, Any], where: str, notes: list[str]) -> dict[str, Any]:
    """Every planned field of ``cls`` from the wire dict ``d``."""
    out: dict[str, Any] = {}
    for f in PLANS[cls]:  # the common cases inline: hundreds of processes per sample
        raw = d.get(f.name)
        bound = f.bound
        if raw is None and not f.required:
            out[f.name] = f.default
            continue
        if isinstance(bound, Text):
            if type(raw) is str and len(raw) <= bound.limit and bound.pattern is None:
                out[f.name] = raw
                continue
        elif type(raw) is f.kind and bound.low <= cast(float, raw) <= bound.high:  # not NaN
            out[f.name] = raw
            continue
        out[f.name] = value(d, f, where, notes)
    return out


def gpu_memory(raw: object, where: str, notes: list[str]) -> dict[int, int | None]:
    """A process's ``{"INDEX": MiB or -1}`` as ``{index: MiB or None}``."""
    if not isinstance(raw, dict):
        raise ProtocolError(f"{where}.gpu_memory_mib: expected an object")
    if len(raw) > MAX_GPUS:
        raise ProtocolError(f"{where}.gpu_memory_mib: too many GPUs ({len(raw)})")
    memory: dict[int, int | None] = {}
    for key, mib in raw.items():
        if not (key.isascii() and key.isdigit() and str(int(key)) == key and int(key) < MAX_GPUS):
            raise ProtocolError(f"{where}.gpu_memory_mib: bad GPU index {show(key)}")
        if isinstance(mib, bool) or not isinstance(mib, int):
            raise ProtocolError(f"{where}.gpu_memory_mib: expected integers")
        if mib == -1:
            memory[int(key)] = None  # the driver cannot tell
        elif 0 <= mib <= MIB_MAX:
            memory[int(key)] = mib
        else:
            notes.append(f"{where} gpu_memory_mib[{key}] = {show(mib)}")
            memory[int(key)] = None
    return memory


def gpu_indices(raw: object, where: str) -> tuple[int, ...]:
    """A process's ``device_gpus``: the GPU indices whose device files it holds."""
    if (
        not isinstance(raw, list) or len(raw) > MAX_GPUS
        or not all(type(i) is int and 0 <= i < MAX_GPUS for i in raw)
    ):
        raise ProtocolError(f"{where}.device_gpus: expected a list of GPU indices")
    return tuple(sorted(set(raw)))


_FACT_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
_INT_MAX = 2**53


@record
class Owners:
    """The ``owners`` section decoded: every kind's facts, the typed view of the kinds
    that have one (``TYPED``), and the values out of range there (shown as N/A)."""

    facts: dict[str, dict[str, dict[str, Fact]]]
    containers: tuple[Container, ...]
    pods: tuple[Pod, ...]
    notes: tuple[str, ...] = ()


# The kinds whose facts the model types (a container's restart policy, a pod's name): the
# class, and the fields their owner key names ("docker/ID": runtime, id). Their facts are
# bound field by field in BOUNDS like a unit's: a main pid out of range is refused.
TYPED = {CONTAINER: (Container, CONTAINER_KEY_FIELDS), POD: (Pod, POD_KEY_FIELDS)}


def owners(raw: object) -> Owners:
    """``owners`` as the model holds it (``owner_facts``), with its typed views."""
    facts = owner_facts(raw)
    notes: list[str] = []
    typed: dict[str, list[Any]] = {kind: [] for kind in TYPED}
    for kind, (cls, key_fields) in TYPED.items():
        for key, mine in facts.get(kind, {}).items():
            if not key:
                continue  # the kind's facts about the host: none is typed
            named = dict(zip(key_fields, key.split("/"), strict=True))
            typed[kind].append(cls(**fields(cls, {**mine, **named}, f"{kind} {key}", notes)))
    return Owners(facts, tuple(sorted(typed[CONTAINER], key=lambda c: c.id)),
                  tuple(sorted(typed[POD], key=lambda p: p.uid)), tuple(notes))


def owner_facts(raw: object, where: str = "snapshot.owners"
                ) -> dict[str, dict[str, dict[str, Fact]]]:
    """``owners``: ``{KIND: {KEY: {FACT: value}}}`` as the model holds it. A kind gpudash
    does not know, a key or fact name out of shape (``OWNER_KEYS``; "" for the kind's facts
    about the host), a count over its bound: refused (who owns what is decided on them);
    text is cut at ``TEXT_MAX``."""
    if not isinstance(raw, dict):
        raise ProtocolError(f"{where}: expected an object")
    out: dict[str, dict[str, dict[str, Fact]]] = {}
    for kind, owners in raw.items():
        if kind not in OWNER_KINDS:
            raise ProtocolError(f"{where}: unknown owner kind {show(kind)}")
        if not isinstance(owners, dict) or len(owners) > MAX_OWNERS:
            raise ProtocolError(f"{where}.{kind}: expected at most {MAX_OWNERS} owners")
        mine: dict[str, dict[str, Fact]] = {}
        out[kind] = mine
        for key, facts in owners.items():
            if key and not OWNER_KEYS[kind].fullmatch(key):
                raise ProtocolError(f"{where}.{kind}: not an owner key: {show(key)}")
            if not isinstance(facts, dict) or len(facts) > MAX_FACTS:
                raise ProtocolError(f"{where}.{kind}.{key}: expected at most {MAX_FACTS} facts")
            mine[key] = {name: _fact(value, f"{where}.{kind}.{key}.{cut(name, 32)}")
                         for name, value in facts.items() if _named(name, where)}
    return out


def _named(name: str, where: str) -> bool:
    if not _FACT_NAME.fullmatch(name):
        raise ProtocolError(f"{where}: not a fact name: {show(name)}")
    return True


def _fact(value: object, where: str) -> Fact:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if abs(value) > _INT_MAX:
            raise ProtocolError(f"{where} out of range: {show(value)}")
        return value
    if isinstance(value, str):
        return cut(value, TEXT_MAX)
    if isinstance(value, list) and len(value) <= MAX_FACT_LIST and all(
            type(i) is int and 0 <= i <= _INT_MAX for i in value):
        return tuple(value)
    raise ProtocolError(f"{where}: expected text, an integer, true/false or a list of "
                        f"at most {MAX_FACT_LIST} integers")
