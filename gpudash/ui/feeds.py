"""Host feeds: one worker per host follows its ``HostSource``; every sample is recorded as
it arrives (history and triage miss none) and asks only for the redraw that fits what is
on screen — the shown host's view, another host's row, or its fleet row."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from textual.app import App
from textual.message import Message

from gpudash.domain.model import SourceKind
from gpudash.engine import SPECS_BY_NAME
from gpudash.feed.follow import Frame, HostFollower
from gpudash.state.footprints import LearnedUnits
from gpudash.ui.main_screen import MainScreen
from gpudash.ui.messages import HostConnecting, HostFailed, HostUpdated
from gpudash.ui.state import Dashboard
from gpudash.ui.text import clean
from gpudash.ui.throttle import RedrawThrottle

if TYPE_CHECKING:  # made only where there are several hosts (gpudash.ui.app)
    from gpudash.ui.fleet_screen import FleetScreen


class HostFeeds:
    """Follows every host of ``state`` for ``app`` and keeps the screens drawn."""

    def __init__(self, app: App[int], state: Dashboard, main: MainScreen,
                 fleet: FleetScreen | None,
                 interval: float, on_sample: Callable[[int], None]) -> None:
        self.app, self.state, self.main, self.fleet = app, state, main, fleet
        self.interval = interval
        self._on_sample = on_sample  # after each sample's redraw: e.g. re-verify an action
        self.view_redraw = RedrawThrottle(app, lambda _hosts: self._draw_view())
        # Another host's sample changes only its row in the host list: those rows are
        # redrawn together (with 256 hosts, a redraw per sample was most of the CPU).
        self.rows_redraw = RedrawThrottle(app, self._draw_rows)
        self._available: tuple[bool | None, ...] = ()
        # what the availability was last asked of: values, and objects (compared by identity)
        self._depends: tuple[tuple[object, ...], tuple[object, ...]] = ((), ())
        self._learned = LearnedUnits()  # what the unit lint reads of past stops, per host
        self._followers: dict[int, HostFollower] = {}

    def start(self) -> None:
        """A worker per host, and the once-a-second tick."""
        for index in range(len(self.state.views)):
            self._follow(index)
        self.app.set_interval(1.0, self.tick)

    def set_interval(self, seconds: float) -> None:
        """Sample every host every ``seconds`` from now on: each host's stream is started
        again at that pace; its follower (the last sample, the crash-loop watch) is kept."""
        self.interval = seconds
        for index in list(self._followers):
            self._follow(index)

    def _follow(self, index: int) -> None:
        view = self.state.views[index]
        follower = self._followers.get(index)
        if follower is None:
            follower = HostFollower(
                view.source, self.interval,
                on_frame=lambda frame, sampled: self._framed(index, frame, sampled),
                learned=lambda s: self._learned(s.host, simulated=s.source is SourceKind.DEMO),
                retry_host_key=None)  # an unknown or changed key needs the operator
            self._followers[index] = follower
        follower.interval = self.interval
        self.app.run_worker(
            follower.run(), name=f"host {view.name}", group=f"host-{index}", exclusive=True,
            exit_on_error=False,
        )

    def _framed(self, index: int, frame: Frame, sampled: bool) -> None:
        """Every sample is recorded as it arrives (history and triage miss none); only the
        redraw it asks for may be merged with the next one's."""
        if sampled:
            self.state.views[index].record(frame, self.state.clock())
            self._post(HostUpdated(index))
            return
        link = frame.link
        if link.state == "connecting":
            self._post(HostConnecting(index, link.attempt))
        elif link.state == "reconnecting":
            self._post(HostFailed(index, link.error or "link lost", link.retry_in))
        elif link.state == "failed":
            self._post(HostFailed(index, link.error or "failed", None))

    def _post(self, message: Message) -> None:
        self.app.post_message(message)

    @property
    def _closing(self) -> bool:
        return not self.app.screen_stack

    def updated(self, message: HostUpdated) -> None:
        if self._closing:
            return
        if (fleet := self._fleet_shown()) is not None:  # the host screen is hidden: one
            fleet.host_changed(message.host)  # fleet row, nothing else
        elif message.host == self.state.current_host:
            if not self.state.paused:
                self.view_redraw.ask()
            # The footer works its keys out on every refresh_bindings: only when one
            # changed (availability follows the shown host only). What the prechecks read
            # (the selection, the owners and orphans as triaged) is kept as objects: a
            # sample that changed none of them asks no precheck again.
            view, app = self.state.views[message.host], self.state
            state = (app.read_only, app.running, app.selected_key)
            objects = (() if view.triage is None else
                       (view.triage.groups, view.triage.orphans_of, view.triage.learned))
            if state == self._depends[0] and len(objects) == len(self._depends[1]) and all(
                    a is b for a, b in zip(objects, self._depends[1], strict=True)):
                return self._sampled(message.host)
            self._depends = (state, objects)
            available = tuple(self.main.availability(name)[0] for name in SPECS_BY_NAME)
            if available != self._available:
                self._available = available
                self.app.refresh_bindings()
        else:
            self.rows_redraw.ask(message.host)
        self._sampled(message.host)

    def _sampled(self, host: int) -> None:
        self._read_crash_reasons(host)
        self._on_sample(host)

    def _read_crash_reasons(self, host: int) -> None:
        """A unit systemd keeps restarting: its journal says why (read in a worker, now
        and then, never per sample); the unit panel shows it."""
        view = self.state.views[host]
        if view.snapshot is None:
            return
        control = view.source.control
        now = self.state.clock()
        looping = view.triage.crash_looping if view.triage is not None else frozenset()
        for unit, restarts in view.crashes.due(view.snapshot, looping, control, now):
            async def read(unit: str = unit, restarts: int | None = restarts) -> None:
                await view.crashes.read(control, unit, restarts, now)
                if host == self.state.current_host and not self._closing:
                    self.main.refresh_unit()

            self.app.run_worker(read(), group=f"crash {host} {unit}", exit_on_error=False)

    def _draw_view(self) -> None:
        if not self._closing:
            self.main.refresh_view()

    def _draw_rows(self, hosts: set[int]) -> None:
        if not self._closing and self.main.ready:
            self.main.refresh_host_rows(hosts)

    def failed(self, message: HostFailed) -> None:
        if self._closing:
            return
        view = self.state.views[message.host]
        view.state = "error"
        view.error = clean(message.error)
        view.retry_at = (None if message.retry_in is None
                         else self.state.clock() + message.retry_in)
        self.refresh_header()
        if (fleet := self._fleet_shown()) is not None:
            fleet.host_changed(message.host)

    def connecting(self, message: HostConnecting) -> None:
        if self._closing or not message.attempt:
            return
        self.state.views[message.host].state = "reconnecting"
        self.refresh_header()
        if (fleet := self._fleet_shown()) is not None:
            fleet.host_changed(message.host)

    def _fleet_shown(self) -> FleetScreen | None:
        """The fleet table, where it is what the operator sees (one host: none is made)."""
        return self.fleet if self.state.fleet_shown else None

    def refresh_header(self) -> None:
        if self.main.ready and not self.state.fleet_shown:
            self.main.refresh_header()

    def tick(self) -> None:
        """Once a second: ages and staleness move on without samples. A header the
        current host's sample drew while it is still "just now" (``fresh_within``) is left
        as it is: drawn again it would say the same. (With "a second ago" as the rule, a tick
        that fell in the tenth of a second before each sample drew the header twice.)"""
        if self._closing:
            return
        if (fleet := self._fleet_shown()) is not None:
            fleet.tick()
        if time.monotonic() - self.view_redraw.last >= self.state.fresh_within:
            self.refresh_header()
        elif len(self.state.views) > 1 and self.main.ready:
            self.main.refresh_host_rows(set(range(len(self.state.views))))
