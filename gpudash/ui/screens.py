"""Modal screens: the confirmation of a destructive plan, the help screen, the filter."""

from __future__ import annotations

from collections.abc import Iterable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from gpudash.ui.text import literal


def plan_text(lines: Iterable[str]) -> Text:
    """The plan's lines, literally, with commands, notes and the people left alone set apart."""
    out = Text()
    for i, line in enumerate(lines):
        if i:
            out.append("\n")
        if i == 0:
            style = "bold"
        elif line.startswith("  ! "):
            style = "bold yellow"
        elif line.startswith("  Left alone"):
            style = "italic"
        elif line.startswith("  Expected back"):
            style = "bold"
        else:
            style = ""
        out.append_text(literal(line, style=style))
    return out


class ConfirmModal(ModalScreen[bool]):
    """Shows a plan exactly and asks; Cancel has the focus, so Enter never kills by accident."""

    DEFAULT_CSS = """
    ConfirmModal { align: center middle; }
    ConfirmModal > Vertical {
        width: 90%; max-width: 140; height: auto; max-height: 90%;
        border: thick $error; background: $surface; padding: 0 1;
    }
    ConfirmModal #plan { height: auto; max-height: 60vh; }
    ConfirmModal #question { margin-top: 1; text-style: bold; }
    ConfirmModal Horizontal { height: auto; align-horizontal: right; margin-top: 1; }
    ConfirmModal Button { margin-left: 2; }
    """
    BINDINGS = [
        Binding("y", "confirm", "Confirm", id="gpudash.confirm.yes"),
        Binding("n", "cancel", "Cancel", id="gpudash.confirm.no"),
        Binding("escape", "cancel", "Cancel", id="gpudash.confirm.escape"),
    ]

    def __init__(self, title: str, lines: list[str]) -> None:
        super().__init__()
        self.title_text = title
        self.lines = lines

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog") as dialog:
            dialog.border_title = "Confirm"
            with VerticalScroll(id="plan"):
                yield Static(plan_text(self.lines), id="plan-text")
            yield Static("Run this plan?  y = confirm   n / Esc = cancel", id="question")
            with Horizontal():
                yield Button("Cancel", id="cancel", variant="primary")
                yield Button("Confirm", id="confirm", variant="error")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm")

    def action_confirm(self) -> None:
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)


class HelpScreen(ModalScreen[None]):
    """Every key of the dashboard, and whether it applies to the current selection."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 90; height: auto; max-height: 90%;
        border: thick $primary; background: $surface; padding: 0 1;
    }
    """
    BINDINGS = [
        Binding("escape,q,question_mark", "dismiss_help", "Close", id="gpudash.help.close"),
    ]

    def __init__(self, rows: list[tuple[str, str, bool | None]], read_only: bool) -> None:
        super().__init__()
        self.rows = rows
        self.read_only = read_only

    def compose(self) -> ComposeResult:
        text = Text()
        text.append("Keys\n", style="bold")
        for key, description, available in self.rows:
            text.append(f"  {key:<9}", style="bold")
            text.append(f"{description:<44}")
            if available is False:
                text.append("read-only" if self.read_only else "not available", style="dim")
            elif available is None:
                text.append("not for this selection", style="dim")
            text.append("\n")
        text.append(
            "\nDestructive actions show their exact plan first; Cancel is focused.\n"
            "Progress is followed per GPU until the memory is back, or the report says\n"
            "what still holds it. Every action is logged and appended to the audit file.\n"
            "Ctrl+P opens the command palette (actions, themes, hosts).",
            style="dim",
        )
        with VerticalScroll() as scroll:
            scroll.border_title = "Help"
            yield Static(text)

    def action_dismiss_help(self) -> None:
        self.dismiss(None)


class FilterScreen(ModalScreen[str | None]):
    """Ask for the text the holders view is filtered by (empty: show everything)."""

    DEFAULT_CSS = """
    FilterScreen { align: center bottom; }
    FilterScreen > Input { width: 80; margin-bottom: 4; border: thick $primary; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="gpudash.filter.cancel")]

    def __init__(self, current: str) -> None:
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        yield Input(self.current, placeholder="filter holders: pid, user, unit, command…",
                    id="filter")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)
