"""Shared test set-up: every test runs with its own XDG dirs, so no test reads or
writes the developer's config, state or audit file."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

# The signals a terminal delivers, as a terminal's shell leaves them. A suite started in
# the background of a script (`cmd &`, job control off) or under nohup inherits SIGINT,
# SIGQUIT (and SIGHUP) ignored, and so does every process a test starts: Python then
# installs no handler of its own, and the tests of Ctrl+C, of a hung-up terminal and of
# nvidia-smi's loop sent signals nothing heard (seen here in every run started so).
for _sig, _default in ((signal.SIGINT, signal.default_int_handler),
                       (signal.SIGQUIT, signal.SIG_DFL), (signal.SIGHUP, signal.SIG_DFL)):
    if signal.getsignal(_sig) is signal.SIG_IGN:
        signal.signal(_sig, _default)


@pytest.fixture(autouse=True)
def _isolated_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        d = tmp_path / "xdg" / var.lower()
        d.mkdir(parents=True)
        monkeypatch.setenv(var, str(d))


@pytest.fixture(autouse=True)
def _gpudash_logger_as_found() -> Iterator[None]:
    """The ``gpudash`` logger back as the test found it. The CLI run in-process sends it
    to its log file and stops it propagating (``state/logfile.setup``); a test after it in
    the same process then saw nothing in ``caplog`` (seen once pytest-xdist ordered
    test_slurm_drain before test_footprints)."""
    import logging

    logger = logging.getLogger("gpudash")
    handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
    yield
    for handler in [h for h in logger.handlers if h not in handlers]:
        logger.removeHandler(handler)
        handler.close()
    logger.setLevel(level)
    logger.propagate = propagate


# Shared fixtures of the test infrastructure (the stand-in driver, the sshd, the lab, the
# real vLLM in the lab).
pytest_plugins = ["fakegpu.fixtures", "lab.fixtures", "realvllm.fixtures"]


# An async test must not leave a task behind that ignores being cancelled: pytest-asyncio
# would wait for it at the loop's close for ever (a whole CI run hung so). Such a task is
# named here, with where it waits, and the test fails.
STUCK_AFTER_S = 15.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    import inspect

    for item in items:
        if inspect.iscoroutinefunction(getattr(item, "function", None)):
            item.add_marker(pytest.mark.usefixtures("_no_task_left_stuck"))


@pytest.fixture
async def _no_task_left_stuck():  # type: ignore[no-untyped-def]
    import asyncio
    import io

    yield
    me = asyncio.current_task()
    left = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
    for t in left:
        t.cancel()
    if not left:
        return
    _done, stuck = await asyncio.wait(left, timeout=STUCK_AFTER_S)
    if stuck:
        out = io.StringIO()
        for t in stuck:
            t.print_stack(file=out)
        sys.__stderr__.write(f"\n{len(stuck)} task(s) ignore cancellation:\n{out.getvalue()}")
        sys.__stderr__.flush()
        pytest.fail(f"{len(stuck)} task(s) left behind ignore cancellation: "
                    + out.getvalue()[-3000:])
