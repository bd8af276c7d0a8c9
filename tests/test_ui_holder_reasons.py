"""The holders table says why: an orphan's cause, a process the collector cannot read and
the remedy, and GPU memory no listed process accounts for (issue 17, items 2 and 4).

Seen before: the triage knew why a VLLM::EngineCore was an orphan and that a process was
hidden by hidepid, and the exporter had the unattributed memory, but the table showed a
bare command line, no flag for the unreadable process and no row for the missing memory.
"""

from __future__ import annotations

from dataclasses import replace

from test_orphans import SESSION, WORKER_MIB, server, snap

from gpudash.domain.model import Process
from gpudash.domain.triage import triage
from gpudash.domain.units import gib
from gpudash.ui.palette import Palette
from gpudash.ui.widgets.holder_filter import filter_rows
from gpudash.ui.widgets.holders import (
    UNATTRIBUTED_KEY,
    holder_rows,
    selection_of,
)

PAL = Palette(ok="green", warn="yellow", critical="red", empty="grey50", orphan="magenta",
              notice="cyan", success="green", error="red", warning="yellow", muted="grey50")


def cells(rows, key: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    from gpudash.ui.widgets.holders import COLUMNS
    row = next(r for r in rows if r.key == key)
    return {col.key: c.plain for col, c in zip(COLUMNS, row.cells, strict=True)}


def test_an_orphans_row_says_what_it_lost_before_its_command() -> None:
    t = triage(snap(server(3700, 1000, SESSION, api_alive=False)))
    rows = holder_rows(t, PAL)
    engine = cells(rows, "p:3703")
    # briefly in the row (its owner's row is above it), in full where there is room
    assert engine["cmd"] == "orphan: lost its API server · VLLM::EngineCore", engine
    assert t.orphan_cause(3703) == "lost its API server (pid 3700 gone, re-parented to PID 1)"
    worker = cells(rows, "p:3709")
    assert worker["cmd"].startswith("orphan: under 3703: lost its API server · "), worker
    assert t.orphan_cause(3709).startswith("is under VLLM::EngineCore 3703, which lost")
    assert "ORPHAN" in worker["flags"]


def test_an_unreadable_process_is_flagged_with_its_remedy() -> None:
    hidden = Process(pid=4242, gpu_memory_mib={0: 2048}, unreadable="hidden")
    s = snap([*server(3900, 5000), hidden])
    rows = holder_rows(triage(s), PAL)
    row = cells(rows, "p:4242")
    assert "UNREADABLE" in row["flags"], row
    assert row["cmd"].startswith("unreadable: hidden by /proc's hidepid"), row
    assert "--sudo" in row["cmd"]


def test_memory_no_process_accounts_for_has_a_row_of_its_own() -> None:
    s = snap(server(3900, 5000))  # the driver counts two workers' worth, one is listed
    rows = holder_rows(triage(s), PAL)
    assert rows[-1].key == UNATTRIBUTED_KEY
    row = cells(rows, UNATTRIBUTED_KEY)
    assert row["mem"] == f"GPU0 {gib(WORKER_MIB)}", row
    # it survives a filter that names it, is dropped by one that does not, and is never
    # taken for a member of the owner above it
    assert [r.key for r in filter_rows(rows, "unattrib")] == [UNATTRIBUTED_KEY]
    assert UNATTRIBUTED_KEY not in [r.key for r in filter_rows(rows, "vllm")]
    assert selection_of(triage(s), UNATTRIBUTED_KEY) == (None, None, None)


def test_no_unattributed_row_when_the_processes_account_for_the_memory() -> None:
    s = snap(server(3900, 5000))
    s = replace(s, gpus=(replace(s.gpus[0], memory_used_mib=WORKER_MIB + 100),))  # 100 MiB:
    # the driver's own bookkeeping
    assert UNATTRIBUTED_KEY not in [r.key for r in holder_rows(triage(s), PAL)]


def test_the_unit_panel_says_why_the_selected_process_is_an_orphan_or_unreadable() -> None:
    from gpudash.ui.widgets.unit_panel import unit_text

    t = triage(snap(server(3700, 1000, SESSION, api_alive=False)))
    group = t.group_of(3709)
    worker = t.snapshot.process(3709)
    assert group is not None and worker is not None
    panel = unit_text(group, worker, PAL, t.orphan_why(3709)).plain
    assert "ORPHAN VLLM::Worker 3709 is under VLLM::EngineCore 3703, which lost its API " \
           "server" in panel, panel
    hidden = Process(pid=4242, gpu_memory_mib={0: 2048}, unreadable="denied")
    t = triage(snap([*server(3900, 5000), hidden]))
    group = t.group_of(4242)
    assert group is not None
    panel = unit_text(group, hidden, PAL).plain
    assert "UNREADABLE not readable by this login: run with --sudo" in panel, panel
