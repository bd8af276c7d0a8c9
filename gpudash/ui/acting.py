"""The dashboard's front end of the action session: its dialogs (confirm, the swap's model
picker) as the session's ports, the action worker whose progress arrives as messages, the
outcome logged; and quitting while one runs.

What an action goes through, from its plan to its audited outcome, is written once in
``gpudash.session.lifecycle`` and ``gpudash.session.controller``, for the CLI too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Sequence
from itertools import count
from typing import Any, cast

from textual.app import App
from textual.message import Message
from textual.worker import Worker, WorkerCancelled, WorkerFailed

from gpudash.engine import SPECS, ActionPlan, ActionReport, ActionSpec, Selection
from gpudash.session import lifecycle
from gpudash.session.controller import Running, outcome_line
from gpudash.session.lifecycle import Ended, Ending
from gpudash.ui.keyhold import hold, release
from gpudash.ui.messages import ActionFinished, ActionProgressed
from gpudash.ui.outcome import exit_code
from gpudash.ui.screens import ConfirmModal
from gpudash.ui.state import Dashboard
from gpudash.ui.widgets.action_log import entry_title

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

    def plan(self, spec: ActionSpec, host: int, selection: Selection,
             reason: str | None = None) -> None:
        """Plan ``spec`` for ``selection`` on ``host`` (``reason``: a drain's, in the
        operator's words) and ask for confirmation (the session in
        ``gpudash.session.lifecycle``; this only shows its dialogs)."""
        view = self.state.views[host]
        # What is planned on the snapshot on screen; a start asks the host first.
        request = lifecycle.Request(spec.kind, selection, snapshot=view.snapshot,
                                    reason=reason)
        hold(self.app)  # keys typed while it is planned go to its dialog, never to the table
        self._run(self._plan_and_confirm(request, host), "confirm")

    async def _plan_and_confirm(self, request: lifecycle.Request, host: int) -> None:
        try:
            await self._planned_and_confirmed(request, host)
        finally:  # no dialog opened after all (refused, failed): nobody takes those keys
            release(self.app, False, "no dialog opened")

    async def _planned_and_confirmed(self, request: lifecycle.Request, host: int) -> None:
        view, state = self.state.views[host], self.state
        control = view.source.control
        title = SPECS[request.kind].title_for(request.selection)
        ports = Dialogs(self.app, state)
        plan = await lifecycle.prepare(request, control, view.name, ports, state.settings.models)
        if not isinstance(plan, Ended):
            title = entry_title(plan.kind.value, plan.subject)
            plan = await lifecycle.confirm(plan, control, ports, state.exec_options.term_timeout)
        if not isinstance(plan, Ended) and state.running:
            plan = Ended(Ending.BUSY, "another action is running; not started")
        if isinstance(plan, Ended) and plan.forced is not None and not request.selection.force:
            # a start that does not fit: the operator may start it anyway (its own plan,
            # saying FORCED, is then confirmed as any other)
            if await ports.force(title, plan.said()):
                hold(self.app)
                await self._planned_and_confirmed(plan.forced, host)
                return
            plan = Ended(Ending.DECLINED, "not forced: nothing was done")
        if isinstance(plan, Ended):
            self._ended(view.name, title, plan, asked=ports.asked)
            return
        self.start(plan, host, act=True)

    def _ended(self, host: str, title: str, ended: Ended, *, asked: bool) -> None:
        """An action that ended before anything was sent: said, and logged if it got as
        far as the dialog."""
        if ended.kind in (Ending.NOT_PICKED,):
            return
        if ended.kind is Ending.DECLINED:
            self.state.log_action(host, title, "cancelled: nothing was done", None)
            self.app.notify("Cancelled: nothing was done.")
            return
        if not asked:  # not planned at all: said (over its lines), not logged
            notify = cast(Callable[..., None], self.app.notify)  # GpudashApp's takes lines
            notify(ended.said(), title=title, severity="warning")
            return
        self.state.log_action(host, title, f"not started: {ended.why}", None)
        self.app.notify(f"not started: {ended.why}", title=title, severity="warning")

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
        self.state.log_action(plan.host, entry_title(plan.kind.value, plan.subject),
                              "link is back: re-verifying (nothing is re-sent)", None)
        self.start(plan, host, act=False)

    async def _execute(self, action_id: int, running: Running) -> None:
        """The action worker: the controller audits and runs; this only reports back."""
        outcome = await self.state.controller.run(
            running, self.state.views[running.host].source.control,
            on_progress=lambda p: self._post(ActionProgressed(action_id, p)),
            on_audit_error=lambda why: self.app.notify(why, title="Audit", severity="warning"),
        )
        self._post(ActionFinished(action_id, running.host, running.plan, outcome.report,
                                  outcome.error))

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
            state.log_action(plan.host, entry_title(plan.kind.value, plan.subject),
                             f"failed: {message.error}", False)
            self.app.notify(str(message.error), title="Action failed", severity="error")
            return
        state.log_action(plan.host, entry_title(plan.kind.value, plan.subject),
                         outcome_line(report),
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
        from gpudash.ui.quit import AFTER, KEEP, NOW, QuitWhileActing  # when first asked

        choice = await self.app.push_screen_wait(QuitWhileActing(running.plan.title,
                                                                 running.report.sent_lines()))
        if choice == KEEP:  # the operator said stay, even if it ended meanwhile
            return
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


class Dialogs:
    """The dashboard's ports of the action session: the confirm dialog, the model picker."""

    asks = True

    def __init__(self, app: App[int], state: Dashboard) -> None:
        self.app = app
        self.state = state
        self.asked = False  # the dialog was shown: what ends the action now is logged

    async def confirm(self, plan: ActionPlan, lines: list[str]) -> bool | None:
        self.asked = True
        keys = (self.state.key_of("confirm.yes"), self.state.key_of("confirm.no"),
                self.state.key_of("confirm.escape"))
        confirmed: bool = await self.app.push_screen_wait(ConfirmModal(plan.title, lines, keys))
        return confirmed

    async def force(self, title: str, refusal: list[str]) -> bool:
        """A start that does not fit: start it anyway? (No is the default, as for a kill.)"""
        self.asked = True
        keys = (self.state.key_of("confirm.yes"), self.state.key_of("confirm.no"),
                self.state.key_of("confirm.escape"))
        lines = [f"{title}: force it?", *refusal,
                 "Started anyway, it takes memory others hold: expect it to crash, or them "
                 "to run short. Its plan, marked FORCED, is shown next."]
        answer: bool = await self.app.push_screen_wait(ConfirmModal(title, lines, keys))
        return answer

    async def pick(self, source: str, candidates: Sequence[lifecycle.Candidate],
                   enable: bool) -> lifecycle.Picked | None:
        from gpudash.ui.models import ModelPicker  # with RichLog: loaded when first shown

        picked: lifecycle.Picked | None = await self.app.push_screen_wait(
            ModelPicker(f"Reclaim {source}, then start:", candidates, enable))
        if picked is not None:
            hold(self.app)  # its plan is made next: what is typed meanwhile is the dialog's
        return picked
