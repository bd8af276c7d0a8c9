"""What the end-to-end tests look for on a lab host: the incident's processes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_host(pred: Callable[[], T], timeout: float = 15.0, what: str = "condition") -> T:
    """Poll ``pred`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def workers(host: Any) -> list[int]:
    """The vLLM TP workers' pids (container pid namespace)."""
    return list(host.pids_of(r"VLLM::Worker_TP[0-7] "))


def alice_pid(host: Any) -> int:
    """alice's kernel (right after boot its launcher may briefly match as well)."""

    def one() -> list[int] | None:
        pids = [p for p in host.pids_of(r"python3 -m ipykernel_launcher")
                if (info := host.proc(p)) is not None
                and info["user"] == "alice" and info["comm"] == "python3"]
        return pids if len(pids) == 1 else None

    [pid] = wait_host(one, what="alice's kernel")
    return pid
