"""One way to write each quantity: the dashboard, the CLI and the plain snapshot agree."""

from __future__ import annotations

from gpudash.demo.host import MODEL_MIB, DemoHost
from gpudash.domain import units
from gpudash.render.textreport import snapshot_text


def test_each_quantity_has_one_spelling() -> None:
    assert units.gib(96801) == "94.5 GiB"
    assert units.gib(0) == "0.0 GiB"
    assert units.gib_number(772360) == "754.3"
    assert units.gib_of(96801, 97887) == "94.5/95.6 GiB"
    assert units.celsius(45) == "45 °C"
    assert units.watts(118.6) == "119 W"
    assert units.watts(118.6, 600.0) == "119/600 W"
    assert units.percent(3) == "3 %"
    assert units.seconds(9.5) == "9.5 s" and units.seconds(10.0) == "10 s"


def test_unknown_values_are_na_never_zero() -> None:
    for value in (units.gib(None), units.gib_number(None), units.celsius(None),
                  units.watts(None, 600.0), units.percent(None), units.seconds(None)):
        assert value == units.NA
    assert units.gib_of(None, 97887) == "N/A/95.6 GiB"


def test_plain_snapshot_writes_memory_temperature_and_power_like_the_dashboard() -> None:
    text = snapshot_text(DemoHost(seed=7).snapshot())
    gpu0 = next(line for line in text.splitlines() if line.strip().startswith("GPU0 "))
    assert units.gib_of(MODEL_MIB, 97887) in gpu0  # 94.5/95.6 GiB, not 96801 / 97887 MiB
    assert " °C" in gpu0 and "/600 W" in gpu0 and " %" in gpu0
    assert "MiB" not in text
    assert "754.3 GiB" in text  # the unit's total, not 772360 MiB
    assert "GPU1 94.5 GiB" in text  # per process, as the holders table writes it


async def test_dashboard_cells_use_the_same_spelling() -> None:
    from gpudash.ui.app import GpudashApp
    from gpudash.ui.widgets.gpus import GpuTable
    from gpudash.ui.widgets.holders import HoldersTable

    demo = DemoHost(seed=7)
    app = GpudashApp([demo], interval=3600.0, read_only=False, theme=None, exec_options=None)
    async with app.run_test(size=(160, 50)) as pilot:
        for _ in range(200):
            if app.view.snapshot is not None:
                break
            await pilot.pause(0.02)
        await pilot.pause(0.1)
        snap = app.view.snapshot
        assert snap is not None
        g0 = snap.gpus[0]
        row = [str(c) for c in app.query_one(GpuTable).get_row("0")]
        assert units.gib_of(g0.memory_used_mib, g0.memory_total_mib) in row[2]
        assert units.percent(g0.utilization_pct) in row
        assert units.celsius(g0.temperature_c) in row
        assert units.watts(g0.power_w, g0.power_limit_w) in row
        holders = app.query_one(HoldersTable)
        group = [str(c) for c in holders.get_row("u:vllm-minimax-m25.service")]
        assert group[1] == "754.3 GiB ×8"
        tp1 = next(p for p in snap.processes if p.cmdline == "VLLM::Worker_TP1")
        assert str(holders.get_row(f"p:{tp1.pid}")[1]) == "GPU1 94.5 GiB"
