"""``gpudash report [HOST] [--since 2h] [--svg FILE | --html FILE] [--json] [--demo]``:
the incident's story for a hand-off or a postmortem.

Each action of the audit (read as ``gpudash history`` reads it: one definition of what an
action was) beside each GPU's memory over the same seconds, from the compact series its
outcome record keeps. In the terminal as text; with ``--svg``/``--html`` the same
rendering exported by Rich (``Console(record=True)``), so the picture is what the
terminal shows. Host text is escaped (``untrusted.clean``) before it is rendered, and
rendered as plain ``Text``, never as markup: a unit named ``[red]x`` reads as written.
The picture is written by ``state.files.write_named``: never through a symbolic link (a
FILE that is one is refused, exit 2), whole or not at all.
"""

from __future__ import annotations

import argparse
import io
import math
import re
import shutil
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from rich.console import Console, Group, RenderableType
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from gpudash.cli.contract import Exit
from gpudash.cli.history import MARKS, read_actions, say_none
from gpudash.cli.terminal import Terminal
from gpudash.domain.units import MIB_PER_GIB, gib, gib_number
from gpudash.domain.untrusted import clean, json_dumps
from gpudash.session.history import Action
from gpudash.state import files
from gpudash.ui.plot import gpu_colour, render_series

VERDICT_STYLES = {"confirmed": "bold green", "warning": "bold yellow", "failed": "bold red",
                  "unknown": "bold magenta", "interrupted": "bold red"}
WIDTH = 120  # the picture's width in cells; the terminal's own when it is one
PLOT_HEIGHT = 12


def _when(t: float | None) -> str:
    return "?" if t is None else datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def _verdict(a: Action) -> str:
    if a.verdict is None:
        return "no outcome"
    return "interrupted" if a.interrupted else a.verdict


def timeline(a: Action) -> Text:
    """The action's lines: when, who, what, its verdict, GiB back, its phases on the
    clock of its memory curve (seconds from the start)."""
    out = Text()
    out.append(_when(a.started), style="bold")
    out.append(f"  {clean(a.host)}  by {clean(a.operator)}\n")
    out.append(f"{clean(a.action)} {clean(a.subject)}".rstrip() + "\n", style="bold cyan")
    verdict = _verdict(a)
    # on the clock its curve and phases are on (the demo's runs faster than the wall's)
    took = f" in {a.seconds:.1f} s" if a.seconds is not None else ""
    out.append(f"{MARKS.get(verdict, '?')} {verdict}", style=VERDICT_STYLES.get(verdict, "bold"))
    out.append(f"{took}\n")
    if a.verdict is None:
        out.append("a record of it was skipped (see the warning)\n" if a.unreadable
                   else "gpudash ended while acting (see the log)\n")
    back = a.mib_back()
    if back:
        out.append(f"{gib(sum(back.values()))} back\n")
        for g, m in sorted(back.items()):
            out.append("━━ ", style=gpu_colour(g))
            out.append(f"GPU{g} {gib_number(m)} GiB back\n")
    at = 0.0
    for ph in a.phases:
        seconds = ph.get("seconds")
        mark = "ok" if ph.get("confirmed") else "NOT confirmed"
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
            out.append(f"phase {clean(ph.get('name', '?'))} {at:.0f}–{at + seconds:.0f} s: "
                       f"{mark}\n")
            at += seconds
        else:
            out.append(f"phase {clean(ph.get('name', '?'))}: {mark}\n")
    if a.summary and verdict != "confirmed":
        out.append(clean(a.summary) + "\n", style="italic")
    if a.reverified:
        out.append(f"re-verified {a.reverified}x\n")
    out.rstrip()
    return out


