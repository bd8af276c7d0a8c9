"""What the screens and the action lifecycle are given of the dashboard: its state and the
few things they ask of it, typed, so that nothing below the App imports the App."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from gpudash.engine import ExecOptions
from gpudash.record import record
from gpudash.session.controller import ActionController
from gpudash.state.config import Settings
from gpudash.ui.hosts import HostView
from gpudash.ui.widgets.holder_view import HolderView


@record
class LastAction:
    """The last action on a host, as the action log has it."""

    title: str
    outcome: str
    ok: bool | None
    at: float
    running: bool = False  # where a batch stands, not a verdict (its row says that first)


class Dashboard(Protocol):
    """The dashboard's state (hosts, the shown host and selection, the action in flight)
    and what a screen may ask of the app that holds it."""

    views: list[HostView]
    current_host: int
    selected_key: str | None
    running: bool
    plot_all: bool
    plot_metric: str  # what the plot shows: a gpudash.ui.gpu_history metric's name
    result_shown: bool
    holder_filter: str
    paused: bool  # new samples are not drawn (p)
    sample_interval: float  # seconds between a host's samples (+ and - change it)
    holder_view: HolderView  # sort, user and GPU filters, what is collapsed
    last_actions: dict[str, LastAction]
    read_only: bool
    welcome: bool
    stale_after: float
    fresh_within: float  # seconds: a younger sample is "just now" (the header stays still)
    exec_options: ExecOptions
    controller: ActionController
    settings: Settings
    clock: Callable[[], float]

    @property
    def keymap(self) -> Mapping[str, str]:
        """binding id -> keys, of the user's keymap file."""
        ...

    @property
    def view(self) -> HostView:
        """The host on screen."""
        ...

    @property
    def fleet_shown(self) -> bool:
        """The fleet table is what the operator sees."""
        ...

    def key_of(self, action: str) -> str:
        """The key the user presses for ``action``, after their keymap."""
        ...

    def drawing_failed(self, where: str, exc: Exception) -> None:
        """A redraw failed: log it, say it once."""
        ...

    def open_host(self, index: int) -> None:
        """Show host ``index``'s screen."""
        ...

    def set_sample_interval(self, seconds: float) -> None:
        """Sample every host every ``seconds`` from now on."""
        ...

    def log_action(self, host: str, action: str, outcome: str, ok: bool | None,
                   details: Sequence[str] = ()) -> None:
        """Add an entry to the action log (and the host's fleet row)."""
        ...

    def show_running(self, host: str, action: str, doing: str) -> None:
        """Where an action of a batch stands on ``host`` (its fleet row says it; the log
        gets the outcome, from ``log_action``)."""
        ...
