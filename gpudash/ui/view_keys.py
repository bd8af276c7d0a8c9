"""The host screen's keys that change what it shows, never a host: the journal, the plot,
the host shown, the result panel, and how the holders are filtered, sorted and folded.

``MainScreen`` is a ``ViewKeys``: it supplies the state (``dashboard``), the widgets and
the redraws these keys ask for; its bindings (``gpudash.ui.bindings``) name them.
"""

from __future__ import annotations

from dataclasses import replace

from textual import work
from textual.screen import Screen

from gpudash.engine import Selection, container_of, unit_of
from gpudash.protocol.source import Capability
from gpudash.ui.gpu_history import METRICS
from gpudash.ui.keyhold import hold
from gpudash.ui.layout import PLOT_MIN
from gpudash.ui.screens import FilterScreen
from gpudash.ui.state import Dashboard
from gpudash.ui.widgets.holder_flags import legend
from gpudash.ui.widgets.holders import IDLE_KEY, HoldersTable, selection_of
from gpudash.ui.widgets.plotview import HistoryPlot

INTERVALS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)  # the steps of + and -


def tagged_pids(app: Dashboard) -> tuple[int, ...]:
    """The tagged processes still in the host's sample (k, t, S act on them all)."""
    snap = app.view.snapshot
    return tuple(sorted(p for p in app.holder_view.tagged
                        if snap is not None and snap.process(p) is not None))


