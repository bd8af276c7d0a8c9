"""One way to write each quantity: the dashboard, the CLI and the plain snapshot agree."""

from __future__ import annotations

from gpudash import units
from gpudash.demo import MODEL_MIB, DemoHost
from gpudash.textreport import snapshot_text


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
