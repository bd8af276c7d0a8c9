"""Modal screens: the confirmation of a destructive plan, the help screen, the filter."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, Input, Static

from gpudash.engine.plan import ROLLBACK_HEADING
from gpudash.ui.keyhold import release
from gpudash.ui.text import literal


def plan_text(lines: Iterable[str], *, first_bold: bool = True) -> Text:
    """The plan's lines, literally, with commands, notes and the people left alone set apart."""
    out = Text()
    for i, line in enumerate(lines):
        if i:
            out.append("\n")
        if i == 0 and first_bold:
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


def _scrolls(line: str) -> bool:
    """A command of the plan, or a phase's heading or proof: the part that may scroll.
    (The rollback's heading scrolls with its commands: without it they read as the start
    phase's own; so does a host's, in a plan over several hosts, ``== HOST``.)"""
    text = line.lstrip()
    return text.startswith(("$ ", "Serving when:", ROLLBACK_HEADING, "== ")) or (
        line.startswith("  ") and text[:1].isdigit() and ". " in text[:4])


class PlanScroll(VerticalScroll):
    """The plan's commands; resized (the dialog fitted to the screen), it says again how
    much of the plan is out of sight."""

    def on_resize(self) -> None:
        screen = self.screen
        if isinstance(screen, ConfirmModal):
            screen.call_after_refresh(screen.say_out_of_sight)