class ViewKeys(Screen[None]):
    """What a key does to the view; the screen below says how to redraw it."""

    dashboard: Dashboard
    holders: HoldersTable
    plot: HistoryPlot

    def selection(self) -> Selection:
        raise NotImplementedError

    def refresh_view(self) -> None:
        raise NotImplementedError

    def refresh_holders(self) -> None:
        raise NotImplementedError

    def refresh_unit(self) -> None:
        raise NotImplementedError

    def refresh_plot(self) -> None:
        raise NotImplementedError

    def refresh_progress(self) -> None:
        raise NotImplementedError

    def refresh_header(self) -> None:
        raise NotImplementedError


    def action_journal(self) -> None:
        """The selected unit's journal, live (a container's ``docker logs``)."""
        from gpudash.ui.models import JournalScreen  # with RichLog: loaded when first shown

        app = self.dashboard
        sel = self.selection()
        control = app.view.source.control
        named = container_of(sel)
        if named is not None and app.view.snapshot is not None:
            c = app.view.snapshot.container(named)
            if c is not None and Capability.CONTAINER_LOGS in control.capabilities:
                runtime, cid = c.runtime, c.id
                self.app.push_screen(JournalScreen(
                    c.label, lambda: control.container_logs(runtime, cid, lines=200),
                    what=f"{c.runtime} logs"))
                return
        unit = unit_of(sel) or selection_of(app.view.triage, app.selected_key)[0]
        control = app.view.source.control
        can = Capability.JOURNAL in control.capabilities
        if unit is None or not can:
            self.app.notify("Select a unit (or one of its processes) whose journal to show."
                            if can else "This host cannot show journals.",
                            title="Journal", severity="warning")
            return
        self.app.push_screen(JournalScreen(unit, lambda: control.journal(unit, lines=200)))

    def action_toggle_plot(self) -> None:
        app = self.dashboard
        app.plot_all = not app.plot_all
        self.refresh_plot()
        if not self.plot.display:
            width, height = self.app.size
            self.app.notify(
                f"Plot set to {'all GPUs' if app.plot_all else 'the selected GPU'}; it shows "
                f"on a terminal of at least {PLOT_MIN} (this one is {width}x{height}).",
                title="Plot", markup=False,
            )

    def action_plot_metric(self) -> None:
        """The plot's next figure: memory, SM utilisation, power, memory again."""
        app = self.dashboard
        names = [m.name for m in METRICS]
        app.plot_metric = names[(names.index(app.plot_metric) + 1) % len(names)]
        self.refresh_plot()
        if not self.plot.display:
            width, height = self.app.size
            self.app.notify(
                f"Plot set to {app.plot_metric}; it shows on a terminal of at least "
                f"{PLOT_MIN} (this one is {width}x{height}).", title="Plot", markup=False)

    def action_fleet(self) -> None:
        """The fleet table (several hosts); Enter on a row comes back to that host."""
        if len(self.dashboard.views) > 1 and not self.dashboard.fleet_shown:
            self.app.push_screen("fleet")

    def action_next_host(self) -> None:
        self.action_host((self.dashboard.current_host + 1) % len(self.dashboard.views))

    def action_host(self, index: int) -> None:
        app = self.dashboard
        if 0 <= index < len(app.views) and index != app.current_host:
            app.current_host = index
            app.selected_key = None
            self.refresh_view()

    def action_hide_result(self) -> None:
        self.dashboard.result_shown = False
        self.refresh_progress()

    def action_filter(self) -> None:
        hold(self.app)  # what is typed after / is the filter's, however fast it comes
        self._filter()

    @work(exclusive=True, group="filter", exit_on_error=False)
    async def _filter(self) -> None:
        app = self.dashboard

        def live(text: str) -> None:
            app.holder_filter = text.strip()
            self.refresh_holders()

        text = await self.app.push_screen_wait(FilterScreen(app.holder_filter, live))
        if text is not None:
            live(text)
        self.refresh_unit()

    def action_sort_next(self) -> None:
        self.dashboard.holder_view = self.dashboard.holder_view.next_sort()
        self.refresh_holders()

    def action_sort_reverse(self) -> None:
        self.dashboard.holder_view = self.dashboard.holder_view.reversed()
        self.refresh_holders()

    def action_flat(self) -> None:
        """Every process in one list, sorted across owners; again: the tree by owner."""
        app = self.dashboard
        app.holder_view = replace(app.holder_view, flat=not app.holder_view.flat)
        key = app.selected_key
        self.refresh_holders()
        if key is not None and key.startswith("p:"):
            self.holders.select_key(key)

    def help_sections(self) -> list[tuple[str, list[tuple[str, str]]]]:
        """Help's legend of the holders' flags, short and long."""
        return [("Flags (short form where the table is narrow)", legend())]

    def action_tag(self) -> None:
        """Tag the selected process (again: untag) and go to the next row, as htop's
        Space: k, t and S then plan every tagged process, in one plan."""
        app = self.dashboard
        key = app.selected_key
        if key is None or not key.startswith("p:"):
            self.app.notify("Select a process to tag.", title="Tag", severity="warning")
            return
        app.holder_view = replace(app.holder_view,
                                  tagged=app.holder_view.tagged ^ {int(key[2:])})
        self.refresh_holders()
        self.holders.action_cursor_down()

    def action_untag(self) -> None:
        app = self.dashboard
        if app.holder_view.tagged:
            app.holder_view = replace(app.holder_view, tagged=frozenset())
            self.refresh_holders()

    def action_interval(self, step: int) -> None:
        """The sample interval one step longer (+) or shorter (-), every host."""
        app = self.dashboard
        now = app.sample_interval
        at = min(range(len(INTERVALS)), key=lambda i: abs(INTERVALS[i] - now))
        chosen = INTERVALS[max(0, min(len(INTERVALS) - 1, at + step))]
        if chosen != now:
            app.set_sample_interval(chosen)
        self.app.notify(f"every {chosen:g} s, every host", title="Sample interval")

    def action_pause(self) -> None:
        """Stop drawing new samples (they are still read, recorded and triaged: an action
        plans from the newest); again: draw the newest at once."""
        app = self.dashboard
        app.paused = not app.paused
        if app.paused:
            self.refresh_header()
        else:
            self.refresh_view()

    def action_copy(self) -> None:
        """The selected process's command line (an owner row: the owner's name) to the
        terminal's clipboard, as OSC 52 (base64: no byte of it reaches the terminal raw)."""
        app = self.dashboard
        owner, _unit, pid = selection_of(app.view.triage, app.selected_key)
        process = app.view.snapshot.process(pid) if app.view.snapshot and pid else None
        text = (process.cmdline or process.name) if process is not None else owner
        if not text:
            self.app.notify("Select a process or an owner to copy.", title="Copy",
                            severity="warning")
            return
        text = "".join(c if c.isprintable() else " " for c in text)
        self.app.copy_to_clipboard(text)
        shown = text if len(text) <= 60 else text[:59] + "…"
        self.app.notify(shown, title="Copied", markup=False)

    def action_filter_user(self) -> None:
        """Only the selected process's user; again (or on an owner row): everyone."""
        app = self.dashboard
        hv = app.holder_view
        _owner, _unit, pid = selection_of(app.view.triage, app.selected_key)
        process = app.view.snapshot.process(pid) if app.view.snapshot and pid else None
        user = process.user if process is not None else None
        if hv.user is None and user is None:
            self.app.notify("Select a process whose user to show.", title="Only user",
                            severity="warning")
            return
        app.holder_view = replace(hv, user=None if hv.user is not None else user)
        self.refresh_holders()
        self.refresh_unit()

    def action_clear_filters(self) -> None:
        app = self.dashboard
        if app.holder_filter or app.holder_view.user is not None or \
                app.holder_view.gpu is not None:
            app.holder_filter = ""
            app.holder_view = replace(app.holder_view, user=None, gpu=None)
            self.refresh_holders()
            self.refresh_unit()

    def action_fold(self, how: str) -> None:
        """Collapse, expand or toggle the owner or process tree under the cursor. Left on
        a row with nothing under it collapses its owner and goes to the owner's row, as a
        tree view's Left goes to the parent."""
        app = self.dashboard
        key = app.selected_key
        triage = app.view.triage
        if key is None or triage is None or key.startswith("x:") or app.holder_view.flat:
            return
        hv = app.holder_view
        if key == IDLE_KEY:  # the idle units' fold: closed unless opened
            opened = IDLE_KEY in hv.opened
            if {"expand": True, "collapse": False}.get(how, not opened) != opened:
                app.holder_view = replace(hv, opened=hv.opened ^ {IDLE_KEY})
                self.refresh_holders()
                self.holders.select_key(key)
            return
        folded = key in hv.collapsed
        if how == "collapse" and not folded and not self._has_children(key):
            owner = selection_of(triage, key)[0]
            if owner is None:
                return
            key = "u:" + owner
            folded = key in hv.collapsed
        if how == "expand" or (how == "toggle" and folded):
            collapsed = hv.collapsed - {key}
        elif self._has_children(key):
            collapsed = hv.collapsed | {key}
        else:
            return
        app.holder_view = replace(hv, collapsed=collapsed)
        self.refresh_holders()
        self.holders.select_key(key)

    def _has_children(self, key: str) -> bool:
        triage = self.dashboard.view.triage
        if triage is None:
            return False
        if key.startswith("u:"):
            group = triage.group(key[2:])
            return group is not None and bool(group.roots)
        pid = int(key[2:])
        group = triage.group_of(pid)
        return group is not None and any(n.process.pid == pid and n.children
                                         for n in group.nodes())