def memory(a: Action, width: int) -> RenderableType:
    """The action's memory, one curve per GPU (GiB over seconds from its start); one line
    where nothing moved (a 0.0 s action had a 16-line flat chart)."""
    if not a.memory:
        return Text("no memory series in this record (written by an older gpudash, or "
                    "none was sampled)", style="dim")
    gpus = sorted({g for _t, used in a.memory for g in used})
    if len({tuple(sorted(used.items())) for _t, used in a.memory}) == 1:
        first = a.memory[0][1]
        shown = ", ".join(f"GPU{g} {gib(first.get(g))}" for g in gpus) or "no GPU"
        return Text(f"GPU memory unchanged over {a.memory[-1][0]:.1f} s: {shown}",
                    style="dim")
    top = max((m for _t, used in a.memory for m in used.values() if m is not None),
              default=0)
    ymax = float(max(1, math.ceil(top / MIB_PER_GIB * 1.05)))
    legend = Text("GiB used, by seconds on the host's clock\n", style="dim")
    for g in gpus:
        legend.append("━━ ", style=gpu_colour(g))
        legend.append(f"GPU{g}  ")
    legend.rstrip()
    return Group(render_series(a.memory, gpus, width=width, height=PLOT_HEIGHT,
                               ymax_gib=ymax), legend)


def rendering(actions: Sequence[Action], width: int, title: str) -> RenderableType:
    """The report: a heading, then each action's timeline beside its memory."""
    parts: list[RenderableType] = [Text(title, style="bold")]
    left = max(34, width // 3)
    for a in actions:
        row = Table.grid(padding=(0, 2))
        row.add_column(width=left, no_wrap=False)
        row.add_column()
        row.add_row(timeline(a), memory(a, max(20, width - left - 4)))
        parts += [Rule(style="dim"), row]
    return Group(*parts)


def _offline_svg() -> str:
    """Rich's SVG template without its web font: it fetched Fira Code from a CDN, and
    offline the charts' braille fell back to a font of another width (dotted lines, stray
    bars). Monospace fonts a system has, with the Braille block, are named instead."""
    from rich._export_format import CONSOLE_SVG_FORMAT

    page = re.sub(r"@font-face \{\{.*?\}\}\s*", "", CONSOLE_SVG_FORMAT, flags=re.S)
    return page.replace("font-family: Fira Code, monospace;", f"font-family: {FONTS};")


FONTS = ("'DejaVu Sans Mono', 'Noto Sans Mono', Menlo, Consolas, 'Liberation Mono', "
         "monospace")
OFFLINE_SVG = _offline_svg()


def _title(actions: Sequence[Action], hosts: Sequence[str], since: float | None) -> str:
    where = ", ".join(sorted({clean(a.host) for a in actions})) or ", ".join(
        clean(h) for h in hosts)
    span = f" since {_when(since)}" if since is not None else ""
    first, last = actions[0].started, actions[-1].ended or actions[-1].started
    return (f"gpudash report: {len(actions)} action(s) on {where}{span} "
            f"({_when(first)} to {_when(last)})")


def cmd_report(args: argparse.Namespace, term: Terminal) -> int:
    read = read_actions(args, term)
    found, since = read.found, read.since
    if args.json:
        term.result_json(json_dumps({"actions": [
            {**a.to_json(), "memory": [{"t": t, "mib": {str(g): m for g, m in used.items()}}
                                       for t, used in a.memory]}
            for a in found.actions], "skipped": len(found.skipped)}, indent=2))
        return Exit.OK
    if not found.actions:
        say_none(read, args, term)
        return Exit.OK
    title = _title(found.actions, args.hosts, since)
    picture: Path | None = args.svg or args.html
    if picture is None:
        tty = term.stdout.isatty()
        width = shutil.get_terminal_size((WIDTH, 24)).columns if tty else WIDTH
        console = Console(file=io.StringIO(), width=width, highlight=False,
                          force_terminal=tty, no_color=not tty)
        with console.capture() as shown:
            console.print(rendering(found.actions, width, title))
        term.result_rendered(shown.get())
        return Exit.OK
    console = Console(record=True, width=WIDTH, file=io.StringIO(), highlight=False,
                      color_system="truecolor", force_terminal=True)
    console.print(rendering(found.actions, WIDTH, title))
    page = (console.export_svg(title="gpudash report", code_format=OFFLINE_SVG)
            if args.svg is not None else console.export_html(inline_styles=True))
    try:
        files.write_named(picture, page.encode("utf-8"))
    except files.StateDirError as exc:  # a link, or no file: says why and what to do
        term.error(f"cannot write the report: {exc}")
        return Exit.USAGE
    except OSError as exc:
        term.error(f"cannot write {picture}: {exc}")
        return Exit.USAGE
    term.say(f"report of {len(found.actions)} action(s) written to {picture}")
    return Exit.OK
