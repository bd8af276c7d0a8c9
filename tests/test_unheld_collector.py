"""What the collector checks of memory no process holds (issue 34), read by the real
collector from the stand-in driver (real NVML binding, real processes) and decoded by
the wire: per GPU whether NVML's process list was read, the device-file scan's verdict,
MIG, display and persistence mode; which processes it sees; and the domain's account."""

from __future__ import annotations

from test_device_holders import Stream

from gpudash.domain.unheld import unheld_memory


def test_the_collector_says_what_it_checked_of_memory_no_process_holds(fakegpu_state) -> None:  # type: ignore[no-untyped-def]
    fakegpu_state.init(gpus=3)
    fakegpu_state.cli("set", "--gpu", "1", "leak_mib=5000")
    fakegpu_state.cli("set", "--gpu", "2", "leak_mib=5000")
    fakegpu_state.cli("set", "--gpu", "2", "mig=1")
    fakegpu_state.cli("set", "--gpu", "0", "noperm=1")
    holder = fakegpu_state.hold(1, 700, name="python3")
    stream = Stream(fakegpu_state.env)
    try:
        stream.until(lambda s: all("device_scan" in s["gpus"][g] for g in ("1", "2")))
        snap = stream.snapshot()
    finally:
        stream.close()
    g0, g1, g2 = snap.gpus
    assert snap.pid_view == "full"
    assert (g0.process_list, g1.process_list, g2.process_list) == ("denied", "read", "read")
    assert (g1.device_scan, g2.device_scan) == ("clear", "clear")
    assert (g1.mig_mode, g2.mig_mode, g1.display_active, g1.persistence_mode) == \
        ("off", "on", "off", "on")
    unheld = unheld_memory(snap)
    assert sorted(unheld) == [1, 2]
    assert unheld[1].mib == 5000 and unheld[1].holders[0].startswith(f"pid {holder.pid} (")
    assert unheld[1].blockers == unheld[1].holders  # held: that is the reason, and only one
    assert unheld[2].resettable is False
    assert unheld[2].blockers == ("MIG is enabled: a reset ends every MIG instance's work",)
