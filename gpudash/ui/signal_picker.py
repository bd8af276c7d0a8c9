"""Which signal to send one process (htop's and nvitop's picker): the choice only; the plan
that pins the process and the confirm dialog come next, as for every action."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from gpudash.domain.model import HostSnapshot
from gpudash.domain.triage import label
from gpudash.engine import Selection
from gpudash.engine.signals import PICKABLE, Pickable
from gpudash.ui.keyhold import release
from gpudash.ui.text import literal


def picker_heading(host: str, snapshot: HostSnapshot | None, sel: Selection) -> str | None:
    """What the picker's signal goes to: the tagged processes, or the selected one (None:
    no process)."""
    if sel.pids:  # each pinned, in one plan
        return f"{len(sel.pids)} tagged processes on {host}: pid " + ", ".join(
            map(str, sel.pids))
    p = snapshot.process(sel.pid) if snapshot and sel.pid is not None else None
    if p is None:
        return None
    return f"pid {p.pid} ({p.user or '?'}, {label(p) or p.name}) on {host}: {p.cmdline[:200]}"


def choice_text(p: Pickable) -> Text:
    out = Text(f"{p.short:<5}", style="bold")
    out.append(f" {p.sig:>2}  ")
    out.append(p.what, style="dim")
    return out


def _first(prefix: str) -> int | None:
    """The index of the first signal whose name starts with ``prefix``."""
    return next((i for i, p in enumerate(PICKABLE) if p.short.startswith(prefix)), None)


class SignalPicker(ModalScreen[int | None]):
    """Up/Down (or the signal's first letters typed) and Enter pick; Esc cancels."""

    DEFAULT_CSS = """
    SignalPicker { align: center middle; }
    SignalPicker > Vertical {
        width: 90%; max-width: 90; height: auto; max-height: 90%;
        border: thick $warning; background: $surface; padding: 0 1;
    }
    SignalPicker OptionList { height: auto; max-height: 11; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="gpudash.signals.cancel")]

    def __init__(self, heading: str) -> None:
        super().__init__()
        self.heading = heading  # names the process: host text, shown literally
        self._typed = ""

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "Send a signal"
            yield Static(literal(self.heading, style="bold"))
            yield OptionList(*(Option(choice_text(p), id=str(p.sig)) for p in PICKABLE),
                             id="signals")
            yield Static("letters jump · Enter: its plan, to confirm · Esc: cancel",
                         classes="hint")

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        options.highlighted = 0
        options.focus()
        release(self.app)  # letters typed after S jump here

    def on_key(self, event) -> None:  # type: ignore[no-untyped-def]
        """Letters jump to the signal whose name starts so (``h`` HUP, ``us`` USR1)."""
        char = event.character or ""
        if not (len(char) == 1 and char.isalnum()):
            return
        typed = (self._typed + char).upper()
        match = _first(typed)
        if match is None:  # no name goes on so: the letter starts a new one
            typed = char.upper()
            match = _first(typed)
        if match is not None:
            self._typed = typed
            self.query_one(OptionList).highlighted = match
            event.stop()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(int(event.option.id or 0) or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
