"""The action panel: the verdict or what the action waits for comes first, then the GPUs
still waiting, and every number is the latest sample's."""

from __future__ import annotations

from gpudash.demo.host import MINIMAX, MODEL_MIB, DemoHost
from gpudash.engine import ActionKind, ActionReport, GpuOutcome, Progress, plan_action
from gpudash.ui.palette import Palette
from gpudash.ui.widgets.progress import progress_text

PAL = Palette(ok="green", warn="yellow", critical="red", empty="grey50", orphan="magenta",
              notice="cyan", success="green", error="red", warning="yellow", muted="grey50")


def reclaim_plan():  # type: ignore[no-untyped-def]
    return plan_action(DemoHost(seed=7).snapshot(), ActionKind.RECLAIM, unit=MINIMAX)


def tp(plan, n: int) -> int:  # type: ignore[no-untyped-def]
    return next(t.pid for t in plan.targets if t.cmdline == f"VLLM::Worker_TP{n}")


def term_wait(plan, **extra) -> Progress:  # type: ignore[no-untyped-def]
    """Seven workers exited on TERM and their memory is back; TP5 ignores TERM."""
    used = {0: 2048, **{g: 0 for g in range(1, 8)}, 5: MODEL_MIB}
    fields = dict(
        phase="waiting", message="waiting for 1 process(es) to exit after TERM",
        used_mib=used, target_mib=plan.target_used_mib(), stable={g: 0 for g in range(8)},
        alive_pids=(tp(plan, 5),), term_left_s=8.5, escalated=(),
    )
    fields.update(extra)
    return Progress(**fields)  # type: ignore[arg-type]


def lines_of(text) -> list[str]:  # type: ignore[no-untyped-def]
    return text.plain.splitlines()


def test_waiting_line_names_the_survivor_its_gpu_and_the_kill_deadline() -> None:
    plan = reclaim_plan()
    lines = lines_of(progress_text(plan, term_wait(plan), None, None, PAL, 3, term_timeout=10.0))
    waiting = lines[1]
    assert f"pid {tp(plan, 5)} (vLLM TP5 worker, GPU5)" in waiting
    assert "KILL in 8.5 s" in waiting and "limit 10 s" in waiting


def test_gpu_rows_follow_the_latest_sample_and_the_waiting_gpu_comes_first() -> None:
    plan = reclaim_plan()
    lines = lines_of(progress_text(plan, term_wait(plan), None, None, PAL, 3, term_timeout=10.0))
    rows = [line for line in lines if line.startswith("GPU")]
    assert len(rows) == 8
    assert rows[0].startswith("GPU5 ") and "now  94.5 GiB" in rows[0]
    assert all("now   0.0 GiB" in r for r in rows if r.startswith(("GPU1 ", "GPU7 ")))


def test_escalation_shows_in_the_panel() -> None:
    plan = reclaim_plan()
    progress = term_wait(plan, phase="signals", message="escalated", alive_pids=(),
                         term_left_s=None, escalated=(tp(plan, 5),))
    text = progress_text(plan, progress, None, None, PAL, 3, term_timeout=10.0).plain
    assert f"TERM ignored: KILL sent to pid {tp(plan, 5)} (vLLM TP5 worker, GPU5)" in text


def test_confirmed_result_says_it_once_and_before_the_gpu_rows() -> None:
    plan = reclaim_plan()
    report = ActionReport(plan)
    report.confirmed = True
    report.summary = "confirmed: 754.3 GiB back on 8 GPU(s)"
    report.gpus = [GpuOutcome(g, MODEL_MIB, t, t, True) for g, t in plan.target_used_mib().items()]
    lines = lines_of(progress_text(plan, None, report, None, PAL, 3))
    assert lines[1] == "✔ confirmed: 754.3 GiB back on 8 GPU(s)"
    assert sum(line.count("confirmed") for line in lines) == 1


def test_two_columns_keep_every_gpu_and_the_verdict_in_few_lines() -> None:
    plan = reclaim_plan()
    text = progress_text(plan, term_wait(plan), None, None, PAL, 3, term_timeout=10.0, columns=2)
    lines = lines_of(text)
    assert len(lines) == 1 + 1 + 4  # title, waiting line, 8 GPUs two per line
    assert all(f"GPU{g} " in text.plain for g in range(8))
    rows = [line for line in lines if line.startswith("GPU")]
    assert rows[0].startswith("GPU5 ")  # the one still held comes first
    assert max(len(line) for line in rows) <= 76  # fits an 80-column terminal's panel
