"""Shell completion for bash, zsh and fish, by argcomplete (``gpudash completion SHELL``).

The command line is one parser per subcommand (``args.build_parser``); completion sees
them as the subparsers of one, so subcommands, options and their choices complete as
``gpudash -h`` and ``gpudash COMMAND -h`` list them.
"""

from __future__ import annotations

import argparse
import os

import argcomplete
from argcomplete.shell_integration import shellcode

from gpudash.cli.args import SUBCOMMANDS, build_parser


def completion_parser() -> argparse.ArgumentParser:
    top = build_parser(None)
    sub = top.add_subparsers(dest="command")
    for name in SUBCOMMANDS:
        sub.add_parser(name, parents=[build_parser(name)], add_help=False,
                       conflict_handler="resolve", help=f"gpudash {name} -h")
    return top


def complete_if_asked() -> None:
    """Answer the shell's completion request and exit, when this run is one."""
    if "_ARGCOMPLETE" in os.environ:
        argcomplete.autocomplete(completion_parser())


def script(shell: str) -> str:
    """The script that makes ``shell`` complete gpudash (source it, or put it where the
    shell loads completions from)."""
    return shellcode(["gpudash"], shell=shell)
