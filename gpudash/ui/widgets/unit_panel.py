"""The unit panel: systemd facts about the selection's owner, and triage's warnings."""

from __future__ import annotations

from rich.text import Text

from gpudash.domain.model import UNREADABLE, Container, Process, Unit
from gpudash.domain.triage import Flag, OwnerGroup
from gpudash.domain.units import NA, gib
from gpudash.ui.crashes import CrashReason
from gpudash.ui.palette import Palette
from gpudash.ui.text import literal
from gpudash.ui.widgets.holder_flags import flags_text
from gpudash.ui.widgets.quiet import QuietStatic


def _row(out: Text, name: str, value: str | None, style: str = "") -> None:
    out.append(f"{name:<12}", style="dim")
    out.append_text(literal(NA if value is None else value, style=style))
    out.append("\n")


def _service_rows(out: Text, group: OwnerGroup, unit: Unit, pal: Palette,
                  fix_key: str | None = None) -> None:
    down = unit.is_down
    _row(out, "Active", f"{unit.active_state or NA} / {unit.sub_state or NA}",
         pal.notice if down else pal.success)
    _row(out, "Unit file", unit.unit_file_state,
         pal.notice if unit.unit_file_state == "enabled" and down else "")
    _row(out, "Restart=", unit.restart,
         pal.warning if (unit.restart or "no") not in ("no", "") else "")
    _row(out, "KillMode=", unit.kill_mode,
         pal.warning if unit.kill_mode in ("process", "none") else "")
    _row(out, "NRestarts", None if unit.n_restarts is None else str(unit.n_restarts),
         pal.notice if unit.n_restarts else "")
    _row(out, "MainPID", None if unit.main_pid is None else str(unit.main_pid))
    _lint_rows(out, group, pal, fix_key)


def _lint_rows(out: Text, group: OwnerGroup, pal: Palette, fix_key: str | None = None
               ) -> None:
    """What sets the trap, in the owner's own configuration (a unit's, a container's);
    ``fix_key``: the key that fixes it, where it can be (the findings named no way out)."""
    if group.lint:
        out.append("Configuration\n", style=f"bold {pal.notice}")
        for finding in group.lint:
            out.append("⚙ ", style=pal.notice)
            out.append_text(literal(finding.setting, style="bold"))
            out.append_text(literal(f": {finding.why}"))
            out.append("\n")
        if fix_key:
            out.append(f" {fix_key} ", style="bold reverse")
            out.append(" fix the cause: gpudash's drop-in, previewed, reversible\n")


def _crash_rows(out: Text, unit: Unit, crash: CrashReason | None, pal: Palette) -> None:
    """A crash loop, named, with the journal's line that says why (host text, literal)."""
    every = f" every {unit.restart_s:g} s" if unit.restart_s is not None else ""
    out.append("✘ CRASH LOOP: ", style=f"bold {pal.warning}")
    out.append_text(literal(f"systemd restarted it {unit.n_restarts or 0} time(s){every} "
                            f"(Restart={unit.restart or '?'})", style=f"bold {pal.warning}"))
    out.append("\n")
    if crash is None or crash.failure is None:
        out.append("  why: its journal " + ("is being read" if crash is None else
                   "names no cause gpudash knows") + " (j shows it)\n", style="dim")
        return
    out.append("  why: ", style="bold")
    out.append_text(literal(crash.failure.line))
    out.append("\n  ")
    out.append_text(literal(crash.failure.advice, style="italic"))
    out.append("\n")


def _container_rows(out: Text, group: OwnerGroup, c: Container, pal: Palette) -> None:
    _row(out, "Container", f"{c.runtime} {c.short_id}")
    _row(out, "Image", c.image)
    _row(out, "State", c.state, pal.notice if c.is_down else pal.success)
    _row(out, "Restart", c.restart_policy,
         pal.warning if (c.restart_policy or "no") not in ("no", "") else "")
    _row(out, "Restarts", None if c.restart_count is None else str(c.restart_count),
         pal.notice if c.restart_count else "")
    _row(out, "Main pid", None if c.main_pid is None else str(c.main_pid))
    _row(out, "Health", c.health, pal.warning if c.health in ("none", "unhealthy") else "")
    _row(out, "Init", c.init)
    _row(out, "PID mode", c.pid_mode, pal.warning if c.pid_mode == "host" else "")
    _lint_rows(out, group, pal)


