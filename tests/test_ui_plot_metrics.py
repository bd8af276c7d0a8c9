"""The plot's three figures (issue 33, item 10: "utilisation and power history, with
markers where an action ran"): memory, SM utilisation and power per GPU, kept for every
host at every sample, `v` cycles what is drawn."""

from __future__ import annotations

import re

from gpudash.demo.host import DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.domain.model import Gpu, HostSnapshot
from gpudash.ui.gpu_history import POWER, UTILISATION, GpuHistory, histories
from gpudash.ui.plot import render_history

BRAILLE = re.compile("[\u2801-\u28ff]")


def snap(t: float, *gpus: Gpu) -> HostSnapshot:
    return HostSnapshot(host="h", taken_at=t, gpus=gpus, processes=())


def test_utilisation_and_power_are_kept_per_gpu_and_garbage_is_n_a() -> None:
    util, power = GpuHistory(UTILISATION), GpuHistory(POWER)
    rows = [
        (Gpu(0, utilization_pct=40, power_w=301.6), Gpu(1, utilization_pct=None, power_w=80.0)),
        (Gpu(0, utilization_pct=40, power_w=301.6), Gpu(1, utilization_pct=None, power_w=80.0)),
        # a host's garbage: NaN, infinity, negative, a figure beyond any array
        (Gpu(0, utilization_pct=-5, power_w=float("nan")),
         Gpu(1, utilization_pct=10**30, power_w=float("inf"))),
    ]
    for t, gpus in enumerate(rows):
        util.record(snap(float(t), *gpus))
        power.record(snap(float(t), *gpus))
    assert list(util) == [(0.0, {0: 40, 1: None}), (1.0, {0: 40, 1: None}),
                          (2.0, {0: 0, 1: 0xFFFE})]
    assert list(power) == [(0.0, {0: 302, 1: 80}), (1.0, {0: 302, 1: 80}),
                           (2.0, {0: None, 1: None})]
    assert util.shared(0, 1) and not util.shared(1, 2)  # an unchanged sample costs nothing
    # every figure is drawn (NaN never reaches plotext, which aborts on some)
    for series in (util, power):
        chart = render_history(series, [0, 1], width=60, height=12, ymax=series.metric.top(
            snap(0.0, Gpu(0, power_limit_w=float("nan")))), scale=1.0, what="x")
        assert BRAILLE.search(chart.plain)


def test_the_axis_top_ignores_what_no_axis_can_be() -> None:
    bad = snap(0.0, Gpu(0, memory_total_mib=2**70, power_limit_w=float("inf")),
               Gpu(1, memory_total_mib=-1, power_limit_w=float("nan")))
    good = snap(0.0, Gpu(0, memory_total_mib=97887, power_limit_w=600.0))
    metrics = {m.metric.name: m.metric for m in histories().values()}
    assert [metrics[n].top(bad) for n in ("memory", "power")] == [None, None]
    assert metrics["memory"].top(good) == 97887 / 1024 and metrics["power"].top(good) == 600.0
    assert metrics["utilisation"].top(bad) == 100.0


async def test_v_cycles_memory_utilisation_and_power_on_the_dashboard() -> None:
    from support import next_sample
    from test_ui import make_app

    from gpudash.ui.widgets.plotview import HistoryPlot

    app = make_app(DemoHost(clock=SteppedClock()))
    async with app.run_test(size=(160, 50)) as pilot:
        await next_sample(pilot)
        await next_sample(pilot)
        plot = app.main.query_one(HistoryPlot)
        seen = []
        for _ in range(4):
            await pilot.pause(0.05)
            seen.append((str(plot.border_title), plot.metric.name,
                         bool(BRAILLE.search(str(plot.render())))))
            await pilot.press("v")
        assert seen == [
            ("Memory history (GiB)", "memory", True),
            ("SM utilisation history (%)", "utilisation", True),
            ("Power history (W)", "power", True),
            ("Memory history (GiB)", "memory", True),
        ]
        # every host keeps every figure, whichever is drawn: the demo's GPUs draw ~118 W
        watts = [w for _t, per in app.view.histories["power"] for w in per.values()]
        assert watts and all(w is not None and 30 <= w <= 600 for w in watts)
        commands = {action for _t, _h, action, _ok in app.main.palette_commands()}
        assert "plot_metric" in commands


def test_a_changed_gpu_set_is_kept_as_it_was_sampled() -> None:
    util = GpuHistory(UTILISATION)
    util.record(snap(0.0, Gpu(0, utilization_pct=5), Gpu(1, utilization_pct=6)))
    util.record(snap(1.0, Gpu(0, utilization_pct=7)))  # GPU 1 fell off the bus
    assert list(util) == [(0.0, {0: 5, 1: 6}), (1.0, {0: 7})]