class ConfirmModal(ModalScreen[bool]):
    """Shows a plan exactly and asks; Cancel has the focus, so Enter never kills by accident.

    What the operator decides on (the title, the memory expected back, the warnings, who
    is left alone) and the answer row always show; only the list of commands scrolls, so
    a long reap still fits an 80x24 terminal, with how many lines are out of sight on its
    border (the arrow keys and PgUp/PgDn scroll it). No notification is drawn over it.

    A confirmation must have been seen: a key typed before the dialog was drawn, or in
    its first ``ARM_S`` seconds (typed ahead, or meant for the screen below), never
    confirms; the question says so and the next press does.
    """

    ARM_S = 0.3

    DEFAULT_CSS = """
    ConfirmModal { align: center middle; }
    ConfirmModal > Vertical {
        width: 90%; max-width: 140; height: auto; max-height: 100%;
        border: thick $error; background: $surface; padding: 0 1;
    }
    ConfirmModal #heading { dock: top; height: auto; }
    ConfirmModal #plan { height: auto; min-height: 1; }
    ConfirmModal #outcome { dock: bottom; height: auto; }
    ConfirmModal #answer { height: 1; margin-top: 1; }
    ConfirmModal #more { height: 1; }
    ConfirmModal #question { width: 1fr; text-style: bold; }
    ConfirmModal Button { margin-left: 2; min-width: 9; }
    ToastRack.-under-confirm ToastHolder { display: none; }
    """
    SCOPED_CSS = False  # the rule above is for the toast racks of the screens below too
    BINDINGS = [
        Binding("y", "confirm", "Confirm", id="gpudash.confirm.yes"),
        Binding("n", "cancel", "Cancel", id="gpudash.confirm.no"),
        Binding("escape", "cancel", "Cancel", id="gpudash.confirm.escape"),
        Binding("down", "scroll_plan(1)", show=False),
        Binding("up", "scroll_plan(-1)", show=False),
        Binding("pagedown", "scroll_plan(0, 1)", show=False),
        Binding("pageup", "scroll_plan(0, -1)", show=False),
    ]

    def __init__(self, title: str, lines: list[str],
                 keys: tuple[str, str, str] = ("y", "n", "Esc")) -> None:
        super().__init__()
        self.title_text = title
        self.lines = lines
        self.keys = keys  # confirm, cancel, cancel: as the user's keymap has them
        self._armed_at: float | None = None  # when a confirm counts: drawn + ARM_S
        self.refused_early = 0  # confirmations that came too soon (for tests and the log)
        self._toasts: list[Widget] = []  # the toast racks it hid while up

    @property
    def armed(self) -> bool:
        """A confirm now counts: the dialog was drawn at least ``ARM_S`` seconds ago."""
        return self._armed_at is not None and time.monotonic() >= self._armed_at

    def compose(self) -> ComposeResult:
        heading, *rest = self.lines or [""]
        commands = [line for line in rest if _scrolls(line)]
        outcome = [line for line in rest if not _scrolls(line)]
        with Vertical(id="dialog") as dialog:
            dialog.border_title = "Confirm"
            yield Static(plan_text([heading]), id="heading")
            with Vertical(id="outcome"):
                yield Static("", id="more")  # what of the plan is out of sight
                yield Static(plan_text(outcome, first_bold=False), id="summary")
                with Horizontal(id="answer"):
                    yes, no, escape = (k.capitalize() if k == "esc" else k for k in self.keys)
                    yield Static(Text(f"Run it?  {yes}: confirm  {no}/{escape}: cancel"),
                                 id="question")
                    yield Button("Cancel", id="cancel", variant="primary", compact=True)
                    yield Button("Confirm", id="confirm", variant="error", compact=True)
            with PlanScroll(id="plan") as plan:
                plan.can_focus = False  # Cancel keeps the focus; the keys above scroll it
                yield Static(plan_text(commands, first_bold=False), id="plan-text")

    def on_mount(self) -> None:
        if not self.query("#cancel"):
            # dismissed before it was mounted (a plan replaced at once by the next one):
            # nothing to set up (its query crashed the dashboard), and the keys typed for
            # it are dropped, never given to whatever is on top now
            release(self.app, deliver=False, why="the dialog was gone before it was drawn")
            return
        self.query_one("#cancel", Button).focus()
        release(self.app)  # keys typed while it was planned: its own (an early y is refused)
        self.call_after_refresh(self._drawn)
        plan = self.query_one("#plan", VerticalScroll)
        self.watch(plan, "scroll_y", lambda _y: self.say_out_of_sight(), init=False)
        # Toasts are drawn over everything, the dialog too: hidden (on this screen and
        # those below) while it is up, back after it if not timed out by then.
        screens = {*self.app.screen_stack, self}  # this one may not be on the stack yet
        self._toasts = [rack for screen in screens for rack in screen.query("ToastRack")]
        for rack in self._toasts:
            rack.add_class("-under-confirm")

    def on_unmount(self) -> None:
        for rack in self._toasts:
            rack.remove_class("-under-confirm")

    def _drawn(self) -> None:
        self._armed_at = time.monotonic() + self.ARM_S
        self._fit_plan()

    def on_resize(self) -> None:
        self.call_after_refresh(self._fit_plan)

    def _fit_plan(self) -> None:
        """The commands get what the screen has left once the heading, the outcome and the
        answer are drawn (a dialog taller than the screen was cut, not scrolled)."""
        plan = self.query_one("#plan", VerticalScroll)
        fixed = (self.query_one("#heading").outer_size.height
                 + self.query_one("#outcome").outer_size.height + 2)  # the dialog's border
        room = max(3, self.size.height - fixed - (0 if self.query_one("#more").display else 1))
        plan.styles.max_height = room
        self.call_after_refresh(self.say_out_of_sight)

    def say_out_of_sight(self) -> None:
        """The plan's border says how many of its lines are above and below the view."""
        plan = self.query_one("#plan", VerticalScroll)
        total = int(plan.virtual_size.height)
        shown = int(plan.scrollable_content_region.height)
        above = int(plan.scroll_y)
        below = max(0, total - shown - above)
        parts = [f"↑ {above} more" if above else "", f"↓ {below} more" if below else ""]
        said = "  ".join(p for p in parts if p)
        more = self.query_one("#more", Static)
        more.update(Text(f"  … {said} line(s) of the plan: ↑↓ PgUp PgDn to read them",
                         style="bold") if said else "")
        more.display = bool(said)

    def action_scroll_plan(self, lines: int, pages: int = 0) -> None:
        plan = self.query_one("#plan", VerticalScroll)
        step = lines + pages * max(1, plan.scrollable_content_region.height - 1)
        plan.scroll_to(y=plan.scroll_y + step, animate=False)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "confirm":
            self.action_confirm()
        else:
            self.dismiss(False)

    def action_confirm(self) -> None:
        if not self.armed:  # typed before the plan could be read
            self.refused_early += 1
            yes = self.keys[0]
            self.query_one("#question", Static).update(Text(
                f"Not yet: that key came before the plan was on screen. Read it, then "
                f"{yes}: confirm", style="bold"))
            return
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)


