"""The command line: ``gpudash``, ``gpudash snapshot``, ``gpudash reclaim``."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from gpudash.cli.contract import Exit

__all__ = ["Exit", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """The ``gpudash`` entry point: a Ctrl+C while it loads is exit 5, not a traceback."""
    try:
        from gpudash.cli.main import main as run
    except KeyboardInterrupt:
        sys.stderr.write("gpudash: interrupted while starting: nothing done\n")
        return Exit.CANCELLED
    return run(argv)
