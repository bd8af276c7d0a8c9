"""Live progress of the running action: per GPU, memory from before towards the target."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from gpudash.engine import ActionPlan, ActionReport, Progress
from gpudash.ui.palette import Palette
from gpudash.ui.text import literal
from gpudash.units import gib, gib_number

BAR = 24


def _bar(before: int | None, target: int, now: int | None, pal: Palette, done: bool) -> Text:
    if before is None or now is None or before <= target:
        return Text("░" * BAR, style=pal.empty)
    fraction = max(0.0, min(1.0, (before - now) / (before - target)))
    filled = round(fraction * BAR)
    text = Text("█" * filled, style=pal.success if done else pal.notice)
    text.append("░" * (BAR - filled), style=pal.empty)
    return text


def progress_text(
    plan: ActionPlan,
    progress: Progress | None,
    report: ActionReport | None,
    error: str | None,
    pal: Palette,
    settle: int,
) -> Text:
    """Title, phase, one line per GPU the plan frees memory on, then the verdict."""
    out = Text()
    out.append_text(literal(f"{plan.title}  on {plan.host}", style="bold"))
    out.append("\n")
    targets = plan.target_used_mib()
    used = dict(plan.used_before_mib) if progress is None else dict(progress.used_mib)
    stable = {} if progress is None else dict(progress.stable)
    if report is not None and report.gpus:
        used.update({g.index: g.after_mib for g in report.gpus})
    for gpu, target in sorted(targets.items()):
        before = plan.used_before_mib.get(gpu)
        now = used.get(gpu)
        ok = stable.get(gpu, 0) >= settle
        if report is not None:
            ok = any(g.index == gpu and g.confirmed for g in report.gpus)
        out.append(f"GPU{gpu} ")
        out.append_text(_bar(before, target, now, pal, ok))
        out.append(f" {gib_number(before):>5} → {gib(target):>9}  now {gib(now):>9} ")
        if ok:
            out.append("✓", style=f"bold {pal.success}")
        else:
            out.append(f"{stable.get(gpu, 0)}/{settle}", style="dim")
        out.append("\n")
    if not targets:
        out.append("no GPU memory expected back\n", style="dim")
    if error is not None:
        out.append_text(literal(f"✘ failed: {error}", style=f"bold {pal.error}"))
    elif report is None:
        message = "" if progress is None else f"[{progress.phase}] {progress.message}"
        out.append_text(literal(message or "starting…", style="italic"))
    elif report.confirmed and targets:
        out.append("✔ memory back on every GPU, confirmed", style=f"bold {pal.success}")
        out.append_text(literal(f"  ({report.summary})", style=pal.success))
    elif report.confirmed:
        out.append_text(literal(f"✔ {report.summary}", style=f"bold {pal.success}"))
    else:
        out.append_text(literal(f"✘ {report.summary}", style=f"bold {pal.error}"))
        for lo in report.leftovers:
            who = "unknown holder" if lo.pid is None else f"pid {lo.pid}"
            mib = "?" if lo.mib is None else gib(lo.mib)
            out.append("\n")
            out.append_text(literal(f"  {lo.where} {mib} held by {who}: {lo.reason} {lo.detail}",
                                    style=pal.warning))
    return out


class ActionProgressPanel(Static):
    """Shown while an action runs and after it ends, until the next one (x hides it)."""

    DEFAULT_CSS = """
    ActionProgressPanel {
        height: auto; max-height: 14; overflow-y: auto;
        border: round $accent; padding: 0 1; display: none;
    }
    ActionProgressPanel.-shown { display: block; }
    ActionProgressPanel.-ok { border: round $success; }
    ActionProgressPanel.-failed { border: round $error; }
    """
