"""The command line: ``gpudash``, ``gpudash snapshot``, ``gpudash reclaim``."""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence

from gpudash.cli.contract import Exit

__all__ = ["Exit", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """The ``gpudash`` entry point: Ctrl+C or SIGTERM while it loads is exit 5, not a
    traceback or a kill."""
    try:  # SIGTERM too: the subcommands treat it as a Ctrl+C (gpudash.cli.main)
        previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    except ValueError:  # not the main thread
        previous = None
    try:
        from gpudash.cli.main import main as run
    except KeyboardInterrupt:
        sys.stderr.write("gpudash: interrupted while starting: nothing done\n")
        return Exit.CANCELLED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return run(argv)
