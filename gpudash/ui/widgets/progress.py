"""The running action and its result: the verdict or what it waits for first, then per GPU
the memory from before towards the target, the GPUs still waiting before those already back.

Order is what keeps it readable when the panel is short: the line that says how it went
is never below the GPU rows, and the GPUs that matter are the first rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rich.text import Text
from textual.widgets import Static

from gpudash.domain.units import gib, gib_number, seconds
from gpudash.engine import ActionPlan, ActionReport, Progress, Target
from gpudash.ui.palette import Palette
from gpudash.ui.text import clean, literal

BAR = 24
BAR_COMPACT = 10
NAMED_AT_MOST = 3  # pids named on the waiting line; the rest are counted
LOG_SHOWN = 3  # journal lines of a starting unit shown under its loading line


def _bar(
    before: int | None, target: int, now: int | None, pal: Palette, done: bool, width: int
) -> Text:
    if before is None or now is None or before <= target:
        return Text("░" * width, style=pal.empty)
    fraction = max(0.0, min(1.0, (before - now) / (before - target)))
    filled = round(fraction * width)
    text = Text("█" * filled, style=pal.success if done else pal.notice)
    text.append("░" * (width - filled), style=pal.empty)
    return text


def _who(pids: Iterable[int], targets: Mapping[int, Target]) -> str:
    """``pid 215122 (VLLM::Worker_TP5, GPU5)``, at most ``NAMED_AT_MOST`` of them."""
    pids = list(pids)
    parts = []
    for pid in pids[:NAMED_AT_MOST]:
        t = targets.get(pid)
        if t is None:
            parts.append(f"pid {pid}")
            continue
        gpus = ", ".join(f"GPU{g}" for g, mib in sorted(t.gpu_memory_mib.items()) if mib)
        parts.append(f"pid {pid} ({clean(t.label)}{', ' + gpus if gpus else ''})")
    more = len(pids) - NAMED_AT_MOST
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")


def _running_lines(
    plan: ActionPlan, progress: Progress | None, term_timeout: float, pal: Palette
) -> list[Text]:
    if progress is None:
        return [Text("starting…", style="italic")]
    targets = {t.pid: t for t in plan.targets}
    alive, term_left, escalated = progress.alive_pids, progress.term_left_s, progress.escalated
    lines: list[Text] = []
    if progress.step:
        names = [ph.name for ph in plan.phases]
        at = names.index(progress.step) + 1 if progress.step in names else 0
        lines.append(Text(f"step {at}/{len(names)}: {progress.step}", style="bold"))
    if progress.phase == "loading":
        lines.append(literal(" · ".join(progress.loading), style="italic"))
        lines += [literal(f"  │ {line}", style="dim") for line in progress.log_tail[-LOG_SHOWN:]]
        return lines
    if progress.phase == "waiting" and alive:
        line = Text(f"TERM sent; waiting for {_who(alive, targets)} to exit", style="italic")
        if term_left is not None:
            line.append(f"; KILL in {seconds(round(term_left, 1))}", style=f"bold {pal.warning}")
        line.append(f" (TERM→KILL limit {seconds(term_timeout)})", style="dim")
        lines.append(line)
    else:
        lines.append(literal(f"[{progress.phase}] {progress.message}", style="italic"))
        if alive and progress.phase == "verifying":
            lines.append(Text(f"still alive: {_who(alive, targets)}", style=pal.warning))
    if escalated:
        lines.append(Text(f"TERM ignored: KILL sent to {_who(escalated, targets)}",
                          style=f"bold {pal.warning}"))
    return lines


_VERDICT_MARK = {"confirmed": "✔", "warning": "⚠", "failed": "✘", "unknown": "?",
                 "interrupted": "■"}


def _result_lines(report: ActionReport, pal: Palette) -> list[Text]:
    verdict = report.verdict
    style = {"confirmed": pal.success, "warning": pal.warning}.get(verdict, pal.error)
    targets = {t.pid: t for t in report.plan.targets}
    lines = [literal(f"{_VERDICT_MARK.get(verdict, '✘')} {report.summary}", style=f"bold {style}")]
    if report.escalated:
        lines.append(Text(f"TERM ignored: KILL sent to {_who(report.escalated, targets)}",
                          style=pal.warning))
    for warning in report.warnings:
        if warning not in report.summary:  # said once: the summary may carry it already
            lines.append(literal(f"! {warning}", style=pal.warning))
    for lo in report.leftovers:
        who = "unknown holder" if lo.pid is None else f"pid {lo.pid}"
        mib = "?" if lo.mib is None else gib(lo.mib)
        lines.append(literal(f"  {lo.where} {mib} held by {who}: {lo.reason} {lo.detail}",
                             style=pal.warning))
    sv = report.serving
    if sv is not None and sv.serving and sv.mib_per_gpu:
        per = max(sv.mib_per_gpu.values())
        lines.append(Text(f"footprint learned: {gib(per)} per GPU on {len(sv.mib_per_gpu)} "
                          f"GPU(s), {'running' if sv.container else 'ready'} in "
                          f"{seconds(round(sv.ready_s or 0))}",
                          style=pal.success))
    elif sv is not None and not sv.serving:
        if sv.failure_line and sv.failure_line not in report.summary:  # said once
            lines.append(literal(f"log: {sv.failure_line}", style=f"bold {pal.error}"))
        if sv.failure_line:
            lines.append(literal(f"→ {sv.failure_advice}", style=pal.warning))
        tail = [line for line in sv.log_tail
                if not sv.failure_line or sv.failure_line not in line]  # said above
        lines += [literal(f"  │ {line}", style="dim") for line in tail[-LOG_SHOWN:]]
    return lines


def progress_text(
    plan: ActionPlan,
    progress: Progress | None,
    report: ActionReport | None,
    error: str | None,
    pal: Palette,
    settle: int,
    *,
    term_timeout: float = 10.0,
    columns: int = 1,
) -> Text:
    """Title; the verdict (or what the action waits for); one row per GPU the plan frees
    memory on, those not yet back first. ``columns=2`` packs two GPUs per line."""
    out = Text()
    out.append_text(literal(f"{plan.title}  on {plan.host}", style="bold"))
    if error is not None:
        status = [literal(f"✘ failed: {error}", style=f"bold {pal.error}")]
    elif report is None:
        status = _running_lines(plan, progress, term_timeout, pal)
    else:
        status = _result_lines(report, pal)
    for line in status:
        out.append("\n")
        out.append_text(line)

    targets = plan.target_used_mib()
    if progress is not None and (progress.target_mib or progress.phase == "loading"):
        targets = dict(progress.target_mib)  # the engine may narrow what it waits for
    used = dict(plan.used_before_mib) if progress is None else dict(progress.used_mib)
    stable = {} if progress is None else dict(progress.stable)
    done: dict[int, bool] = {g: stable.get(g, 0) >= settle for g in targets}
    if report is not None and report.gpus:
        targets = {g.index: g.target_mib for g in report.gpus}
        used.update({g.index: g.after_mib for g in report.gpus})
        done = {g.index: g.confirmed for g in report.gpus}
    if not targets:
        _append_nothing_back(out, plan, progress)
        return out
    def rank(g: int) -> int:  # 0: memory still held, 1: at target, settling, 2: back
        if done.get(g, False):
            return 2
        now = used.get(g)
        return 0 if now is None or now > targets[g] else 1

    order = sorted(targets, key=lambda g: (rank(g), g))
    _append_legend(out, report, compact=columns > 1)
    phase = _reclaim_then_start(report)
    cells = [
        _gpu_cell(g, plan.used_before_mib.get(g), targets[g], used.get(g), done.get(g, False),
                  stable.get(g, 0), settle, pal, compact=columns > 1 or phase)
        for g in order
    ]
    for i, cell in enumerate(cells):
        out.append("\n" if i % columns == 0 else "   ")
        out.append_text(cell)
    if phase and report is not None:
        _append_end(out, report)
    return out


def _append_nothing_back(out: Text, plan: ActionPlan, progress: Progress | None) -> None:
    """A plan that frees nothing: what the GPUs hold as it goes (a start), or that."""
    if plan.phases and progress is not None and progress.used_mib:
        out.append("\nGPU memory now: " + "  ".join(
            f"GPU{g} {gib_number(m)}" for g, m in sorted(progress.used_mib.items()))
            + " GiB", style="dim")
    elif not plan.phases:
        out.append("\nno GPU memory expected back", style="dim")


def _append_end(out: Text, report: ActionReport) -> None:
    """What the GPUs hold at the action's end (its last sample): a swap's new model."""
    if report.memory.used:
        final = report.memory.used[-1]
        out.append("\nGPU memory now: " + "  ".join(
            f"GPU{g} {gib_number(m)}" for g, m in sorted(final.items())) + " GiB", style="bold")


def _append_legend(out: Text, report: ActionReport | None, *, compact: bool) -> None:
    legend = _legend(report, compact=compact)
    if legend:
        out.append("\n")
        out.append(legend, style="dim")


def _legend(report: ActionReport | None, *, compact: bool) -> str | None:
    """What the per-GPU figures are, where it is not plain: a swap's are its reclaim's;
    what the GPUs hold at its end is said after them. A small screen's cells say
    "before→now" without a line for it."""
    if _reclaim_then_start(report):
        assert report is not None
        back = sum(g.freed_mib or 0 for g in report.gpus)
        return (f"reclaimed: {gib(back)} back on {len(report.gpus)} GPU(s), per GPU "
                f"(GiB before → after):")
    return None


def _reclaim_then_start(report: ActionReport | None) -> bool:
    """A swap that went on to start a model: its per-GPU figures are its first phase's,
    never what the GPUs hold at its end."""
    return report is not None and bool(report.gpus) and report.serving is not None and \
        len(report.plan.phases) > 1


def _gpu_cell(
    gpu: int, before: int | None, target: int, now: int | None, ok: bool, stable: int,
    settle: int, pal: Palette, *, compact: bool,
) -> Text:
    cell = Text(f"GPU{gpu} ")
    cell.append_text(_bar(before, target, now, pal, ok, BAR_COMPACT if compact else BAR))
    if compact:  # before → now: the proof keeps where it started (the bar: to target)
        cell.append(f" {gib_number(before):>5}→{gib_number(now):<5}")
    else:
        cell.append(f" {gib_number(before):>5} → {gib(target):>9}  now {gib(now):>9} ")
    mark = Text("  ✓", style=f"bold {pal.success}") if ok else Text(
        f"{stable}/{settle}".rjust(3), style="dim")
    cell.append_text(mark)
    return cell


MORE = "cut: Enter on its Action log entry shows it all"
MORE_LOG_HIDDEN = "cut: x, then Enter on its Action log entry, shows it all"


class ActionProgressPanel(Static):
    """Shown while an action runs and after it ends, until the next one (x hides it).

    When the screen leaves it fewer rows than the result has, its border says where the
    rest is (the log entry's detail view): what is cut is never out of reach."""

    DEFAULT_CSS = """
    ActionProgressPanel {
        height: auto; overflow-y: hidden;
        border: round $accent; padding: 0 1; display: none;
    }
    ActionProgressPanel.-shown { display: block; }
    ActionProgressPanel.-ok { border: round $success; }
    ActionProgressPanel.-warn { border: round $warning; }
    ActionProgressPanel.-failed { border: round $error; }
    """

    def show(
        self,
        plan: ActionPlan,
        progress: Progress | None,
        report: ActionReport | None,
        error: str | None,
        pal: Palette,
        *,
        settle: int,
        term_timeout: float,
        columns: int,
    ) -> None:
        verdict = None if report is None else report.verdict
        self.set_class(verdict == "confirmed", "-ok")
        self.set_class(verdict == "warning", "-warn")
        self.set_class(error is not None or verdict in ("failed", "unknown", "interrupted"),
                       "-failed")
        self.update(progress_text(plan, progress, report, error, pal, settle,
                                  term_timeout=term_timeout, columns=columns))
        self.call_after_refresh(self._say_if_cut)

    def _say_if_cut(self) -> None:
        box = self.content_size
        needed = self.get_content_height(box, self.app.size, box.width) if box.width else 0
        log_hidden = self.screen.has_class("-tiny")  # the log gave way to this panel
        said = (MORE_LOG_HIDDEN if log_hidden else MORE) if needed > box.height else None
        if self.border_subtitle != said:  # set again, the same, it drew a frame
            self.border_subtitle = said

