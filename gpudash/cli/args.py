"""Command-line arguments, checked before anything is contacted or done (exit 2 if bad)."""

from __future__ import annotations

import argparse
import difflib
import math
import textwrap
from collections.abc import Callable
from pathlib import Path

from gpudash import __version__
from gpudash.cli.contract import EXIT_CODES_HELP, Exit
from gpudash.cli.helptext import DESCRIPTIONS, EXAMPLES
from gpudash.cli.promargs import add_prometheus, check_prometheus
from gpudash.cli.targets import acted_on
from gpudash.demo.incident import MAX_DEMO_HOSTS  # names only: the demo loads on --demo
from gpudash.domain.model import unit_name
from gpudash.state import config
from gpudash.state.logfile import LEVELS

SUBCOMMANDS = ("snapshot", "reclaim", "reap", "start", "swap", "fix", "reset", "drain",
               "resume", "exporter", "history", "report", "completion")
# they act (and ask first); one host at a time but reap
ACTING = ("reclaim", "reap", "start", "swap", "fix", "reset", "drain", "resume")
ONE_HOST = ("reclaim", "start", "swap", "fix", "reset", "drain", "resume")
NODE = ("drain", "resume")  # the host's Slurm node: they free no memory, signal nothing


def seconds(low: float, high: float, *, low_inclusive: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds in (low, high] (or [low, high])."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        above = value >= low if low_inclusive else value > low
        if not math.isfinite(value) or not above or value > high:
            bound = ">=" if low_inclusive else ">"
            raise argparse.ArgumentTypeError(f"must be {bound} {low:g} and <= {high:g} seconds, "
                                             f"not {text}")
        return value

    return parse


def _span(text: str) -> float:
    from gpudash.session.history import parse_span

    try:
        return parse_span(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _demo_hosts(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of hosts: {text!r}") from None
    if not 1 <= value <= MAX_DEMO_HOSTS:
        raise argparse.ArgumentTypeError(f"must be 1 to {MAX_DEMO_HOSTS}, not {value}")
    return value


DEMO_SPEED_RANGE = (0.1, 1000.0)


def _demo_speed(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a speed: {text!r}") from None
    low, high = DEMO_SPEED_RANGE
    if not math.isfinite(value) or not low <= value <= high:
        raise argparse.ArgumentTypeError(f"must be {low:g} to {high:g}, not {text}")
    return value


def _common(parser: argparse.ArgumentParser) -> None:
    """The hosts and how to reach them: one group, the same in every command's help,
    after the command's own options."""
    p = parser.add_argument_group("hosts and connection (the same for every command)")
    p.add_argument("hosts", nargs="*", metavar="HOST",
                   help="user@host, ssh://user@host:port or a ~/.ssh/config alias; a glob "
                   "('gpu*') means every concrete Host of the ssh config it matches; "
                   "@GROUP: the hosts of [groups] GROUP in config.toml; none: this machine")
    p.add_argument("--hosts-file", type=Path, default=None, metavar="FILE",
                   help="more hosts, one per line ('#' starts a comment; globs as above)")
    p.add_argument("--demo", action="store_true", help="the simulated incident host")
    p.add_argument("--demo-hosts", type=_demo_hosts, default=None, metavar="N",
                   help="with --demo: N simulated hosts (healthy, the incident, "
                   "unreachable, ...) for the fleet view")
    p.add_argument("--demo-speed", type=_demo_speed, default=None, metavar="X",
                   help="with --demo: simulated seconds per real one (default 1 on the "
                   "dashboard, 20 for a command that acts; 0.1 to 1000)")
    p.add_argument("--interval", type=seconds(*config.INTERVAL_RANGE, low_inclusive=True),
                   default=1.0,
                   metavar="S", help="seconds between samples (default 1; 0.05 to 3600)")
    p.add_argument("--sudo", action=argparse.BooleanOptionalAction, default=False,
                   help="act through `sudo -n` when the login is not root")
    p.add_argument("--accept-new-host-key", action=argparse.BooleanOptionalAction,
                   default=False,
                   help="accept and remember an unknown host key (like OpenSSH accept-new); "
                   "a changed key is always refused")
    p.add_argument("--ssh-config", type=Path, default=None, metavar="FILE",
                   help="ssh config file (default ~/.ssh/config)")
    p.add_argument("--known-hosts", type=Path, default=None, metavar="FILE",
                   help="known_hosts file (default: as OpenSSH, from the ssh config)")
    p.add_argument("--log-level", choices=LEVELS, default="warning",
                   help="what goes to $XDG_STATE_HOME/gpudash/gpudash.log (default warning)")


def _snapshot_parser() -> argparse.ArgumentParser:
    epilog = EXAMPLES["snapshot"] + "\n\n" + EXIT_CODES_HELP
    fmt = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(prog="gpudash snapshot", epilog=epilog, formatter_class=fmt,
                                description="Print one snapshot of each host.")
    # the schema's number is render.jsondoc.SCHEMA (not imported to build a parser: a
    # test holds the two together)
    p.add_argument("--json", action="store_true",
                   help="JSON (schema 3: docs/reference/JSON.md) instead of text")
    add_prometheus(p)
    _common(p)
    return p


def _completion_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(
        prog="gpudash completion", formatter_class=fmt,
        description="Print the shell completion script (argcomplete). bash: "
        "`eval \"$(gpudash completion bash)\"` in ~/.bashrc; zsh: the same in ~/.zshrc; "
        "fish: `gpudash completion fish > ~/.config/fish/completions/gpudash.fish`.")
    p.add_argument("shell", choices=("bash", "zsh", "fish"))
    p.add_argument("--log-level", choices=LEVELS, default="warning",
                   help=argparse.SUPPRESS)
    return p


def _audit_args(p: argparse.ArgumentParser) -> None:
    """What history and report read from the audit: which hosts, since when, the demo's."""
    p.add_argument("hosts", nargs="*", metavar="HOST",
                   help="only these hosts (names or globs, as the audit names them)")
    p.add_argument("--since", type=_span, default=None, metavar="SPAN",
                   help="only actions started within SPAN (30m, 2h, 1d, 1w)")
    p.add_argument("--demo", action="store_true",
                   help="the demo's actions (audit-demo.jsonl)")


def _history_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(
        prog="gpudash history", formatter_class=fmt,
        description="What was done, from the audit file: who did what on which host, "
        "the verdict, GiB back per GPU, how long each phase took.")
    _audit_args(p)
    p.add_argument("--json", action="store_true", help="JSON instead of text")
    p.add_argument("--log-level", choices=LEVELS, default="warning",
                   help=argparse.SUPPRESS)
    return p


def _report_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(
        prog="gpudash report", formatter_class=fmt,
        description="The incident's story: each action of the audit and its verdict "
        "beside each GPU's memory over the same seconds; as text, or a picture to paste "
        "into a hand-off or a postmortem.")
    _audit_args(p)
    out = p.add_mutually_exclusive_group()
    out.add_argument("--svg", type=Path, default=None, metavar="FILE",
                     help="write the report as an SVG picture to FILE")
    out.add_argument("--html", type=Path, default=None, metavar="FILE",
                     help="write the report as an HTML page to FILE")
    out.add_argument("--json", action="store_true",
                     help="JSON (history's, with each action's memory series)")
    p.add_argument("--log-level", choices=LEVELS, default="warning",
                   help=argparse.SUPPRESS)
    return p


def _exporter_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    from gpudash.cli.exporter import EXIT_HELP, listen_address

    p = argparse.ArgumentParser(prog="gpudash exporter", epilog=EXIT_HELP,
                                formatter_class=fmt,
                                description=textwrap.fill(DESCRIPTIONS["exporter"], 79))
    p.add_argument("--listen", type=listen_address, default=None, metavar="HOST:PORT",
                   help="serve /metrics here (default 127.0.0.1:9835, unless only "
                   "--textfile is given; port 0 picks a free port)")
    p.add_argument("--textfile", type=Path, default=None, metavar="DIR",
                   help="also write DIR/gpudash.prom every interval, atomically "
                   "(node_exporter's textfile collector)")
    p.add_argument("--web.config.file", dest="web_config", type=Path, default=None,
                   metavar="FILE", help="TLS and basic auth (bcrypt) for /metrics, in "
                   "the Prometheus exporters' web config format (as node_exporter)")
    p.add_argument("--insecure-listen", action="store_true",
                   help="allow --listen off loopback without --web.config.file: plain "
                   "HTTP, no auth")
    _common(p)
    return p


def _acting_parser(command: str) -> argparse.ArgumentParser:
    epilog = EXAMPLES[command] + "\n\n" + EXIT_CODES_HELP
    fmt = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(prog=f"gpudash {command}", epilog=epilog,
                                formatter_class=fmt,
                                description=textwrap.fill(DESCRIPTIONS[command], 79))
    acted_on(p, command)
    if command in ("start", "swap"):
        p.add_argument("--enable", action=argparse.BooleanOptionalAction, default=None,
                       help="enable the started unit (start it at boot); default: start "
                       "does not, swap does where the unit it replaces is enabled")
        p.add_argument("--leave-crashing", action="store_true",
                       help="do not stop a unit that crash-loops while starting")
        p.add_argument("--force", action="store_true",
                       help="start even when the fit check says it will not fit (the "
                       "plan says it was forced)")
        p.add_argument("--ready-url", default=None, metavar="URL",
                       help="what proves it serves, asked on the host (default: "
                       "http://127.0.0.1:PORT/health, PORT from the unit's ExecStart)")
    if command in ("reclaim", "start", "swap", "reset", *NODE):
        p.add_argument("--dry-run", action="store_true",
                       help="print the plan (stdout; with --json, as JSON) and send nothing")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.add_argument("--no-audit", action="store_true",
                   help="act even if the audit record cannot be written (the report "
                   "says it was not audited); without it such an action is refused "
                   "(exit 7)")
    freeing = command in ("reclaim", "reap", "reset")
    default = (120.0 if freeing else 60.0 if command == "fix" else 30.0 if command in NODE
               else 1800.0)
    p.add_argument("--timeout", type=seconds(0, 86400), default=default, metavar="S",
                   help=f"give up after S seconds (default {default:g}: "
                   + ("memory back)" if freeing else
                      "systemctl show reports the fix)" if command == "fix" else
                      "scontrol show node reports it)" if command in NODE else
                      "a big model loads for 10+ minutes)"))
    if command not in ("fix", "reset", *NODE):  # they signal nothing
        p.add_argument("--term-timeout", type=seconds(0, 3600), default=10.0, metavar="S",
                       help="seconds between SIGTERM and SIGKILL (default 10)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    _common(p)
    return p


def _dashboard_parser() -> argparse.ArgumentParser:
    epilog = EXAMPLES[""] + "\n\n" + EXIT_CODES_HELP
    fmt = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(
        prog="gpudash", epilog=epilog, formatter_class=fmt,
        description="Who holds the GPU memory, which systemd unit owns it, and getting it "
        "back with proof. Subcommands: " + ", ".join(SUBCOMMANDS) + " (see "
        "`gpudash COMMAND -h`).",
    )
    p.add_argument("--read-only", action=argparse.BooleanOptionalAction, default=False,
                   help="disable every action")
    p.add_argument("--theme", default=None, help="a Textual theme or one from themes/")
    p.add_argument("--version", action="version", version=f"gpudash {__version__}")
    add_prometheus(p)
    _common(p)
    return p


def build_parser(command: str | None) -> argparse.ArgumentParser:
    """The parser of one subcommand (None: the dashboard's)."""
    if command in ACTING:
        return _acting_parser(command)
    return {"snapshot": _snapshot_parser, "completion": _completion_parser,
            "history": _history_parser, "report": _report_parser,
            "exporter": _exporter_parser}.get(
        command or "", _dashboard_parser)()


def _mistyped(argv: list[str]) -> str | None:
    """``gpudash histroy``: the subcommand meant, when the first word is not one and looks
    like one rather than a host (no user@, port, dots, slashes or glob)."""
    if not argv or argv[0] in SUBCOMMANDS or argv[0].startswith("-"):
        return None
    word = argv[0]
    if any(c in word for c in "@:./*?[") or not word.isalpha():
        return None
    close = difflib.get_close_matches(word.lower(), SUBCOMMANDS, n=1, cutoff=0.6)
    return close[0] if close else None


def _with_settings(parser: argparse.ArgumentParser, settings: config.Settings) -> None:
    """The config file's defaults, for the options this parser has (flags win)."""
    dests = {a.dest for a in parser._actions}
    parser.set_defaults(**{k: v for k, v in settings.defaults().items() if k in dests})


def _expand_groups(hosts: list[str], settings: config.Settings,
                   parser: argparse.ArgumentParser) -> list[str]:
    out: list[str] = []
    for host in hosts:
        if not host.startswith("@"):
            out.append(host)
            continue
        name = host[1:]
        if name not in settings.groups:
            known = ", ".join(f"@{g}" for g in sorted(settings.groups)) or "none"
            parser.error(f"no host group {host} in {config.config_path()} "
                         f"([groups] {name} = [...]; groups there: {known})")
        out += [h for h in settings.groups[name] if h not in out]
    return out


def parse(argv: list[str]) -> tuple[str | None, argparse.Namespace]:
    """(subcommand or None for the dashboard, arguments); argparse exits 2 on bad input.

    The config file's settings are the defaults; its problems are in
    ``args.config_errors`` (one line each) for the front end to say."""
    command = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    parser = build_parser(command)
    meant = _mistyped(argv)
    if meant is not None:
        parser.error(f"{argv[0]!r} is not a command (did you mean {meant!r}?); "
                     f"for a host of that name: gpudash -- {argv[0]}")
    if command is None and argv and argv[0] in FLAG_WORDS:  # `gpudash demo`: SSH to "demo"
        parser.error(f"{argv[0]!r} is not a command (did you mean --{argv[0]}?); "
                     f"for a host of that name: gpudash -- {argv[0]}")
    settings, problems = config.load()
    _with_settings(parser, settings)
    closed = [] if command in LOCAL_ONLY else [p for p in problems if p.fails_closed]
    dests = {a.dest for a in parser._actions}
    for problem in closed:  # given on the command line, the flag decides for this run
        name = problem.key if problem.key in config.SAFETY else problem.near_safety
        if name in dests:
            parser.set_defaults(**{name: _UNSET})
    args = parser.parse_args(argv[1:] if command else argv)
    _refuse_unsafe(parser, args, closed, dests)
    args.config_errors, args.settings = [str(p) for p in problems], settings
    if command in LOCAL_ONLY:
        return command, args
    _check_hosts(command, args, settings, parser)
    _check_targets(command, args, parser)
    check_prometheus(args, problems, parser)
    return command, args


# The dashboard's flags a first word may be meant as (``gpudash demo``): never a host
FLAG_WORDS = ("demo", "help", "version")
# Commands that read only this machine's files: a broken setting of the hosts' is no reason
# to refuse them (completion runs in every new shell).
LOCAL_ONLY = ("history", "report", "completion")
_UNSET = object()  # a setting the file got wrong and the command line did not give


def _refuse_unsafe(parser: argparse.ArgumentParser, args: argparse.Namespace,
                   closed: list[config.Problem], dests: set[str]) -> None:
    """Exit 2 over a settings problem that would fail open, unless the command line gave
    the setting in question (a file that cannot be parsed is refused whatever is given)."""
    left: list[str] = []
    for problem in closed:
        name = problem.key if problem.key in config.SAFETY else problem.near_safety
        if problem.key is None:  # the whole file: nothing in it can be trusted
            left.append(str(problem))
        elif name is not None and name in dests and getattr(args, name) is _UNSET:
            flag = name.replace("_", "-")
            given = f"--{flag} or --no-{flag}" if name in BOOLEAN_SAFETY else f"--{flag} FILE"
            left.append(f"{problem} ({given} decides for one run)")
    if left:
        parser.exit(2, f"{parser.prog}: error: a setting that would fail open, refused "
                    "(nothing was done):\n  " + "\n  ".join(left) + "\n")


BOOLEAN_SAFETY = ("read_only", "sudo", "accept_new_host_key")


def _check_hosts(command: str | None, args: argparse.Namespace, settings: config.Settings,
                 parser: argparse.ArgumentParser) -> None:
    """Groups and globs expanded; as many hosts as the subcommand takes."""
    if any(h.startswith("@") for h in args.hosts):
        args.hosts = _expand_groups(args.hosts, settings, parser)
    if args.demo_hosts is not None:
        if command in ONE_HOST and args.demo_hosts > 1:
            parser.error(f"{command} acts on one host at a time")
        args.demo = True  # --demo-hosts N is the demo, N hosts of it
    if args.demo_speed is not None and not args.demo:
        parser.error("--demo-speed is for --demo")
    if args.demo and (args.hosts or args.hosts_file):
        parser.error("--demo takes no HOST")
    if args.hosts_file is not None or any(c in h for h in args.hosts for c in "*?["):
        from gpudash.transport.selection import HostSelectionError, select_hosts
        from gpudash.transport.sshconfig import UnsafeSshConfig

        try:
            args.hosts = select_hosts(args.hosts, args.hosts_file, args.ssh_config)
        except HostSelectionError as exc:
            parser.error(str(exc))
        except UnsafeSshConfig as exc:  # refused as a connection would be: exit 3
            parser.exit(Exit.CONNECT, f"{parser.prog}: {exc}\n")
    if command in ONE_HOST and len(args.hosts) > 1:
        parser.error(f"{command} acts on one host at a time")
    if command == "exporter" and (twice := sorted({h for h in args.hosts
                                                   if args.hosts.count(h) > 1})):
        parser.error(f"HOST named more than once: {', '.join(twice)}")


def _check_targets(command: str | None, args: argparse.Namespace,
                   parser: argparse.ArgumentParser) -> None:
    """What the subcommand acts on makes sense before anything is contacted."""
    if command == "swap" and args.from_unit is not None and (
            unit_name(args.from_unit) == unit_name(args.to_unit)):
        parser.error("--from and --to name the same unit: use start or restart")
    if command == "fix":
        from gpudash.transport.commands import validate_unit

        try:
            validate_unit(unit_name(args.unit))
        except ValueError as exc:
            parser.error(f"--unit: {exc}")
        if not unit_name(args.unit).endswith(".service"):
            parser.error(f"--unit: gpudash fixes services only, not {args.unit!r}")
    if command == "start" and getattr(args, "container", None) is not None:
        from gpudash.transport.commands import validate_container

        try:
            validate_container(args.container)
        except ValueError as exc:
            parser.error(f"--container: {exc}")
    if getattr(args, "from_container", None) is not None:
        from gpudash.transport.commands import validate_container

        try:
            validate_container(args.from_container)
        except ValueError as exc:
            parser.error(f"--from-container: {exc}")
