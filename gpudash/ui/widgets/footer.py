"""The key footer, fitted to the terminal: what can be done now, then help and quit.

Textual's footer shows every key in order and cuts the line at the edge: at 80 columns the
reclaim, help and quit keys fell off. This one leaves out what matters least until the
rest fits: first the palette hint, then greyed-out keys, then the view keys; help and
quit always stay.

It is one widget that draws the line as Textual's footer does (its ``FooterKey`` styles:
the same cells, colours, dim and hover), where Textual's makes a widget per key: 15 keys
at 160 columns were 0.8 MB of the dashboard's memory, two fifths of what it took over
50 MB (issue 30). A click runs the key under the pointer (greyed out: the bell); hovering
shows its tooltip.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.reactive import reactive
from textual.screen import Screen
from textual.widget import Widget

from gpudash.record import record

# Actions that stay whatever the width, and those that go first when it is short.
ALWAYS = frozenset({"help", "quit"})
VIEW_ACTIONS = frozenset({"toggle_plot", "change_theme", "next_host"})
PALETTE_WIDTH = 12  # "^p palette" with its separator
# Shorter words for when the full ones do not fit (help lists the full ones).
SHORT = {"stop_disable": "Stop+dis", "terminate": "Term", "reap": "Reap",
         "hide_result": "Hide", "toggle_plot": "Plot", "change_theme": "Theme"}


def key_width(key_display: str, description: str, compact: bool) -> int:
    """Cells one key takes in the footer (its padding and margin included)."""
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


@record
class KeySpec:
    """One key as the footer draws it."""

    key: str
    display: str
    description: str
    action: str
    disabled: bool
    tooltip: str
    palette: bool = False  # the command palette's hint, on the right


class DashboardFooter(Widget, can_focus=False):
    """The footer line: the keys that fit, in order, the palette hint on the right."""

    ALLOW_SELECT = False
    # Textual's Footer and FooterKey styles, as one widget's parts
    COMPONENT_CLASSES = {"footer-key", "footer-key--key", "footer-key--description",
                         "footer-key--hover", "footer-key--palette-border"}
    DEFAULT_CSS = """
    DashboardFooter {
        dock: bottom;
        height: 1;
        color: $footer-foreground;
        background: $footer-background;
        text-wrap: nowrap;
        .footer-key { background: $footer-item-background; }
        .footer-key--key {
            color: $footer-key-foreground;
            background: $footer-key-background;
            text-style: bold;
        }
        .footer-key--description {
            color: $footer-description-foreground;
            background: $footer-description-background;
        }
        .footer-key--hover {
            color: $footer-key-foreground;
            background: $block-hover-background;
        }
        .footer-key--palette-border { color: $foreground 20%; }
    }
    """

    compact = reactive(False)  # under 130 columns: keys without their padding
    hovered: reactive[int | None] = reactive(None)

    def __init__(self) -> None:
        super().__init__()
        self._bindings_ready = False  # the screen has said which keys it has
        self.drawn: list[KeySpec] = []  # the keys on the line, in order
        self._spans: list[tuple[int, int]] = []  # each drawn key's cells [start, end)

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self.bindings_changed)

    def bindings_changed(self, screen: Screen[object]) -> None:
        self._bindings_ready = True
        if self.is_attached and screen is self.screen and screen.app.app_focus:
            self.call_after_refresh(self.update_keys)

    def on_resize(self) -> None:
        if self._bindings_ready:
            self.call_after_refresh(self.update_keys)

    def specs(self) -> list[KeySpec]:
        """The keys to draw now, in order (sets ``compact`` for the width)."""
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
        specs = [KeySpec(b.key, display[b.key], labels[b.action], b.action, not enabled,
                         tooltip or b.description) for b, enabled, tooltip in kept]
        if palette_fits and self.app.ENABLE_COMMAND_PALETTE:
            found = self.screen.active_bindings.get(self.app.COMMAND_PALETTE_BINDING)
            if found is not None:
                _node, binding, enabled, _tooltip = found
                specs.append(KeySpec(
                    binding.key, self.app.get_key_display(binding), binding.description,
                    binding.action, not enabled, binding.tooltip or binding.description,
                    palette=True))
        return specs

    def update_keys(self) -> None:
        """Draw the keys again if they changed (a cursor move changes which are greyed)."""
        if self._bindings_ready and self.is_attached:
            specs = self.specs()
            if specs != self.drawn:
                self.drawn = specs
                self.refresh()

    def _key(self, spec: KeySpec, index: int) -> Text:
        """One key's cells, styled as Textual's FooterKey draws them."""
        key_style = self.get_component_rich_style("footer-key--key")
        description_style = self.get_component_rich_style("footer-key--description")
        # the palette's hint is always drawn compact, as Textual's was (its own key)
        pad_key, pad_left, pad_right = (0, 1, 0) if self.compact or spec.palette else (1, 0, 1)
        text = Text.assemble(
            (" " * pad_key + spec.display + " " * pad_key, key_style),
            (" " * pad_left + spec.description + " " * pad_right, description_style),
        )
        item = self.get_component_rich_style(
            "footer-key--hover" if index == self.hovered else "footer-key")
        text.stylize_before(item + Style(dim=True) if spec.disabled else item)
        return text

    def render(self) -> Text:
        line, spans = Text(no_wrap=True, overflow="crop"), []
        keys = [k for k in self.drawn if not k.palette]
        margin = 1 if self.compact else 0
        for index, spec in enumerate(keys):
            start = line.cell_len
            line.append_text(self._key(spec, index))
            spans.append((start, line.cell_len))
            line.append(" " * margin)
        palette = [k for k in self.drawn if k.palette]
        if palette:
            hint = self._key(palette[0], len(keys))
            # then a cell: the hint's padding on a wide footer, the keys' margin on a compact
            hint.append(" ", self.get_component_rich_style("footer-key")
                        if not self.compact else None)
            border = Text("▏", self.get_component_rich_style("footer-key--palette-border")
                          + Style(bgcolor=self.get_component_rich_style("footer-key").bgcolor))
            width = self.size.width
            start = width - hint.cell_len - 1
            line.append(" " * max(0, start - line.cell_len))
            spans.append((start + 1, width))
            line.append_text(border)
            line.append_text(hint)
        self._spans = spans
        return line

    def shown(self) -> list[tuple[KeySpec, int, int]]:
        """The keys on the line as last drawn, with their cells [start, end)."""
        return [(spec, a, b) for spec, (a, b) in zip(self.drawn, self._spans, strict=False)]

    def _index_at(self, x: int) -> int | None:
        return next((i for i, (a, b) in enumerate(self._spans) if a <= x < b), None)

    def on_mouse_move(self, event: events.MouseMove) -> None:
        index = self._index_at(event.x)
        if index != self.hovered:  # (a move within a key changes nothing)
            self.hovered = index
            self.tooltip = self.drawn[index].tooltip if index is not None else None

    def on_leave(self) -> None:
        self.hovered, self.tooltip = None, None

    def on_mouse_down(self, event: events.MouseDown) -> None:
        index = self._index_at(event.x)
        if index is None:
            return
        spec = self.drawn[index]
        if spec.disabled:
            self.app.bell()
        else:
            self.app.simulate_key(spec.key)
