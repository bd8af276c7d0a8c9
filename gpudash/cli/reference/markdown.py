"""docs/reference/KEYS.md (from ``ui.bindings``) and docs/reference/CLI.md (from the
parsers of ``cli.args``), as Markdown."""

from __future__ import annotations

from collections.abc import Iterable

from gpudash.cli.contract import EXIT_CODES_HELP
from gpudash.cli.reference.commands import Command, Group, commands, shared_group
from gpudash.ui.bindings import DIALOGS, KEYS, Key

# Textual's key names as a person types them (a keymap file takes the names themselves)
_SHOWN = {"slash": "/", "greater_than_sign": ">", "less_than_sign": "<",
          "question_mark": "?", "escape": "esc"}
_DIALOG_NAMES = {"ConfirmModal": "an action's confirm dialog", "HelpScreen": "help",
                 "FilterScreen": "the holders' filter"}


def banner(source: str) -> str:
    from gpudash.cli.reference import COMMAND

    return (f"<!-- Generated from {source} by `{COMMAND}`: do not edit by hand "
            "(tests/test_reference_docs.py fails when it differs). -->")


def cell(text: str) -> str:
    """Text for a Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def code(text: str) -> str:
    return f"`{text}`" if text else ""


def table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> list[str]:
    head = list(header)
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return out


# --- keys --------------------------------------------------------------------------------

def shown_keys(keys: str) -> str:
    return " or ".join(_SHOWN.get(k.strip(), k.strip()) for k in keys.split(","))


def _key_row(k: Key) -> list[str]:
    keys = k.help_keys or (shown_keys(k.keys) if k.action else k.keys)
    what = k.help or k.label
    if k.hosts:
        what += " (several hosts)"
    return [code(keys), what, code(k.binding_id) if k.action else "",
            "yes" if k.action and k.show else "", k.palette]


def keys_page() -> str:
    header = ("key", "what it does", "keymap id", "footer", "command palette")
    lines = [
        "# Keys", "", banner("gpudash/ui/bindings.py (`KEYS`, the help screen's rows)"), "",
        "`?` in the dashboard shows these rows with the keys your keymap gives them; "
        "`ctrl+p` opens the command palette. Rebind a key in "
        "`~/.config/gpudash/keymap.toml` by its id (`\"gpudash.reclaim\" = \"ctrl+r\"`); "
        "the *keymap id* column has them and the keys are Textual's names "
        "(`slash`, `greater_than_sign`, `ctrl+r`). What each action does, in more words: "
        "[the guide](../GUIDE.md#keys).", "",
        "## The host screen", "",
        *table(header, (_key_row(k) for k in KEYS if k.where in ("main", "holders"))), "",
        "## The fleet table", "",
        "Letters, digits and `-_.@:*[]` type into the filter there, so the one-letter "
        "keys of every screen (`T`) are not keys there; `q` still quits.", "",
        *table(header, (_key_row(k) for k in KEYS if k.where == "fleet")), "",
        "## Every screen", "",
        *table(header, (_key_row(k) for k in KEYS if k.where == "app")), "",
        "## Dialogs", "",
        *table(("key", "what it does", "keymap id"), _dialog_rows()), "",
    ]
    return "\n".join(lines)


def _dialog_rows() -> Iterable[list[str]]:
    for owner in DIALOGS:
        for b in owner.BINDINGS:
            if not isinstance(b, tuple) and b.id:  # a tuple has no id, nor keymap entry
                where = _DIALOG_NAMES.get(owner.__name__, owner.__name__)
                yield [code(shown_keys(b.key)), f"{b.description} ({where})", code(b.id)]


# --- the command line --------------------------------------------------------------------

def _anchor(prog: str) -> str:
    return "#" + prog.replace(" ", "-")


def _options(group: Group) -> list[str]:
    return table(("option", "what it does"),
                 ([code(o.names), o.help] for o in group.options))


def _command(c: Command, shared: Group) -> list[str]:
    usage = c.usage
    has_shared = any(g.shared for g in c.groups)
    lines = [f"## {c.prog}", "", "```text", usage, "```", "", c.description, ""]
    for group in c.groups:
        if group.shared and group == shared:
            continue
        title = "options" if group.title == "options" else group.title
        lines += [f"**{title}**", "", *_options(group), ""]
    if has_shared:
        shared_here = next(g for g in c.groups if g.shared)
        if shared_here == shared:
            lines += ["and the [hosts and connection options](#hosts-and-connection-options)"
                      ".", ""]
    if c.examples:
        lines += ["**examples**", "", "```text", c.examples, "```", ""]
    if c.epilog:
        lines += ["```text", c.epilog, "```", ""]
    if c.exit_codes:
        lines += ["Exit codes: [the table below](#exit-codes).", ""]
    return lines


def cli_page() -> str:
    shared = shared_group()
    cmds = commands()
    index = " · ".join(f"[`{c.prog}`]({_anchor(c.prog)})" for c in cmds)
    lines = [
        "# The command line", "",
        banner("the parsers of gpudash/cli/args.py (`build_parser`)"), "",
        "What `gpudash COMMAND --help` says, command by command. Every command takes "
        "`-h`/`--help`; the settings file (`~/.config/gpudash/config.toml`, "
        "[the guide](../GUIDE.md#settings)) gives defaults and a flag on the command line "
        "wins over it. The man page, `man -l docs/gpudash.1`, says the same.", "",
        index, "",
    ]
    for c in cmds:
        lines += _command(c, shared)
    lines += ["## Hosts and connection options", "",
              "The same for every command that reaches hosts (the dashboard, `snapshot`, "
              "the acting commands and `exporter`):", "", *_options(shared), "",
              "## Exit codes", "",
              "Of the dashboard, `snapshot` and the acting commands. `exporter` has its "
              "own (above); `history`, `report` and `completion` exit 0, 2 on a usage "
              "error (`report`: also a FILE it cannot write) and 70 on a bug.", "",
              "```text", EXIT_CODES_HELP, "```", ""]
    return "\n".join(lines)
