"""Why a Slurm node is drained, in the operator's words: the words only; the plan (the node,
the reason exactly as Slurm is given it, the jobs left to finish) and its confirm dialog
come next, as for every action."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from gpudash.domain.model import HostSnapshot
from gpudash.domain.owners.slurm_node import WORDS_MAX, node_of, running_jobs
from gpudash.ui.keyhold import release
from gpudash.ui.text import literal


def drain_heading(host: str, snapshot: HostSnapshot | None) -> str:
    """What is drained: the node, and how many jobs run there (the plan names them)."""
    node = node_of(snapshot)[0] if snapshot is not None else None
    jobs = len(running_jobs(snapshot)) if snapshot is not None else 0
    left = f"; {jobs} job(s) running there finish" if jobs else "; no job runs there"
    return f"Slurm node {node or host} on {host}{left}, no new job starts"


class ReasonPrompt(ModalScreen[str | None]):
    """Type the reason; Enter: its plan (empty: gpudash's own words alone); Esc cancels."""

    DEFAULT_CSS = """
    ReasonPrompt { align: center middle; }
    ReasonPrompt > Vertical {
        width: 90%; max-width: 90; height: auto; max-height: 90%;
        border: thick $warning; background: $surface; padding: 0 1;
    }
    ReasonPrompt Input { margin: 1 0; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="gpudash.reason.cancel")]

    def __init__(self, heading: str, title: str = "Drain the Slurm node") -> None:
        super().__init__()
        self.heading = heading  # names the node: host text, shown literally
        self.title_text = title

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = self.title_text
            yield Static(literal(self.heading, style="bold"))
            yield Input(placeholder="why: GPU 3 ECC errors, a stuck process…",
                        max_length=WORDS_MAX, id="reason")
            yield Static("Slurm is given “gpudash: YOU drained: these words” (sinfo -R shows "
                         "it) · Enter: its plan, to confirm · Esc: cancel", classes="hint")

    def on_mount(self) -> None:
        self.query_one(Input).focus()
        release(self.app)  # the keys typed after the drain key go here

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)
