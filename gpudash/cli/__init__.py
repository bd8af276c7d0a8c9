"""The command line: ``gpudash``, ``gpudash snapshot``, ``gpudash reclaim``."""

from gpudash.cli.contract import Exit
from gpudash.cli.main import main

__all__ = ["Exit", "main"]
