"""The holders' text filter (``/``): a word anywhere in a row, or a flag.

A flag's name (``orphan``, ``zombie``, ``d-state``, ``crash loop``, ``respawned``,
``inactive``; their short forms ``orph``, ``zomb``, ...) keeps the rows that carry that
flag, under their owner: typing ``orphan`` matched the owner row's ``8×ORPHAN`` and so
kept every process of that owner, orphan or not.
"""

from __future__ import annotations

from gpudash.domain.triage import Flag
from gpudash.ui.widgets.holder_flags import SHORT_FLAG
from gpudash.ui.widgets.holders import HolderRow

FLAG_WORDS: dict[str, Flag] = {
    **{f.value.lower(): f for f in Flag},
    **{short.lower(): f for f, short in SHORT_FLAG.items()},
    "inactive": Flag.UNIT_INACTIVE, "loop": Flag.CRASH_LOOP, "crash": Flag.CRASH_LOOP,
    "dstate": Flag.D_STATE,
}


def filter_rows(rows: list[HolderRow], text: str) -> list[HolderRow]:
    """Rows matching ``text`` (case-insensitive, anywhere in the row), with their owner; a
    flag's name: the rows carrying it.

    An owner row that matches keeps all its processes (for a flag: an owner flagged so as a
    whole, such as UNIT INACTIVE); otherwise only its matching processes are kept, under it.
    Owners with nothing left are dropped.
    """
    needle = text.strip().lower()
    if not needle:
        return rows
    flag = FLAG_WORDS.get(needle)
    if flag is not None:
        return _flagged(rows, flag)

    def hit(row: HolderRow) -> bool:
        return any(needle in cell.plain.lower() for cell in row.cells)

    out: list[HolderRow] = []
    group: HolderRow | None = None
    members: list[HolderRow] = []

    def flush() -> None:
        if group is None:
            return
        kept = members if hit(group) else [m for m in members if hit(m)]
        if kept or hit(group):
            out.append(group)
            out.extend(kept)

    for row in rows:
        if row.key.startswith("u:"):
            flush()
            group, members = row, []
        elif row.key.startswith("x:"):  # a row of its own, under no owner
            flush()
            group, members = None, []
            if hit(row):
                out.append(row)
        else:
            members.append(row)
    flush()
    return out




def _flagged(rows: list[HolderRow], flag: Flag) -> list[HolderRow]:
    """The process rows flagged ``flag``, under their owner; an owner flagged so with no
    such process (a group flag: UNIT INACTIVE, RESPAWNED, CRASH LOOP) with all of its."""
    out: list[HolderRow] = []
    group: HolderRow | None = None
    members: list[HolderRow] = []

    def flush() -> None:
        if group is None:
            return
        kept = [m for m in members if flag in m.flags]
        if kept:
            out.append(group)
            out.extend(kept)
        elif flag in group.flags and flag is not Flag.ORPHAN:
            out.append(group)
            out.extend(members)

    for row in rows:
        if row.key.startswith("u:"):
            flush()
            group, members = row, []
        elif row.key.startswith("x:"):
            flush()
            group, members = None, []
        else:
            members.append(row)
    flush()
    return out
