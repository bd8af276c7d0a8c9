"""Quitting while an action runs: never silently drop a KILL escalation or its record."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from gpudash.ui.text import literal

KEEP, AFTER, NOW = "keep", "after", "now"


class QuitWhileActing(ModalScreen[str]):
    """Keep running (focused), quit when the action has ended, or quit now (interrupt)."""

    DEFAULT_CSS = """
    QuitWhileActing { align: center middle; }
    QuitWhileActing > Vertical {
        width: 90%; max-width: 100; height: auto; max-height: 90%;
        border: thick $warning; background: $surface; padding: 0 1;
    }
    QuitWhileActing Horizontal { height: auto; align-horizontal: right; margin-top: 1; }
    QuitWhileActing Button { margin-left: 1; }
    """
    BINDINGS = [
        Binding("escape,n", "choose('keep')", "Keep running", id="gpudash.quit.keep"),
        Binding("w", "choose('after')", "Quit when done", id="gpudash.quit.after"),
        Binding("y", "choose('now')", "Quit now", id="gpudash.quit.now"),
    ]

    def __init__(self, title: str, sent: list[str]) -> None:
        super().__init__()
        self.action_title = title
        self.sent = sent

    def compose(self) -> ComposeResult:
        text = Text()
        text.append_text(literal(f"An action is running: {self.action_title}", style="bold"))
        text.append("\nSent so far: ")
        text.append_text(literal("; ".join(self.sent) if self.sent else "nothing"))
        text.append(
            "\nQuitting now stops it where it is: no KILL escalation, no verification "
            "(the audit file records what was sent)."
        )
        with Vertical() as box:
            box.border_title = "Quit?"
            yield Static(text)
            with Horizontal():
                yield Button("Keep running (n)", id=KEEP, variant="primary")
                yield Button("Quit when done (w)", id=AFTER)
                yield Button("Quit now (y)", id=NOW, variant="error")

    def on_mount(self) -> None:
        self.query_one(f"#{KEEP}", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id or KEEP)

    def action_choose(self, choice: str) -> None:
        self.dismiss(choice)
