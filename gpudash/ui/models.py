"""Choosing the model to start (the swap's target), and a unit's journal, live.

Both show host text (unit names, descriptions, log lines) literally.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Checkbox, Input, OptionList, RichLog, Static
from textual.widgets.option_list import Option

from gpudash.domain.units import gib
from gpudash.protocol.source import LogLine, SourceError
from gpudash.session.lifecycle import Candidate, Picked
from gpudash.ui.keyhold import hold, release
from gpudash.ui.text import clean, literal


def choice_text(c: Candidate) -> Text:
    """One model unit as the picker shows it (host text, literally)."""
    out = literal(f"{c.name:<34}", style="bold")
    out.append_text(literal(f" {c.state:<10} {c.enabled:<9}"))
    out.append_text(literal(f" Restart={c.restart or '?':<11}"))
    out.append(f" port {c.port or '?':<6}")
    out.append(f" {gib(c.footprint_mib) if c.footprint_mib else 'footprint ?':>11}")
    if c.ready_s is not None:
        out.append(f" ready in {c.ready_s:.0f} s")
    if c.fit is not None:  # once the old model is reclaimed, as the swap will check it
        out.append("  ✓ fits" if c.fit == "fits" else f"  {c.fit}",
                   style="green" if c.fit == "fits" else "yellow")
    out.append_text(literal(f"  {c.description}", style="dim"))
    return out


class ModelPicker(ModalScreen[Picked | None]):
    """Type to filter; Enter picks; Ctrl+T (or the checkbox) says whether the started unit
    is enabled at boot (by default as the unit it replaces is); Esc cancels."""

    DEFAULT_CSS = """
    ModelPicker { align: center middle; }
    ModelPicker > Vertical {
        width: 90%; max-width: 130; height: auto; max-height: 90%;
        border: thick $primary; background: $surface; padding: 0 1;
    }
    ModelPicker OptionList { height: auto; max-height: 20; }
    ModelPicker Checkbox { border: none; padding: 0; height: 1; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="gpudash.picker.cancel"),
                Binding("ctrl+t", "toggle_enable", "Enable at boot",
                        id="gpudash.picker.enable")]

    def __init__(self, title: str, choices: Sequence[Candidate], enable: bool = False) -> None:
        super().__init__()
        self.heading = title
        self.choices = list(choices)
        self.enable = enable

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "Swap to"
            yield Static(literal(self.heading, style="bold"))
            yield Input(placeholder="type to filter…", id="filter")
            yield OptionList(*self._options(""), id="models")
            yield Checkbox("enable it at boot (Ctrl+T): "
                           + ("as the unit it replaces is" if self.enable else
                              "the unit it replaces is not enabled"),
                           value=self.enable, id="enable")

    def on_mount(self) -> None:
        self.query_one("#filter", Input).focus()
        release(self.app)  # what was typed while the host was asked filters the models

    def _options(self, needle: str) -> list[Option]:
        wanted = needle.strip().lower()
        return [Option(choice_text(c), id=c.name) for c in self.choices
                if not wanted or wanted in f"{c.name} {c.description}".lower()]

    def on_input_changed(self, event: Input.Changed) -> None:
        options = self.query_one(OptionList)
        options.clear_options()
        options.add_options(self._options(event.value))
        if options.option_count:
            options.highlighted = 0

    def on_input_submitted(self, event: Input.Submitted) -> None:
        options = self.query_one(OptionList)
        if options.highlighted is not None and options.option_count:
            self._pick(options.get_option_at_index(options.highlighted).id)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self._pick(event.option.id)

    def _pick(self, name: str | None) -> None:
        if name is not None:
            self.dismiss(Picked(name, self.query_one("#enable", Checkbox).value))

    def action_toggle_enable(self) -> None:
        self.query_one("#enable", Checkbox).toggle()

    def action_cancel(self) -> None:
        self.dismiss(None)


JournalOpener = Callable[[], AsyncIterator[LogLine]]


