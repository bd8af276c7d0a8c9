"""The key footer, fitted to the terminal: what can be done now, then help and quit.

Textual's footer shows every key in order and cuts the line at the edge: at 80 columns the
reclaim, help and quit keys fell off. This one leaves out what matters least until the
rest fits: first the palette hint, then greyed-out keys, then the view keys; help and
quit always stay.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

# Actions that stay whatever the width, and those that go first when it is short.
ALWAYS = frozenset({"help", "quit"})
VIEW_ACTIONS = frozenset({"toggle_plot", "change_theme", "next_host"})
PALETTE_WIDTH = 12  # "^p palette" with its separator
# Shorter words for when the full ones do not fit (help lists the full ones).
SHORT = {"stop_disable": "Stop+dis", "terminate": "Term", "reap": "Reap",
         "hide_result": "Hide", "toggle_plot": "Plot", "change_theme": "Theme"}


def key_width(key_display: str, description: str, compact: bool) -> int:
    """Cells one key takes in the footer (FooterKey's padding and margin included)."""
    if compact:
        return len(key_display) + 1 + len(description) + 1
    return len(key_display) + 2 + len(description) + 1


def fit(
    keys: list[tuple[Binding, bool, str]], width: int, compact: bool,
    display: dict[str, str], labels: dict[str, str],
) -> tuple[list[tuple[Binding, bool, str]], bool]:
    """The keys that fit in ``width`` cells, in their order, and whether the palette hint
    still fits after them. ``labels`` (action -> description) may be shortened in place."""
    def size(items: Iterable[tuple[Binding, bool, str]]) -> int:
        return sum(key_width(display[b.key], labels[b.action], compact) for b, _e, _t in items)

    kept = list(keys)
    if size(kept) + PALETTE_WIDTH <= width:
        return kept, True
    labels.update({a: short for a, short in SHORT.items() if a in labels})
    drop_order = (
        [k for k in reversed(kept) if not k[1] and k[0].action not in ALWAYS]
        + [k for k in reversed(kept) if k[1] and k[0].action in VIEW_ACTIONS]
        + [k for k in reversed(kept) if k[1] and k[0].action not in ALWAYS | VIEW_ACTIONS]
    )
    for item in drop_order:
        if size(kept) <= width:
            break
        kept.remove(item)
    return kept, False


class DashboardFooter(Footer):
    """A footer that never cuts off help and quit."""

    def compose(self) -> ComposeResult:
        if not self._bindings_ready:
            return
        width = self.app.size.width
        self.compact = width < 130
        seen: set[str] = set()
        keys: list[tuple[Binding, bool, str]] = []
        for _node, binding, enabled, tooltip in self.screen.active_bindings.values():
            if binding.show and binding.action not in seen:
                seen.add(binding.action)
                keys.append((binding, enabled, tooltip))
        display = {b.key: self.app.get_key_display(b) for b, _e, _t in keys}
        labels = {b.action: b.description for b, _e, _t in keys}
        kept, palette_fits = fit(keys, width, self.compact, display, labels)
        for binding, enabled, tooltip in kept:
            yield FooterKey(
                binding.key, display[binding.key], labels[binding.action], binding.action,
                disabled=not enabled, tooltip=tooltip or binding.description,
            ).data_bind(compact=Footer.compact)
        if palette_fits and self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE:
            try:
                _node, binding, enabled, tooltip = self.screen.active_bindings[
                    self.app.COMMAND_PALETTE_BINDING
                ]
            except KeyError:
                return
            yield FooterKey(
                binding.key, self.app.get_key_display(binding), binding.description,
                binding.action, classes="-command-palette", disabled=not enabled,
                tooltip=binding.tooltip or binding.description,
            )

    def on_resize(self) -> None:
        if self._bindings_ready:
            self.call_after_refresh(self.recompose)
