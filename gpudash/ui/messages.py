"""Messages from the host and action workers to the app."""

from __future__ import annotations

from textual.message import Message

from gpudash.engine import ActionPlan, ActionReport, Progress


class HostUpdated(Message):
    """A host's view has a new sample (recorded already): redraw it.

    Only the redraw may be merged with a later one: the sample itself was recorded in the
    view before this was posted, so history and triage never miss one.
    """

    def __init__(self, host: int) -> None:
        super().__init__()
        self.host = host

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, HostUpdated) and message.host == self.host


class HostFailed(Message):
    """Reading a host failed; the worker retries after ``retry_in`` seconds (None: never)."""

    def __init__(self, host: int, error: str, retry_in: float | None) -> None:
        super().__init__()
        self.host = host
        self.error = error
        self.retry_in = retry_in


class HostConnecting(Message):
    """The worker is (re)opening the host's stream."""

    def __init__(self, host: int, attempt: int) -> None:
        super().__init__()
        self.host = host
        self.attempt = attempt


class ActionProgressed(Message):
    """The engine reported progress on the running action."""

    def __init__(self, action_id: int, progress: Progress) -> None:
        super().__init__()
        self.action_id = action_id
        self.progress = progress

    def can_replace(self, message: Message) -> bool:
        return (
            isinstance(message, ActionProgressed)
            and message.action_id == self.action_id
            and message.progress.phase == self.progress.phase
        )


class ActionFinished(Message):
    """The action ended: with a report, or with an error that prevented one."""

    def __init__(
        self,
        action_id: int,
        host: int,
        plan: ActionPlan,
        report: ActionReport | None,
        error: str | None = None,
    ) -> None:
        super().__init__()
        self.action_id = action_id
        self.host = host
        self.plan = plan
        self.report = report
        self.error = error
