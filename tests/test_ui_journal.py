"""The journal pane (`j`) as journalctl -u shows a unit's log: time, who logged it, systemd's
own lines of the unit; a filter Esc clears before it closes; whole messages only."""

from __future__ import annotations

import re

import pytest
from test_ui import make_app, select, wait_for
from textual.widgets import Input, RichLog

from gpudash.demo.host import MINIMAX, DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.ui.models import JournalScreen

STAMP = re.compile(r"[A-Z][a-z]{2} \d{2} \d{2}:\d{2}:\d{2} ")  # journalctl's short format


def shown(journal: JournalScreen) -> list[str]:
    return [strip.text for strip in journal.query_one(RichLog).lines]


@pytest.mark.parametrize("size", [(80, 24), (120, 35)])
async def test_the_journal_shows_time_and_systemds_own_lines_of_the_incident(
    size: tuple[int, int],
) -> None:
    demo = DemoHost(clock=SteppedClock())
    demo.leave_orphans()  # kill -9, the respawn, then stop: the seed's first steps
    app = make_app(demo)
    async with app.run_test(size=size) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("j")
        await wait_for(pilot, lambda: isinstance(app.screen, JournalScreen))
        journal = app.screen
        await wait_for(pilot, lambda: any("remains running" in line.message
                                          for line in journal.lines))
        said = [(line.origin, line.message) for line in journal.lines]
        # what systemd said of the unit: the trap, in its own words
        assert ("systemd[1]", f"{MINIMAX}: Main process exited, code=killed, "
                "status=9/KILL") in said
        assert ("systemd[1]", f"{MINIMAX}: Scheduled restart job, restart counter is "
                "at 1.") in said
        assert any(o == "systemd[1]" and "Found left-over process" in m for o, m in said)
        assert sum("remains running after unit stopped" in m for _o, m in said) == 16
        await pilot.pause()
        text = "\n".join(shown(journal))
        assert "systemd[1]: Stopped vllm-minimax-m25.service" in text.replace("\n", "")
        assert STAMP.match(shown(journal)[0]), shown(journal)[0]  # each line: its time first


async def test_esc_clears_the_filter_first_and_closes_next() -> None:
    demo = DemoHost(clock=SteppedClock())
    demo.leave_orphans()
    app = make_app(demo)
    async with app.run_test(size=(120, 35)) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("j")
        await wait_for(pilot, lambda: isinstance(app.screen, JournalScreen))
        journal = app.screen
        await wait_for(pilot, lambda: len(journal.lines) > 20)
        await pilot.press("slash", *"restart counter", "enter")
        await wait_for(pilot, lambda: journal.needle == "restart counter")
        await pilot.pause()
        text = "".join(shown(journal))  # (rows wrap)
        assert text.count("restart counter is at") == 1 and "Stopped" not in text, text
        await pilot.press("escape")  # the filter goes, the journal stays
        await pilot.pause()
        assert isinstance(app.screen, JournalScreen) and journal.needle == ""
        assert any("Stopped" in line for line in shown(journal))
        await pilot.press("slash")  # the box open, nothing typed: Esc closes the box only
        assert journal.query_one("#needle", Input).has_class("-shown")
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, JournalScreen)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, JournalScreen))


async def test_a_long_journal_drops_whole_messages_never_the_start_of_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the log's own line limit counted wrapped rows: the pane began with `1}`, the end of
    # the message "... Failed core proc(s): {'EngineCore_0': 1}"
    monkeypatch.setattr(JournalScreen, "MAX_LINES", 4)
    monkeypatch.setattr(JournalScreen, "TRIM", 2)
    demo = DemoHost(clock=SteppedClock())
    demo.leave_orphans()
    app = make_app(demo)
    async with app.run_test(size=(80, 24)) as pilot:
        await select(pilot, app, f"u:{MINIMAX}")
        await pilot.press("j")
        await wait_for(pilot, lambda: isinstance(app.screen, JournalScreen))
        journal = app.screen
        await wait_for(pilot, lambda: any("Stopped" in line.message for line in journal.lines))
        await pilot.pause()
        rows = shown(journal)
        assert len(journal.lines) <= 6
        assert rows and STAMP.match(rows[0]), rows  # a message's first row: its time