class DetailScreen(ModalScreen[None]):
    """One thing in full, wrapped: an action log entry, the selected unit's facts."""

    DEFAULT_CSS = """
    DetailScreen { align: center middle; }
    DetailScreen > VerticalScroll {
        width: 90%; max-width: 120; height: auto; max-height: 90%;
        border: thick $primary; background: $surface; padding: 0 1;
    }
    """
    BINDINGS = [
        Binding("escape,enter,q", "close", "Close", id="gpudash.detail.close"),
    ]

    def __init__(self, title: str, body: Text) -> None:
        super().__init__()
        self.title_text = title
        self.body = body

    def compose(self) -> ComposeResult:
        with VerticalScroll() as scroll:
            scroll.border_title = Text(self.title_text)  # a Text: never read as markup
            scroll.border_subtitle = "Esc / Enter closes"
            yield Static(self.body, id="detail")

    def action_close(self) -> None:
        self.dismiss(None)


class HelpScreen(ModalScreen[None]):
    """Every key of the dashboard, and whether it applies to the current selection."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; background: $background; }
    HelpScreen > VerticalScroll {
        width: 100%; max-width: 92; height: auto; max-height: 100%;
        border: thick $primary; background: $surface; padding: 0 1;
    }
    """
    BINDINGS = [
        Binding("escape,q,question_mark", "dismiss_help", "Close", id="gpudash.help.close"),
    ]

    def __init__(self, rows: list[tuple[str, str, bool | None]], read_only: bool,
                 sections: list[tuple[str, list[tuple[str, str]]]] | None = None) -> None:
        super().__init__()
        self.rows = rows
        self.read_only = read_only
        self.sections = sections or []  # (title, [(term, meaning)]) after the keys

    def compose(self) -> ComposeResult:
        text = Text()
        text.append("Keys\n", style="bold")
        keys = max((len(k) for k, _d, _a in self.rows), default=0) + 2
        width = max((len(d) for _k, d, _a in self.rows), default=0) + 2
        for key, description, available in self.rows:
            # Greyed like the footer's keys; pressing one says why.
            style = "" if available is True else "dim"
            text.append(f"  {key:<{keys}}", style=f"bold {style}".strip())
            text.append(f"{description:<{width}}".rstrip(), style=style)
            text.append("\n")
        if any(a is not True for _k, _d, a in self.rows):
            why = "read-only mode" if self.read_only else "not for this selection"
            text.append(f"Greyed: {why}; the key says why.\n", style="dim italic")
        for title, entries in self.sections:
            text.append(f"\n{title}\n", style="bold")
            term = max((len(t) for t, _m in entries), default=0) + 2
            for name, meaning in entries:
                text.append(f"  {name:<{term}}", style="bold")
                text.append(f"{meaning}\n")
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
    """Ask for the text the holders view is filtered by (empty: show everything).

    With ``live``, every change is applied as it is typed (as htop's and k9s's filters
    are). Esc clears the text first (and, live, the filter); a second Esc closes."""

    DEFAULT_CSS = """
    FilterScreen { align: center bottom; }
    FilterScreen > Input { width: 100%; max-width: 80; margin-bottom: 4; border: thick $primary; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="gpudash.filter.cancel")]

    def __init__(self, current: str, live: Callable[[str], None] | None = None) -> None:
        super().__init__()
        self.current = current
        self.live = live
        self.cleared = False  # Esc emptied it: closing leaves the filter empty

    def compose(self) -> ComposeResult:
        yield Input(self.current, placeholder="filter holders: pid, user, unit, command…",
                    id="filter")

    def on_mount(self) -> None:
        self.query_one(Input).focus()
        release(self.app)  # the keys typed after / go here

    def on_input_changed(self, event: Input.Changed) -> None:
        if self.live is not None:
            self.live(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        field = self.query_one(Input)
        if field.value:
            field.value = ""
            self.cleared = True
            return
        self.dismiss("" if self.cleared or self.live is not None else None)