def _process_rows(out: Text, process: Process, pal: Palette, why: str | None) -> None:
    out.append("\n")
    out.append(f"pid {process.pid}", style="bold")
    out.append("  ")
    out.append_text(literal(f"{process.user or '?'}  state {process.state or '?'}"))
    out.append("\n")
    if why:
        out.append("ORPHAN ", style=f"bold {pal.orphan}")
        out.append_text(literal(why, style=pal.orphan))
        out.append("\n")
    if process.unreadable:
        out.append("UNREADABLE ", style=f"bold {pal.warning}")
        out.append_text(literal(UNREADABLE.get(process.unreadable, process.unreadable)))
        out.append("\n")
    out.append_text(literal(process.cmdline or process.name, style="dim"))


def unit_text(group: OwnerGroup | None, process: Process | None, pal: Palette,
              why: str | None = None, crash: CrashReason | None = None,
              fix_key: str | None = None, resume_key: str | None = None) -> Text:
    """The panel's content for the selected owner group (and process, if one is selected;
    ``why``: what makes it an orphan, in the triage's words; ``crash``: why its unit
    crash-loops, as its journal says; ``resume_key``: the key that resumes the drained
    node an owner runs on, where it can be)."""
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
    if unit is not None and Flag.CRASH_LOOP in group.flags:
        _crash_rows(out, unit, crash, pal)
    if unit is not None and unit.description:
        out.append_text(literal(unit.description, style="italic"))
        out.append("\n")
    if group.flags:
        orphans = sum(1 for n in group.nodes() if Flag.ORPHAN in n.flags)
        out.append_text(flags_text(group.flags, pal, orphans))
        out.append("\n")
    owner = group.owner
    if group.service is not None:
        _service_rows(out, group, group.service, pal, fix_key)
    elif owner is not None and owner.container is not None:
        _container_rows(out, group, owner.container, pal)
    else:
        about = owner.rules.about(owner) if owner is not None else group.kind.value
        out.append_text(literal(about, style="dim"))
        out.append("\n")
        for name, value in owner.rules.rows(owner) if owner is not None else ():
            _row(out, name, value)
        if resume_key and owner is not None and owner.facts.get("node_drain"):
            out.append(f" {resume_key} ", style="bold reverse")
            out.append(" resume the node: it takes jobs again, proven by scontrol\n")
    total = group.total_gpu_memory_mib
    gpus = sum(1 for v in group.gpu_memory_mib.values() if v)
    _row(out, "GPU memory", f"{gib(total)} on {gpus} GPU(s)" if total else "none", "bold")
    if process is not None:
        _process_rows(out, process, pal, why)
    out.rstrip()
    return out


def unit_gist(group: OwnerGroup | None, pal: Palette) -> Text | None:
    """One line for Holders' border when the unit panel has no room:
    ``vllm.service active/running · Restart=always · ⚠ 2 · Enter: details``."""
    if group is None:
        return None
    out = literal(group.key, style="bold")
    unit = group.service
    if unit is not None:
        out.append(f" {unit.active_state or NA}/{unit.sub_state or NA}")
        if unit.restart and unit.restart != "no":
            out.append_text(literal(f" · Restart={unit.restart}"))
        if unit.kill_mode in ("process", "none"):
            out.append_text(literal(f" · KillMode={unit.kill_mode}"))
    if Flag.CRASH_LOOP in group.flags:
        out.append(" · CRASH LOOP", style=f"bold {pal.warning}")
    if group.warnings:
        out.append(f" · ⚠ {len(group.warnings)}", style=f"bold {pal.warning}")
    out.append(" · Enter: details", style="dim")
    return out


CUT = "cut: Enter shows it all"


class UnitPanel(QuietStatic):
    """Facts and advice about the selected owner; when they do not fit, the border says
    so (Enter on the selection shows them in full)."""

    DEFAULT_CSS = """
    UnitPanel { height: 1fr; overflow-y: hidden; }
    """

    def show(self, text: Text) -> None:
        shown = self._shown
        self.update(text)
        if self._shown is not shown or shown is None:  # drawn: is it cut now?
            self.call_after_refresh(self._say_if_cut)

    def on_resize(self) -> None:
        self._say_if_cut()

    def _say_if_cut(self) -> None:
        box = self.content_size
        needed = self.get_content_height(box, self.app.size, box.width) if box.width else 0
        said = CUT if needed > box.height else None
        if self.border_subtitle != said:  # set again, the same, it drew a frame
            self.border_subtitle = said
