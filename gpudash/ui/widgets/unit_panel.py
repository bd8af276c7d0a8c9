"""The unit panel: systemd facts about the selection's owner, and triage's warnings."""

from __future__ import annotations

from rich.text import Text

from gpudash.model import Process
from gpudash.triage import Flag, OwnerGroup, OwnerKind
from gpudash.ui.palette import Palette
from gpudash.ui.text import literal
from gpudash.ui.widgets.holders import flags_text
from gpudash.ui.widgets.quiet import QuietStatic
from gpudash.units import NA, gib

_KIND_NOTE = {
    OwnerKind.SESSION: "a login session: somebody's live work; reap never touches it",
    OwnerKind.CONTAINER: "a container scope: stop it with its container runtime",
    OwnerKind.SCOPE: "a transient scope",
    OwnerKind.NONE: "no systemd unit owns these processes",
}


def unit_text(group: OwnerGroup | None, process: Process | None, pal: Palette) -> Text:
    """The panel's content for the selected owner group (and process, if one is selected)."""
    if group is None:
        return Text("Select a unit or process in Holders.", style="dim")
    out = Text()
    out.append_text(literal(group.key, style="bold"))
    out.append("\n")
    # The warnings come first: they say what an action will really do, and a short
    # panel must not scroll them out of sight.
    for warning in group.warnings:
        out.append("⚠ ", style=f"bold {pal.warning}")
        out.append_text(literal(warning, style=f"bold {pal.warning}"))
        out.append("\n")
    unit = group.unit
    if unit is not None and unit.description:
        out.append_text(literal(unit.description, style="italic"))
        out.append("\n")

    def row(name: str, value: str | None, style: str = "") -> None:
        out.append(f"{name:<12}", style="dim")
        out.append_text(literal(NA if value is None else value, style=style))
        out.append("\n")

    if group.flags:
        orphans = sum(1 for n in group.nodes() if Flag.ORPHAN in n.flags)
        out.append_text(flags_text(group.flags, pal, orphans))
        out.append("\n")
    if unit is not None and group.kind is OwnerKind.SERVICE:
        down = unit.is_down
        row("Active", f"{unit.active_state or NA} / {unit.sub_state or NA}",
            pal.notice if down else pal.success)
        row("Unit file", unit.unit_file_state,
            pal.notice if unit.unit_file_state == "enabled" and down else "")
        row("Restart=", unit.restart,
            pal.warning if (unit.restart or "no") not in ("no", "") else "")
        row("KillMode=", unit.kill_mode,
            pal.warning if unit.kill_mode in ("process", "none") else "")
        row("NRestarts", None if unit.n_restarts is None else str(unit.n_restarts),
            pal.notice if unit.n_restarts else "")
        row("MainPID", None if unit.main_pid is None else str(unit.main_pid))
    else:
        out.append_text(Text(_KIND_NOTE.get(group.kind, group.kind.value), style="dim"))
        out.append("\n")
    total = group.total_gpu_memory_mib
    gpus = sum(1 for v in group.gpu_memory_mib.values() if v)
    row("GPU memory", f"{gib(total)} on {gpus} GPU(s)" if total else "none", "bold")
    if process is not None:
        out.append("\n")
        out.append(f"pid {process.pid}", style="bold")
        out.append("  ")
        out.append_text(literal(f"{process.user or '?'}  state {process.state or '?'}"))
        out.append("\n")
        out.append_text(literal(process.cmdline or process.name, style="dim"))
    out.rstrip()
    return out


def unit_gist(group: OwnerGroup | None, pal: Palette) -> Text | None:
    """One line for Holders' border when the unit panel has no room:
    ``vllm.service active/running · Restart=always · ⚠ 2 · Enter: details``."""
    if group is None:
        return None
    out = literal(group.key, style="bold")
    unit = group.unit
    if unit is not None and group.kind is OwnerKind.SERVICE:
        out.append(f" {unit.active_state or NA}/{unit.sub_state or NA}")
        if unit.restart and unit.restart != "no":
            out.append_text(literal(f" · Restart={unit.restart}"))
        if unit.kill_mode in ("process", "none"):
            out.append_text(literal(f" · KillMode={unit.kill_mode}"))
    if group.warnings:
        out.append(f" · ⚠ {len(group.warnings)}", style=f"bold {pal.warning}")
    out.append(" · Enter: details", style="dim")
    return out


class UnitPanel(QuietStatic):
    """Facts and advice about the selected owner."""

    DEFAULT_CSS = """
    UnitPanel { height: 1fr; overflow-y: auto; }
    """
