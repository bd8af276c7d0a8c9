"""Choosing the model to start (the swap's target), and a unit's journal, live.

Both show host text (unit names, descriptions, log lines) literally.
"""

from __future__ import annotations

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
    """A unit's journal, followed live; ``/`` filters what is shown."""

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
        Binding("escape,q", "close", "Close", id="gpudash.journal.close"),
        Binding("slash", "search", "Filter", id="gpudash.journal.filter"),
    ]
    MAX_LINES = 5000

    def __init__(self, unit: str, opener: JournalOpener) -> None:
        super().__init__()
        self.unit = unit
        self.opener = opener
        self.lines: list[str] = []
        self.needle = ""

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = f"journal: {self.unit} (live; / filters, Esc closes)"
            yield RichLog(id="log", wrap=True, max_lines=self.MAX_LINES, markup=False)
            yield Input(placeholder="show lines containing…", id="needle")

    def on_mount(self) -> None:
        self.follow()

    @work(exclusive=True, group="journal", exit_on_error=False)
    async def follow(self) -> None:
        log = self.query_one(RichLog)
        try:
            async for line in self.opener():
                message = line.message
                self.lines.append(message)
                del self.lines[: -self.MAX_LINES]
                if self.needle.lower() in message.lower():
                    log.write(Text(clean(message)))  # wrapped, never interpreted
        except (SourceError, NotImplementedError) as exc:
            log.write(literal(f"journal not available: {exc}", style="bold"))

    def action_search(self) -> None:
        box = self.query_one("#needle", Input)
        box.add_class("-shown")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.needle = event.value.strip()
        log = self.query_one(RichLog)
        log.clear()
        for message in self.lines:
            if self.needle.lower() in message.lower():
                log.write(Text(clean(message)))
        event.input.remove_class("-shown")
        log.focus()

    def action_close(self) -> None:
        self.dismiss(None)
