"""The destructive actions' lifecycle in the dashboard: plan, confirm (and plan again from a
fresh sample), run in a worker whose progress arrives as messages, log the outcome; and
quitting while one runs.

The engine plans and the session's controller audits and runs; this class only walks an
action through the dialogs and workers of the app that composes it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from itertools import count
from typing import Any

from textual.app import App
from textual.message import Message
from textual.worker import Worker, WorkerCancelled, WorkerFailed

from gpudash.domain.model import SourceKind
from gpudash.engine import (
    STARTING,
    ActionKind,
    ActionPlan,
    ActionReport,
    ActionSpec,
    PlanError,
    Selection,
    replan,
    selected_owner,
)
from gpudash.protocol.source import Capability, HostControl, SourceError
from gpudash.session.controller import Running, outcome_line, serving_request, watch
from gpudash.state import footprints
from gpudash.ui.messages import ActionFinished, ActionProgressed
from gpudash.ui.models import Choice, ModelPicker
from gpudash.ui.outcome import exit_code
from gpudash.ui.quit import AFTER, NOW, QuitWhileActing
from gpudash.ui.screens import ConfirmModal
from gpudash.ui.state import Dashboard

MAX_REPLANS = 3  # the host keeps changing under the confirm dialog: stop asking
# The one-line toast of a result while another screen hides the Action panel; the panel
# and the log have the whole verdict.
VERDICT_TOAST = {"warning": "⚠ done, something is left to do", "failed": "✘ NOT confirmed",
                 "unknown": "? outcome unknown", "interrupted": "■ interrupted"}

log = logging.getLogger("gpudash.ui")


class Acting:
    """Walks one action at a time from its plan to its logged outcome, for ``app``."""

    def __init__(self, app: App[int], state: Dashboard, show_progress: Callable[[], None],
                 panel_visible: Callable[[], bool]) -> None:
        self.app = app
        self.state = state
        self._show_progress = show_progress  # the Action panel, redrawn
        self._panel_visible = panel_visible  # the host screen is on top: no toast needed
        self._ids = count(1)
        self._action_id = 0  # the running action's, to drop late progress of an old one
        self._worker: Worker[None] | None = None
        self._quit_when_done = False
        self.waited_for: ActionReport | None = None  # "Quit when done": its verdict

    def _run(self, work: Coroutine[Any, Any, None], group: str) -> None:
        self.app.run_worker(work, group=group, exclusive=True, exit_on_error=False)

    # --- planning ----------------------------------------------------------------------

    def plan(self, spec: ActionSpec, host: int, selection: Selection) -> None:
        """Plan ``spec`` for ``selection`` on ``host`` and ask for confirmation."""
        if spec.kind in STARTING:
            # what proves it serves is asked of the host first
            self._run(self._plan_start(spec, host, selection), "prepare")
            return
        if spec.kind is ActionKind.FIX:  # the unit's configuration is read first
            self._run(self._plan_fix(spec, host, selection), "prepare")
            return
        snapshot = self.state.views[host].snapshot
        assert snapshot is not None
        try:
            plan = spec.plan(snapshot, selection)
        except PlanError as exc:
            self.app.notify(str(exc), title=spec.title, severity="warning")
            return
        self._run(self._confirm_and_run(plan, host), "confirm")

    async def _plan_start(self, spec: ActionSpec, host: int, sel: Selection) -> None:
        """start / restart / swap: pick the target (swap), learn its ready URL and footprint,
        make sure the host reports it, then plan from a fresh sample and confirm."""
        view = self.state.views[host]
        control = view.source.control
        simulated = view.snapshot is not None and view.snapshot.source is SourceKind.DEMO
        target = sel.unit
        try:
            if spec.kind is ActionKind.SWAP:
                source = sel.unit or ""
                if sel.unit is None and sel.container is not None and view.snapshot:
                    owner = selected_owner(view.snapshot, sel)
                    source = owner.describe() if owner is not None else sel.container
                target = await self._pick_target(view.name, source, control, simulated)
                if target is None:
                    return
            assert target is not None
            watch(view.source, target)
            url, learned = await serving_request(control, view.name, target,
                                                 simulated=simulated)
            snapshot = await control.sample()
            plan = spec.plan(snapshot, Selection(
                unit=sel.unit, container=sel.container if spec.kind is ActionKind.SWAP else None,
                target=target if spec.kind is ActionKind.SWAP else None,
                ready_url=url, footprint=learned))
        except (PlanError, SourceError) as exc:
            self.app.notify(str(exc), title=spec.title, severity="warning")
            return
        self._run(self._confirm_and_run(plan, host), "confirm")

    async def _plan_fix(self, spec: ActionSpec, host: int, sel: Selection) -> None:
        """fix: read ``systemctl cat`` of the unit, plan from a fresh sample, confirm (the
        dialog shows the diff)."""
        control = self.state.views[host].source.control
        try:
            if Capability.DROP_IN not in control.capabilities or sel.unit is None:
                raise PlanError("this host cannot be given a drop-in")
            text = await control.unit_text(sel.unit)
            snapshot = await control.sample()
            plan = spec.plan(snapshot, Selection(unit=sel.unit, unit_text=text))
        except (PlanError, SourceError) as exc:
            self.app.notify(str(exc), title=spec.title, severity="warning")
            return
        self._run(self._confirm_and_run(plan, host), "confirm")

    async def _pick_target(self, host_name: str, source_unit: str, control: HostControl,
                           simulated: bool) -> str | None:
        found = (list(await control.model_units(self.state.settings.models))
                 if Capability.MODEL_UNITS in control.capabilities else [])
        choices = []
        for m in found:
            if m.name == source_unit:
                continue
            fp = footprints.lookup(host_name, m.name,
                                   footprints.store_path(simulated=simulated))
            choices.append(Choice(m.name, m.active_state or "?", m.unit_file_state or "?",
                                  m.port, m.description or "",
                                  max(fp.mib_per_gpu.values()) if fp else None,
                                  m.restart, fp.ready_s if fp else None))
        if not choices:
            self.app.notify("No other model-server units on this host.", title="Swap",
                            severity="warning")
            return None
        return await self.app.push_screen_wait(ModelPicker(
            f"Reclaim {source_unit}, then start:", choices))

    async def _confirm_and_run(self, plan: ActionPlan, host: int) -> None:
        """Ask; then plan again from a fresh sample, so a dialog left open never runs on a
        stale baseline, and ask again if what would be sent changed meanwhile."""
        state, notify = self.state, self.app.notify
        news: list[str] = []
        for _ in range(MAX_REPLANS):
            lines = plan.describe(state.exec_options.term_timeout)
            keys = (state.key_of("confirm.yes"), state.key_of("confirm.no"),
                    state.key_of("confirm.escape"))
            confirmed = await self.app.push_screen_wait(
                ConfirmModal(plan.title, news + lines, keys))
            if not confirmed:
                state.log_action(plan.host, plan.title, "cancelled: nothing was done", None)
                notify("Cancelled: nothing was done.")
                return
            try:
                fresh = await state.views[host].source.control.sample()
                plan, changes = replan(plan, fresh)
            except (PlanError, SourceError) as exc:
                why = f"not started: the host could not be checked again: {exc}" if isinstance(
                    exc, SourceError) else f"not started: the host changed: {exc}"
                state.log_action(plan.host, plan.title, why, None)
                notify(why, title=plan.title, severity="warning")
                return
            if state.running:  # another action started while the dialog was open
                notify("Another action is running; not started.", severity="warning")
                return
            if not changes:
                self.start(plan, host, act=True)
                return
            news = ["  ! The host changed while this dialog was open:",
                    *[f"  !   {c}" for c in changes], "  ! Confirm the plan as it is now:", ""]
        notify("The plan keeps changing on the host; not started.", severity="warning")

    # --- running -----------------------------------------------------------------------

    def start(self, plan: ActionPlan, host: int, *, act: bool) -> None:
        """Run (or, after a lost link, only re-verify) ``plan`` in the action worker."""
        running = self.state.controller.begin(plan, host, act=act)
        self._action_id = action_id = next(self._ids)
        self.state.running = True
        self.state.result_shown = True
        self._show_progress()
        self._worker = self.app.run_worker(
            self._execute(action_id, running),
            name=f"{'action' if act else 'reverify'} {action_id}", group="action",
            exit_on_error=False,
        )

    def reverify(self, host: int) -> None:
        """Samples flow again from a host where an action's outcome was left unknown."""
        plan = self.state.controller.take_reverify(host)
        if plan is None:
            return
        self.state.log_action(plan.host, plan.title,
                              "link is back: re-verifying (nothing is re-sent)", None)
        self.start(plan, host, act=False)

    async def _execute(self, action_id: int, running: Running) -> None:
        """The action worker: the controller audits and runs; this only reports back."""
        report, error = await self.state.controller.run(
            running, self.state.views[running.host].source.control,
            on_progress=lambda p: self._post(ActionProgressed(action_id, p)),
            on_audit_error=lambda why: self.app.notify(
                f"Could not write the audit file: {why}", title="Audit", severity="warning"),
        )
        self._post(ActionFinished(action_id, running.host, running.plan, report, error))

    def _post(self, message: Message) -> None:
        self.app.post_message(message)

    def progressed(self, message: ActionProgressed) -> None:
        if message.action_id != self._action_id:
            return  # a late message of an earlier action
        self.state.controller.progressed(message.progress)
        self._show_progress()

    def finished(self, message: ActionFinished) -> None:
        state = self.state
        state.controller.finished(message.host, message.report, message.error)
        state.running = False
        self._worker = None
        state.result_shown = True
        self._show_progress()
        plan, report = message.plan, message.report
        if self._quit_when_done:  # its verdict is the exit status, printed after
            self.waited_for = report
            self.app.exit(exit_code(report))
        if report is None:
            state.log_action(plan.host, plan.title, f"failed: {message.error}", False)
            self.app.notify(str(message.error), title="Action failed", severity="error")
            return
        state.log_action(plan.host, plan.title, outcome_line(report),
                         report.verdict == "confirmed",
                         report.describe()[1:])  # line 0 repeats the title and summary
        # The verdict in full is in the Action panel and the log. A toast over them would
        # only repeat it and hide the log's new entry and the walkthrough: it is raised
        # only when another screen (help, the journal, a dialog) hides the panel.
        if self._panel_visible():
            return
        if report.verdict == "confirmed":
            self.app.notify("✔ confirmed: see the Action panel", title=plan.title)
        else:
            self.app.notify(f"{VERDICT_TOAST.get(report.verdict, report.verdict)}: see the "
                            "Action panel", title=plan.title, severity="warning", timeout=10)

    # --- quitting ----------------------------------------------------------------------

    def quit(self) -> None:
        """Quit; while an action runs, ask first (wait for it, stop it, or keep going)."""
        if not self.state.running:
            self.app.exit(0)
            return
        self._run(self._ask_quit(), "quit")

    async def _ask_quit(self) -> None:
        running = self.state.controller.running
        if running is None:
            self.app.exit(0)
            return
        choice = await self.app.push_screen_wait(QuitWhileActing(running.plan.title,
                                                                 running.report.sent_lines()))
        if not self.state.running:  # it ended while the question was open
            self.app.exit(0)
        elif choice == AFTER:
            self._quit_when_done = True
            self.app.notify("gpudash quits as soon as the action has ended.")
        elif choice == NOW:
            await self._quit_now()

    async def _quit_now(self) -> None:
        worker = self._worker
        if worker is not None:
            worker.cancel()
            try:
                await worker.wait()
            except (WorkerCancelled, WorkerFailed):
                pass  # cancelled as asked: _execute audited what was sent
        self.app.exit(6)

    def stop_from_outside(self, why: str) -> None:
        """SIGTERM, SIGHUP or the terminal gone: nobody is there to ask, so quit as "Quit
        now" does (an action running is stopped where it is and audited; exit 6), else
        quit (exit 0). ``gpudash.ui.stopping`` bounds how long that may take."""
        log.warning("%s: quitting%s", why,
                    " (interrupting the running action)" if self.state.running else "")
        if self.state.running:
            self._run(self._quit_now(), "quit")
        else:
            self.app.exit(0)
