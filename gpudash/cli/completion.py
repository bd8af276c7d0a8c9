"""Shell completion for bash, zsh and fish, by argcomplete (``gpudash completion SHELL``).

The command line is one parser per subcommand (``args.build_parser``); completion sees
them as the subparsers of one, so subcommands, options and their choices complete as
``gpudash -h`` and ``gpudash COMMAND -h`` list them. Hosts complete from the ssh config's
concrete ``Host`` names and config.toml's groups (``@prod``); units from what gpudash has
seen on the hosts named (footprints, the audit), and the demo's with ``--demo``. Nothing
is asked of any host: a completion never connects.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import argcomplete
from argcomplete.shell_integration import shellcode

from gpudash.cli.args import SUBCOMMANDS, build_parser

UNIT_DESTS = ("unit", "from_unit", "to_unit")


def host_names(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """Hosts to complete: the ssh config's concrete ones, and ``@GROUP``s."""
    from gpudash.state import config
    from gpudash.transport.selection import is_glob, ssh_config_hosts

    try:
        names = [h for h in ssh_config_hosts(getattr(parsed_args, "ssh_config", None))
                 if not is_glob(h)]
    except (OSError, ValueError):
        names = []
    names += [f"@{g}" for g in config.load()[0].groups]
    return [n for n in names if n.startswith(prefix)]


def unit_names(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """Units to complete (without ``.service``): those gpudash learned on the hosts named
    (all hosts, where none is), and the demo's incident units with ``--demo``."""
    from gpudash.state import footprints

    demo = bool(getattr(parsed_args, "demo", False))
    store, _problems = footprints.load(footprints.store_path(simulated=demo))
    hosts = set(getattr(parsed_args, "hosts", None) or ())
    units = {u for host, entries in store.items() if not hosts or host in hosts
             for u in entries}
    if demo:
        from gpudash.demo import incident

        units |= {incident.MINIMAX, incident.KIMI, incident.DEEPSEEK, incident.RERANK}
    names = sorted({u.removesuffix(".service") for u in units})
    return [n for n in names if n.startswith(prefix)]


def _completers(parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:
        if action.dest == "hosts":
            action.completer = host_names  # type: ignore[attr-defined]
        elif action.dest in UNIT_DESTS:
            action.completer = unit_names  # type: ignore[attr-defined]


def completion_parser() -> argparse.ArgumentParser:
    top = build_parser(None)
    _completers(top)
    sub = top.add_subparsers(dest="command")
    for name in SUBCOMMANDS:
        one = sub.add_parser(name, parents=[build_parser(name)], add_help=False,
                             conflict_handler="resolve", help=f"gpudash {name} -h")
        _completers(one)
    return top


def complete_if_asked() -> None:
    """Answer the shell's completion request and exit, when this run is one."""
    if "_ARGCOMPLETE" in os.environ:
        argcomplete.autocomplete(completion_parser())


def script(shell: str) -> str:
    """The script that makes ``shell`` complete gpudash (source it, or put it where the
    shell loads completions from)."""
    return shellcode(["gpudash"], shell=shell)
