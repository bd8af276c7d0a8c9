"""docs/gpudash.1: the man page (``man -l docs/gpudash.1``), from the same parsers as
``--help`` and the help screen's keys. Plain man(7) macros; every character that is not
ASCII is written as groff's ``\\[uXXXX]``, so it renders without preconv."""

from __future__ import annotations

from gpudash import __version__
from gpudash.cli.contract import EXIT_CODES_HELP
from gpudash.cli.reference.commands import Command, Group, commands, shared_group
from gpudash.cli.reference.markdown import shown_keys
from gpudash.ui.bindings import KEYS


def roff(text: str) -> str:
    """Running text for roff: backslashes and hyphens escaped, no line taken for a
    request, and only ASCII."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    text = "".join(c if ord(c) < 128 else f"\\[u{ord(c):04X}]" for c in text)
    lines = [("\\&" + ln) if ln.startswith((".", "'")) else ln for ln in text.split("\n")]
    return "\n".join(lines)


def _bold(text: str) -> str:
    return f'.B "{roff(text)}"' if " " in text else f".B {roff(text)}"


def _verbatim(text: str) -> list[str]:
    return [".PP", ".nf", ".RS 4", roff(text), ".RE", ".fi"]


def _options(group: Group) -> list[str]:
    out = []
    for o in group.options:
        out += [".TP", _bold(o.names), roff(o.help)]
    return out


def _command(c: Command, shared: Group) -> list[str]:
    out = [f".SS {roff(c.prog)}", _bold(c.usage), ".PP", roff(c.description)]
    for group in c.groups:
        if group == shared:
            out += [".PP", "and the options of", ".BR \"HOSTS AND CONNECTION\" ."]
            continue
        out += _options(group)
    if c.examples:
        out += [".PP", "Examples:", *_verbatim(c.examples)]
    if c.epilog:
        out += _verbatim(c.epilog)
    return out


_FILES = [
    ("$XDG_CONFIG_HOME/gpudash/config.toml",
     "Settings: every key optional, a flag on the command line wins over it "
     "(~/.config/gpudash/config.toml)."),
    ("$XDG_CONFIG_HOME/gpudash/keymap.toml",
     "Key bindings by id (\"gpudash.reclaim\" = \"ctrl+r\")."),
    ("$XDG_CONFIG_HOME/gpudash/themes/*.toml", "More themes."),
    ("$XDG_STATE_HOME/gpudash/audit.jsonl",
     "The audit trail: an intent record before anything is sent, an outcome record after "
     "(~/.local/state/gpudash; the demo's: audit-demo.jsonl)."),
    ("$XDG_STATE_HOME/gpudash/gpudash.log", "Unexpected errors with their traceback."),
    ("$XDG_STATE_HOME/gpudash/footprints.json",
     "What each model took, per GPU, and how long its stop took."),
    ("$XDG_STATE_HOME/gpudash/ui.json", "The theme last chosen with T."),
    ("/etc/systemd/system/UNIT.d/50-gpudash.conf", "The drop-in gpudash fix writes."),
]


def man_page() -> str:
    shared = shared_group()
    cmds = commands()
    dashboard, subcommands = cmds[0], cmds[1:]
    out = [
        ".\\\" Generated from gpudash/cli/args.py and gpudash/ui/bindings.py by",
        ".\\\" `python -m gpudash.cli.reference`: do not edit by hand.",
        f'.TH GPUDASH 1 "" "gpudash {__version__}" "User Commands"',
        ".nh",  # no hyphenation: option names are words to type
        ".SH NAME",
        "gpudash \\- who holds the GPU memory, which systemd unit owns it, and getting it "
        "back with proof",
        ".SH SYNOPSIS",
    ]
    for c in cmds:
        out += [_bold(c.usage), ".br"]
    out += [".SH DESCRIPTION", roff(dashboard.description), ".PP",
            roff("A keyboard-driven terminal dashboard for multi-GPU inference hosts, "
                 "local or over SSH: which process, unit, container or session holds "
                 "each GPU's memory, which are orphaned and why, and the actions that get "
                 "it back, each planned, confirmed and proven."),
            ".SH OPTIONS"]
    for group in dashboard.groups:
        if group != shared:
            out += _options(group)
    if dashboard.examples:
        out += [".PP", "Examples:", *_verbatim(dashboard.examples)]
    out += [".SS HOSTS AND CONNECTION", roff("The same for every command that reaches "
                                             "hosts."), *_options(shared)]
    out += [".SH COMMANDS"]
    for c in subcommands:
        out += _command(c, shared)
    out += [".SH KEYS", roff("In the dashboard (? shows them as your keymap has them):")]
    for k in KEYS:
        if k.help and k.where in ("main", "holders", "app"):
            keys = k.help_keys or (shown_keys(k.keys) if k.action else k.keys)
            out += [".TP", _bold(keys), roff(k.help)]
    out += [".SH EXIT STATUS", *_verbatim(EXIT_CODES_HELP)]
    out += [".SH FILES"]
    for path, what in _FILES:
        out += [".TP", f".I {roff(path)}", roff(what)]
    out += [".SH ENVIRONMENT",
            ".TP", ".B XDG_CONFIG_HOME", roff("Where the settings are (default ~/.config)."),
            ".TP", ".B XDG_STATE_HOME",
            roff("Where the audit trail, the log and what gpudash learned are "
                 "(default ~/.local/state)."),
            ".SH SEE ALSO",
            roff("ssh(1), ssh_config(5), systemctl(1), systemd.kill(5), nvidia-smi(1). "
                 "The guide, the triage rules, the security design and the reference "
                 "pages: docs/ in gpudash's source."),
            ""]
    return "\n".join(out)
