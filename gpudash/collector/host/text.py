"""Host text on the wire: what a text costs as JSON, cutting it to its limit, and the
largest snapshot line those limits allow."""

from __future__ import annotations

import json

from .protocol import (
    CGROUP_MAX,
    CMDLINE_BUDGET,
    CMDLINE_MAX,
    CMDLINE_SHORT,
    CONTAINER_KEYS,
    ERROR_MAX,
    EXEC_MAX,
    GPU_KEYS,
    MAX_CONTAINERS,
    MAX_ERRORS,
    MAX_GPUS,
    MAX_PROCS,
    MAX_UNITS,
    POD_KEYS,
    PROC_KEYS,
    SNAPSHOT_KEYS,
    TEXT_MAX,
    TRUNCATED,
    UNIT_KEYS,
    WORD_MAX,
)


def text_cost(text: str) -> int:
    """Bytes ``text`` takes in a JSON line: UTF-8 as is, control characters escaped."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", "replace")) - 2


def cap_text(text: str, limit: int) -> str:
    """``text`` within ``limit`` bytes of JSON, ending in ``TRUNCATED`` if it was cut."""
    if len(text) * 6 <= limit:  # even if every character were a \u escape
        return text
    if len(text) <= limit and text_cost(text) <= limit:
        return text
    room = limit - text_cost(TRUNCATED)
    low, high = 0, min(len(text), room)  # every character costs at least one byte
    while low < high:  # the longest prefix that fits: a dozen json.dumps at most
        mid = (low + high + 1) // 2
        if text_cost(text[:mid]) <= room:
            low = mid
        else:
            high = mid - 1
    return text[:low] + TRUNCATED


def snapshot_bound() -> int:
    """Bytes of the largest full-snapshot line this collector writes, given the limits."""
    number = 26  # a key with a number or a boolean: '"memory_total_mib":16777215,'
    gpu = len(GPU_KEYS) * number + 2 * TEXT_MAX + ERROR_MAX
    proc = (
        len(PROC_KEYS) * number
        + CMDLINE_SHORT  # longer ones share CMDLINE_BUDGET
        + CGROUP_MAX
        + 6 * TEXT_MAX  # state, user, name, unit, user_unit, claim
        + MAX_GPUS * 16  # gpu_memory_mib: '"63":16777215,'
    )
    unit = len(UNIT_KEYS) * number + CGROUP_MAX + 8 * TEXT_MAX + EXEC_MAX
    container = len(CONTAINER_KEYS) * number + 64 + 8 + 2 * TEXT_MAX + 2 * WORD_MAX
    pod = len(POD_KEYS) * number + 64 + 2 * TEXT_MAX
    top = len(SNAPSHOT_KEYS) * number + 3 * TEXT_MAX + ERROR_MAX + MAX_ERRORS * (ERROR_MAX + 3)
    return (
        top + MAX_GPUS * gpu + MAX_PROCS * proc + CMDLINE_BUDGET + CMDLINE_MAX + MAX_UNITS * unit
        + MAX_CONTAINERS * (container + pod)
    )
