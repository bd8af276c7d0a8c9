"""The command line as data, read from the parsers ``gpudash --help`` prints: each command's
usage, description, option groups and examples, for the CLI page and the man page.

Rendered without argparse's help formatter (its wrapping follows the terminal, and its
layout changes between Python versions): what a page shows depends on the parsers only.
"""

from __future__ import annotations

import argparse
import textwrap

from gpudash.cli.args import SUBCOMMANDS, build_parser
from gpudash.cli.contract import EXIT_CODES_HELP
from gpudash.cli.helptext import EXAMPLES
from gpudash.record import record

# The group every command that reaches hosts shares (``args._common``): shown once.
SHARED_PREFIX = "hosts and connection"
_WIDE = 10_000  # usage on one line: a page wraps it, not argparse


@record
class Option:
    names: str  # ``--interval S``, ``--sudo, --no-sudo``, ``HOST ...``
    help: str


@record
class Group:
    title: str
    options: tuple[Option, ...]

    @property
    def shared(self) -> bool:
        return self.title.startswith(SHARED_PREFIX)


@record
class Command:
    name: str  # "" for the dashboard, else the subcommand
    prog: str  # ``gpudash snapshot``
    usage: str  # one line, without "usage: "
    description: str  # one paragraph
    groups: tuple[Group, ...]
    examples: str  # the ``examples:`` block of its help ("" if none)
    epilog: str  # the rest of its help's epilog, when not the common exit codes
    exit_codes: bool  # its help ends with the common exit codes (``EXIT_CODES_HELP``)


def commands() -> list[Command]:
    """The dashboard's command, then each subcommand's, in ``SUBCOMMANDS`` order."""
    return [command(name) for name in ("", *SUBCOMMANDS)]


def command(name: str) -> Command:
    parser = build_parser(name or None)
    usage = _usage(parser)
    groups = tuple(g for g in (_group(parser, group) for group in parser._action_groups)
                   if g.options)
    examples = EXAMPLES.get(name, "")
    epilog = (parser.epilog or "").replace(EXIT_CODES_HELP, "")
    if examples:
        epilog = epilog.replace(examples, "")
    return Command(name, parser.prog, usage, " ".join((parser.description or "").split()),
                   groups, textwrap.dedent(examples.removeprefix("examples:\n")),
                   epilog.strip(),
                   EXIT_CODES_HELP in (parser.epilog or ""))


def shared_group() -> Group:
    """The hosts-and-connection options, as the dashboard's parser has them."""
    [group] = [g for g in command("").groups if g.shared]
    return group


def _usage(parser: argparse.ArgumentParser) -> str:
    """argparse's usage line, the shared options (shown once, on their own) as one word."""
    shared = [a for g in parser._action_groups if (g.title or "").startswith(SHARED_PREFIX)
              for a in g._group_actions if a.option_strings]
    actions = [a for a in parser._actions if a not in shared]
    groups = [g for g in parser._mutually_exclusive_groups
              if not any(a in shared for a in g._group_actions)]
    formatter = argparse.HelpFormatter(parser.prog, width=_WIDE)
    formatter.add_usage(parser.usage, actions, groups, prefix="")
    usage = " ".join(formatter.format_help().split())
    return f"{usage} [connection options]" if shared else usage


def _group(parser: argparse.ArgumentParser, group: argparse._ArgumentGroup) -> Group:
    options = tuple(Option(_names(a), _help(parser, a)) for a in group._group_actions
                    if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction))
    return Group(group.title or "", options)


def _metavar(action: argparse.Action) -> str:
    if isinstance(action.metavar, str):
        return action.metavar
    if action.choices is not None:
        return "{" + ",".join(str(c) for c in action.choices) + "}"
    return action.dest.upper() if action.option_strings else action.dest


def _names(action: argparse.Action) -> str:
    meta = _metavar(action)
    if not action.option_strings:
        return f"{meta} ..." if action.nargs in ("*", "+") else meta
    names = ", ".join(action.option_strings)
    return names if action.nargs == 0 else f"{names} {meta}"


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    text = action.help or ""
    # Python before 3.13 appends this to a BooleanOptionalAction's help: not a fact of ours
    text = text.removesuffix(" (default: %(default)s)")
    params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
    params["prog"] = parser.prog
    if action.choices is not None:
        params["choices"] = ", ".join(str(c) for c in action.choices)
    return " ".join((text % params).split())
