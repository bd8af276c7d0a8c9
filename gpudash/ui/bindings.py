"""Every key of the dashboard, once: its binding (id ``gpudash.<name>``, which a keymap
file may rebind), its footer label, its help row and its command palette entry.

The screens build their ``BINDINGS``, help rows and palette entries from this table; the
destructive actions' keys, labels and titles are the engine's specs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache
from types import MappingProxyType
from typing import Literal

from textual.binding import Binding

from gpudash.engine import SPECS_BY_NAME
from gpudash.record import record
from gpudash.ui.screens import ConfirmModal, FilterScreen, HelpScreen
from gpudash.ui.widgets.holder_view import SORTS

# "holders": the holders table's own keys (Left/Right/Space fold, over the table's own
# scrolling), shown in the host screen's help.
Where = Literal["main", "holders", "fleet", "app"]


@record
class Key:
    """One key. ``action`` empty: a key a table or Textual handles, listed in help only."""

    where: Where  # the screen that owns it, or the app (every screen)
    name: str  # the binding id without "gpudash."
    keys: str  # the default keys
    action: str = ""
    label: str = ""  # in the footer
    help: str = ""  # its help row ("": none)
    help_keys: str = ""  # the keys as help shows them by default, if not ``keys``
    palette: str = ""  # its command palette title ("": none)
    show: bool = True  # in the footer
    hosts: bool = False  # only with several hosts

    @property
    def binding_id(self) -> str:
        return f"gpudash.{self.name}"

    def binding(self) -> Binding:
        return Binding(self.keys, self.action, self.label, show=self.show, id=self.binding_id)


def _help(where: Where, keys: str, text: str) -> Key:
    return Key(where, "", keys, help=text)


KEYS: tuple[Key, ...] = (
    *(Key("main", name, spec.key, name, spec.label, help=spec.title, palette=spec.title,
          show=spec.in_footer)
      for name, spec in SPECS_BY_NAME.items()),
    Key("main", "toggle_plot", "g", "toggle_plot", "Plot all/one",
        help="Plot: all GPUs / the selected GPU",
        palette="Plot: toggle all GPUs / selected GPU"),
    Key("main", "plot_metric", "v", "plot_metric", "Plot mem/SM/W", show=False,
        help="Plot: memory / SM utilisation / power history",
        palette="Plot: next figure (memory, SM utilisation, power)"),
    Key("main", "filter", "slash", "filter", "Filter", show=False, help_keys="/",
        help="Filter the holders (pid, user, unit, command)"),
    Key("main", "sort", "greater_than_sign,f6", "sort_next", "Sort", show=False,
        help_keys="> or F6",
        help="Sort the holders: " + ", ".join(label for _key, label in SORTS),
        palette="Holders: sort by the next column"),
    Key("main", "sort_reverse", "less_than_sign", "sort_reverse", "Reverse", show=False,
        help_keys="<", help="Reverse the holders' order", palette="Holders: reverse the order"),
    Key("main", "filter_user", "U", "filter_user", "Only user", show=False,
        help="Only the selected process's user (again: everyone)",
        palette="Holders: only the selected process's user"),
    Key("main", "flat", "f5", "flat", "Flat/tree", show=False, help_keys="F5",
        help="Every process in one list, across owners (again: by owner)",
        palette="Holders: flat list / tree by owner"),
    Key("main", "tag", "m", "tag", "Tag", show=False,
        help="Tag / untag a process: k, t, S then act on every tagged one",
        palette="Tag / untag the selected process"),
    Key("main", "untag", "M", "untag", "Untag all", show=False, help="Untag every process",
        palette="Untag every process"),
    Key("main", "slower", "plus", "interval(1)", "Slower", show=False, help_keys="+",
        help="Sample every host less often (0.25 s to 30 s)",
        palette="Sample interval: longer"),
    Key("main", "faster", "minus", "interval(-1)", "Faster", show=False, help_keys="-",
        help="Sample every host more often", palette="Sample interval: shorter"),
    Key("main", "pause", "p", "pause", "Pause", show=False,
        help="Pause the display; samples are still recorded (again: live)",
        palette="Pause / resume the display"),
    Key("main", "copy", "Y", "copy", "Copy", show=False,
        help="Copy the selected command line (an owner: its name), OSC 52",
        palette="Copy the selected command line or owner"),
    Key("main", "clear_filters", "escape", "clear_filters", "Clear filters", show=False,
        help_keys="esc", help="Clear the holders' filters (text, user, GPU)"),
    Key("holders", "collapse", "left", "screen.fold('collapse')", "Collapse", show=False,
        help="Collapse the owner or process tree under the cursor"),
    Key("holders", "expand", "right", "screen.fold('expand')", "Expand", show=False,
        help="Expand it again"),
    Key("holders", "toggle_fold", "space", "screen.fold('toggle')", "Fold", show=False,
        help="Collapse / expand"),
    Key("main", "journal", "j", "journal", "Journal", show=False,
        help="The selected unit's journal, live (/ filters); a container's docker logs"),
    Key("main", "next_host", "h", "next_host", "Next host", hosts=True, help="Switch host"),
    Key("main", "fleet", "F", "fleet", "Fleet", hosts=True,
        help="Fleet: every host in one table (type to filter, > < sort, enter opens)",
        palette="Fleet: every host in one table"),
    *(Key("main", f"host{n}", str(n), f"host({n - 1})", f"Host {n}", show=False, hosts=True)
      for n in range(1, 10)),
    _help("main", "enter", "The selection in full; a GPU row: only its holders (again: all)"),
    _help("main", "home, end", "First / last row"),
    _help("main", "tab", "Move focus: holders, log, GPUs"),
    Key("main", "hide_result", "x", "hide_result", "Hide result",
        help="Hide the action result panel"),
    _help("fleet", "type", "Filter the hosts by name, link state, or a state word (below)"),
    Key("fleet", "fleet.clear", "escape", "clear_filter", "Clear the filter", show=False,
        help="Clear the filter", help_keys="esc"),
    Key("fleet", "fleet.sort", "greater_than_sign", "sort_next", "Sort by next column",
        help="Sort by the next column", help_keys=">"),
    Key("fleet", "fleet.reverse", "less_than_sign", "sort_reverse", "Reverse the order",
        help="Reverse the order", help_keys="<"),
    Key("fleet", "fleet.reap", "ctrl+o", "reap_shown", "Reap shown",
        help="Reap the orphans of every host shown, each planned and proven",
        help_keys="ctrl+o"),
    Key("fleet", "fleet.reclaim", "ctrl+r", "reclaim_shown", "Reclaim on shown",
        help="Reclaim one unit (picked) on every host shown: stop, disable, reap, proven",
        help_keys="ctrl+r"),
    _help("fleet", "enter", "Open the host (F there comes back, the filter cleared)"),
    _help("fleet", "home, end", "First / last row"),
    Key("app", "theme", "T", "change_theme", "Theme", help="Pick a theme"),
    Key("app", "help", "question_mark", "help", "Help"),
    _help("app", "ctrl+p", "Command palette"),
    Key("app", "quit", "q", "quit", "Quit", help="Quit"),
)

# Dialogs keep their few keys themselves; a keymap may rebind these ones' too.
DIALOGS = (ConfirmModal, HelpScreen, FilterScreen)


def bindings(where: Where) -> list[Binding | tuple[str, str] | tuple[str, str, str]]:
    """The ``BINDINGS`` of ``where``."""
    return [k.binding() for k in KEYS if k.where == where and k.action]


@cache
def binding_table() -> Mapping[str, tuple[str, str]]:
    """id -> (default keys, description) of every binding a keymap may rebind."""
    out = {k.binding_id: (k.keys, k.label) for k in KEYS if k.action}
    for owner in DIALOGS:
        for binding in owner.BINDINGS:
            if isinstance(binding, Binding) and binding.id:
                out[binding.id] = (binding.key, binding.description)
    return MappingProxyType(out)


def help_rows(where: Where, keymap: Mapping[str, str], hosts: int,
              available: Mapping[str, bool | None]) -> list[tuple[str, str, bool | None]]:
    """(keys, what they do, available) of the help rows of ``where``, then the app's: keys
    as the user's keymap has them; host switching only with several hosts."""
    rows: list[tuple[str, str, bool | None]] = []
    for k in _of(where):
        if not k.help or (k.hosts and hosts < 2):
            continue
        keys = keymap.get(k.binding_id, k.help_keys or k.keys) if k.action else k.keys
        if (where == "fleet" and k.where == "app" and len(keys) == 1 and keys.isalnum()
                and k.name != "quit"):
            continue  # the fleet types it into its filter (q quits there too)
        if k.action == "next_host":
            keys += f", 1-{min(9, hosts)}"
        rows.append((keys, k.help, available.get(k.action, True)))
    return rows


def _of(where: Where) -> Iterable[Key]:
    mine = [k for k in KEYS if k.where == where]
    if where == "main":  # the holders table is on the host screen
        mine += [k for k in KEYS if k.where == "holders"]
    return mine + [k for k in KEYS if k.where == "app"]


def keys_to_actions(keymap: Mapping[str, str]) -> dict[str, str]:
    """Which destructive action a key means, after the user's keymap (a greyed-out
    action's key is explained, not ignored)."""
    out = {spec.key: name for name, spec in SPECS_BY_NAME.items()} | {"shift+d": "stop_disable"}
    for name in SPECS_BY_NAME:
        keys = keymap.get(f"gpudash.{name}")
        if keys:
            out = {k: a for k, a in out.items() if a != name}
            out |= {k.strip(): name for k in keys.split(",")}
    return out
