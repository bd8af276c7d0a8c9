"""Messages from the host and action workers to the app."""

from __future__ import annotations

from textual.message import Message

from gpudash.engine import ActionPlan, ActionReport, Progress
from gpudash.model import HostSnapshot
from gpudash.triage import HostTriage


class SnapshotArrived(Message):
    """A host sent a new snapshot (already triaged against the previous one)."""

    def __init__(
        self, host: int, snapshot: HostSnapshot, triage: HostTriage, latency: float | None
    ) -> None:
        super().__init__()
        self.host = host
        self.snapshot = snapshot
        self.triage = triage
        self.latency = latency

    def can_replace(self, message: Message) -> bool:
        # Only the latest snapshot of a host matters to the screen.
        return isinstance(message, SnapshotArrived) and message.host == self.host


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
