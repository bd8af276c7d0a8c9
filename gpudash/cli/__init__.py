"""The command line: ``gpudash``, ``gpudash snapshot``, ``gpudash reclaim``."""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence

from gpudash.cli.contract import Exit

__all__ = ["Exit", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """The ``gpudash`` entry point: Ctrl+C, SIGTERM or SIGHUP while it loads is exit 5, not a
    traceback or a kill."""
    previous = {}
    try:  # SIGTERM and SIGHUP too: the subcommands treat them as a Ctrl+C (gpudash.cli.main)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, signal.default_int_handler)
    except ValueError:  # not the main thread
        pass
    try:
        from gpudash.cli import lazy_openssl

        lazy_openssl.defer()  # before asyncio is imported: OpenSSL only where it is used
        from gpudash.cli.main import main as run
    except KeyboardInterrupt:
        sys.stderr.write("gpudash: interrupted while starting: nothing done\n")
        return Exit.CANCELLED
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return run(argv)