class JournalScreen(ModalScreen[None]):
    """A unit's journal, followed live, as ``journalctl -u`` shows it: the time and who
    logged each line (systemd's own lines of the unit among the server's); ``/`` filters
    what is shown, Esc clears the filter first and closes next."""

    DEFAULT_CSS = """
    JournalScreen { align: center middle; }
    JournalScreen > Vertical {
        width: 95%; height: 90%; border: thick $primary; background: $surface;
    }
    JournalScreen RichLog { height: 1fr; }
    JournalScreen Input { display: none; }
    JournalScreen Input.-shown { display: block; }
    """
    BINDINGS = [
        Binding("escape", "back", "Clear filter / close", id="gpudash.journal.close"),
        Binding("q", "close", "Close", show=False, id="gpudash.journal.quit"),
        Binding("slash", "search", "Filter", id="gpudash.journal.filter"),
    ]
    MAX_LINES = 5000
    TRIM = 500  # lines dropped at once when the journal outgrows MAX_LINES (then redrawn)

    def __init__(self, unit: str, opener: JournalOpener, what: str = "journal") -> None:
        super().__init__()
        self.unit = unit
        self.what = what  # "journal", or a container's "docker logs"
        self.opener = opener
        self.lines: list[LogLine] = []
        self.needle = ""

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = self._title()
            # No max_lines: the log's own trimming cut wrapped messages (a pane that began
            # with `1}`); whole messages are dropped here instead.
            yield RichLog(id="log", wrap=True, markup=False)
            yield Input(placeholder="show lines containing…", id="needle")

    def _title(self) -> str:
        shown = f"; filter {self.needle!r}" if self.needle else ""
        return f"{self.what}: {clean(self.unit)} (live{shown}; / filters, Esc closes)"

    def on_mount(self) -> None:
        self.follow()

    @work(exclusive=True, group="journal", exit_on_error=False)
    async def follow(self) -> None:
        log = self.query_one(RichLog)
        try:
            async for line in self.opener():
                self.lines.append(line)
                if len(self.lines) > self.MAX_LINES + self.TRIM:
                    del self.lines[: -self.MAX_LINES]
                    self._redraw()
                elif self._wanted(line):
                    log.write(journal_text(line))  # wrapped, never interpreted
        except (SourceError, NotImplementedError, ValueError) as exc:
            log.write(literal(f"{self.what} not available: {exc}", style="bold"))

    def _wanted(self, line: LogLine) -> bool:
        wanted = self.needle.lower()
        return not wanted or wanted in f"{line.origin or ''} {line.message}".lower()

    def _redraw(self) -> None:
        log = self.query_one(RichLog)
        log.clear()
        for line in self.lines[-self.MAX_LINES:]:
            if self._wanted(line):
                log.write(journal_text(line))

    def action_search(self) -> None:
        hold(self.app)  # "/quit" typed fast filters by "quit", never closes on its q
        box = self.query_one("#needle", Input)
        box.add_class("-shown")
        box.value = self.needle
        box.focus()
        release(self.app)  # behind the focus, in the App's turn

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._filter(event.value.strip())
        event.input.remove_class("-shown")
        self.query_one(RichLog).focus()

    def _filter(self, needle: str) -> None:
        self.needle = needle
        self.query_one(Vertical).border_title = self._title()
        self._redraw()

    def action_back(self) -> None:
        """Esc: the filter box open or a filter in force is cleared first; then close."""
        box = self.query_one("#needle", Input)
        if box.has_class("-shown") or self.needle:
            box.remove_class("-shown")
            box.value = ""
            self.query_one(RichLog).focus()
            if self.needle:
                self._filter("")
            return
        self.dismiss(None)

    def action_close(self) -> None:
        self.dismiss(None)


SYSTEMD_ORIGIN = "systemd["


def journal_text(line: LogLine) -> Text:
    """One journal line as journalctl's short format has it: time, who, message (host
    text, shown literally); systemd's own lines stand out: they say what became of the unit."""
    out = Text()
    if line.time is not None:
        out.append(time.strftime("%b %d %H:%M:%S ", time.localtime(line.time)), style="dim")
    systemd = (line.origin or "").startswith(SYSTEMD_ORIGIN)
    if line.origin:
        out.append_text(literal(f"{line.origin}: ", style="bold" if systemd else "dim"))
    out.append_text(literal(line.message, style="bold" if systemd else ""))
    return out
