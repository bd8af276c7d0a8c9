"""How the holders table writes a row's flags: in full (``ORPHAN RESPAWNED``, a count on a
folded owner's row: ``8×ORPHAN``) or short where the table is narrow (``ORPH+2``)."""

from __future__ import annotations

from rich.text import Text

from gpudash.domain.triage import Flag
from gpudash.ui.palette import Palette

FLAG_ORDER = (
    Flag.ORPHAN, Flag.CRASH_LOOP, Flag.RESPAWNED, Flag.UNIT_INACTIVE, Flag.ZOMBIE,
    Flag.D_STATE, Flag.DEVICE_HOLDER, Flag.UNREADABLE, Flag.STRAY,
)
# What each flag says, for help's legend (docs/TRIAGE.md has the rules in full)
MEANING = {
    Flag.ORPHAN: "holds GPU memory and its owner is gone (an earlier run, a lost API "
                 "server, an ended job): reap it",
    Flag.CRASH_LOOP: "systemd keeps restarting the unit, and it keeps dying",
    Flag.RESPAWNED: "systemd started the unit again by itself: a kill does not free it",
    Flag.UNIT_INACTIVE: "the unit is stopped (or failed) while processes of it may be left",
    Flag.ZOMBIE: "exited, not yet reaped by its parent",
    Flag.D_STATE: "stuck in the kernel (uninterruptible): signals wait",
    Flag.DEVICE_HOLDER: "holds a GPU's device files without NVML listing it",
    Flag.UNREADABLE: "the driver lists it; its /proc could not be read (hidepid, a "
                     "namespace)",
    Flag.STRAY: "holds a GPU its scheduler did not allocate to it (Slurm)",
}


def legend() -> list[tuple[str, str]]:
    """(``ORPH ORPHAN``, what it means) of every flag, in the table's order."""
    return [(f"{SHORT_FLAG[f]:<5} {f.value}", MEANING[f]) for f in FLAG_ORDER]


def _flag_style(flag: Flag, pal: Palette) -> str:
    if flag is Flag.ORPHAN:
        return f"bold {pal.orphan}"
    if flag in (Flag.ZOMBIE, Flag.D_STATE, Flag.UNREADABLE, Flag.CRASH_LOOP, Flag.STRAY):
        return f"bold {pal.warning}"
    return f"bold {pal.notice}"


def flags_text(flags: frozenset[Flag], pal: Palette, orphans: int = 0) -> Text:
    out = Text()
    for flag in FLAG_ORDER:
        if flag in flags:
            if out:
                out.append(" ")
            label = f"{orphans}×ORPHAN" if flag is Flag.ORPHAN and orphans else flag.value
            out.append(label, style=_flag_style(flag, pal))
    return out


SHORT_FLAG = {
    Flag.ORPHAN: "ORPH", Flag.CRASH_LOOP: "LOOP", Flag.RESPAWNED: "RESP",
    Flag.UNIT_INACTIVE: "INACT",
    Flag.ZOMBIE: "ZOMB", Flag.D_STATE: "D-ST", Flag.DEVICE_HOLDER: "DEV",
    Flag.UNREADABLE: "UNRD", Flag.STRAY: "STRY",
}


def short_flags_text(flags: frozenset[Flag], pal: Palette) -> Text:
    """The first flag, abbreviated, and how many more: ``ORPH+2`` (the full list is in
    the unit panel and on Enter)."""
    shown = [f for f in FLAG_ORDER if f in flags]
    if not shown:
        return Text()
    out = Text(SHORT_FLAG[shown[0]], style=_flag_style(shown[0], pal))
    if len(shown) > 1:
        out.append(f"+{len(shown) - 1}", style="bold")
    return out
