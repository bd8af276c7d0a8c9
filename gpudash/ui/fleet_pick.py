"""Which unit ctrl+r reclaims on the hosts the fleet table shows: the services holding GPU
memory there, the most widespread first (unit names are host text: shown literally)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from gpudash.domain.units import gib
from gpudash.ui.keyhold import release
from gpudash.ui.text import literal


def unit_choice(unit: str, hosts: int, of: int, mib: int) -> Text:
    out = literal(f"{unit:<40}", style="bold")
    out.append(f"  holds {gib(mib):>11} on {hosts} of {of} host(s)")
    return out


class UnitPicker(ModalScreen[str | None]):
    """Enter picks the highlighted unit; Esc cancels."""

    DEFAULT_CSS = """
    UnitPicker { align: center middle; }
    UnitPicker > Vertical {
        width: 90%; max-width: 100; height: auto; max-height: 90%;
        border: thick $primary; background: $surface; padding: 0 1;
    }
    UnitPicker OptionList { height: auto; max-height: 20; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="gpudash.unitpicker.cancel")]

    def __init__(self, units: Sequence[tuple[str, int, int]], of: int) -> None:
        super().__init__()
        self.units = list(units)
        self.of = of

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "Reclaim on the hosts shown"
            yield Static("Stop and disable this unit and reap what it leaves, on every host "
                         "shown that has it; each host planned, confirmed once, proven. "
                         "Enter picks, Esc cancels.")
            yield OptionList(*(Option(unit_choice(u, n, self.of, m), id=str(i))
                               for i, (u, n, m) in enumerate(self.units)), id="units")

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        options.focus()
        options.highlighted = 0
        release(self.app)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.units[int(event.option.id or 0)][0])

    def action_cancel(self) -> None:
        self.dismiss(None)
