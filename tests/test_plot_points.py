"""The plot hands plotext the points its lines need, not every sample (issue 30: CPU).

Five minutes of history is 300 samples per GPU; plotext's cost is per point, and drawing
them all took about 25 ms, every 5 s. A reading that stays the same is a flat line: its
first and last sample draw it. The chart must be exactly the one all the samples draw.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from gpudash.ui import plot
from gpudash.ui.plot import flat_runs_ends, render_history

GPUS = list(range(8))


def flat_with_steps(n: int = 300) -> list[tuple[float, dict[int, int | None]]]:
    """Each GPU flat, GPU 3 stepping up half way and GPU 5 down near the end, GPU 6
    unread (None) for a while."""
    out: list[tuple[float, dict[int, int | None]]] = []
    for t in range(n):
        used: dict[int, int | None] = {g: 4000 + 1000 * g for g in GPUS}
        used[3] = 3000 + (20000 if t > n // 2 else 0)
        used[5] = 9000 if t < n - 20 else 2000
        used[6] = None if 100 <= t < 140 else 10000
        out.append((1000.0 + t, used))
    return out


def noisy(n: int = 300) -> list[tuple[float, dict[int, int | None]]]:
    rng = random.Random(7)
    return [(1000.0 + t, {g: rng.choice((4000, 4000, 4100, 30000)) for g in GPUS})
            for t in range(n)]


def points_drawn(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many points each line handed to plotext had."""
    fig, _marker, _pixel = plot._kit()
    real = fig.signal
    counts: list[int] = []

    def counting(xs: list[float], ys: list[float], *args: Any, **kwargs: Any) -> Any:
        counts.append(len(xs))
        return real(xs, ys, *args, **kwargs)

    monkeypatch.setattr(fig, "signal", counting)
    return counts


@pytest.mark.parametrize("history", [flat_with_steps(), noisy()], ids=["flat", "noisy"])
def test_the_chart_is_the_one_every_sample_draws(
        history: list[tuple[float, dict[int, int | None]]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    thinned = render_history(history, GPUS, width=58, height=11, ymax=79.6)
    with monkeypatch.context() as m:
        m.setattr(plot, "flat_runs_ends", lambda xs, ys: (xs, ys))
        every = render_history(history, GPUS, width=58, height=11, ymax=79.6)
    assert thinned.plain == every.plain
    assert thinned.spans == every.spans


def test_five_minutes_of_flat_memory_is_a_few_points_per_gpu(
        monkeypatch: pytest.MonkeyPatch) -> None:
    counts = points_drawn(monkeypatch)
    render_history(flat_with_steps(), GPUS, width=58, height=11, ymax=79.6)
    assert len(counts) == len(GPUS)
    assert max(counts) <= 4, counts  # a step is two runs: four points
    assert sum(counts) <= 3 * len(GPUS), counts


def test_a_run_keeps_its_ends_and_every_change() -> None:
    assert flat_runs_ends([0, 1, 2, 3], [5, 5, 5, 5]) == ([0, 3], [5, 5])
    assert flat_runs_ends([0, 1, 2, 3, 4], [5, 5, 7, 7, 7]) == ([0, 1, 2, 4], [5, 5, 7, 7])
    assert flat_runs_ends([0, 1, 2], [1, 2, 3]) == ([0, 1, 2], [1, 2, 3])
    assert flat_runs_ends([0], [1]) == ([0], [1])
    assert flat_runs_ends([], []) == ([], [])
