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

from gpudash.record import record

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


@record(slots=False)
class KeySpec:
    """One key as the footer draws it."""

    key: str
    display: str
    description: str
    action: str
    disabled: bool
    tooltip: str
    classes: str = ""

    def shape(self) -> tuple[str, str, str, str, str]:
        """What only drawing the keys again changes (the rest is set on a drawn key)."""
        return self.key, self.display, self.description, self.action, self.classes


def shape(key: FooterKey) -> tuple[str, str, str, str, str]:
    """A drawn key's ``KeySpec.shape``."""
    classes = " ".join(sorted(key.classes - {"-disabled", "-compact"}))
    return key.key, key.key_display, key.description, key.action, classes


class DashboardFooter(Footer):
    """A footer that never cuts off help and quit, and that moving the cursor does not
    build again: when only which keys are enabled changes, the drawn keys are updated."""

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
        if palette_fits and self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE:
            found = self.screen.active_bindings.get(self.app.COMMAND_PALETTE_BINDING)
            if found is not None:
                _node, binding, enabled, _tooltip = found
                specs.append(KeySpec(
                    binding.key, self.app.get_key_display(binding), binding.description,
                    binding.action, not enabled, binding.tooltip or binding.description,
                    "-command-palette"))
        return specs

    def compose(self) -> ComposeResult:
        if not self._bindings_ready:
            return
        for spec in self.specs():
            key = FooterKey(spec.key, spec.display, spec.description, spec.action,
                            disabled=spec.disabled, tooltip=spec.tooltip,
                            classes=spec.classes)
            if not spec.classes:  # the palette hint keeps its own style, as in Textual's
                key.set_reactive(FooterKey.compact, self.compact)
                key.set_class(self.compact, "-compact", update=False)
            yield key

    async def recompose(self) -> None:
        """Update the drawn keys in place when only their state changed; else draw them
        again. Textual's footer draws every key again on each change of what is enabled
        (each cursor move), and each key drawn left its style cache behind in Textual's
        own cache (see ``gpudash.ui.styles_cache``): RSS grew by 57 MB in 30 s of cursor
        moves (``bench/session_memory.py``).

        Keys are made with ``compact`` set once, not bound to the footer's (Textual's
        ``data_bind``): the footer kept that binding, and so every key ever drawn, until
        ``compact`` changed."""
        if self._bindings_ready and self.is_attached:
            compact = self.compact
            specs = self.specs()
            drawn = list(self.query_children(FooterKey))
            if compact == self.compact and [shape(k) for k in drawn] == [
                    s.shape() for s in specs]:
                for key, spec in zip(drawn, specs, strict=True):
                    key._disabled = spec.disabled
                    key.set_class(spec.disabled, "-disabled")
                    key.tooltip = spec.tooltip
                return
        await super().recompose()

    def on_resize(self) -> None:
        if self._bindings_ready:
            self.call_after_refresh(self.recompose)
