"""The CLI's owner flags (--unit, --container, --job) are each kind's own: its adapter
declares them (``OwnerRules.cli``), the parser is generated from them (issue 31: "CLI
selector (--unit, --container, --job...)" is part of one kind's contract)."""

from __future__ import annotations

from enum import StrEnum

import pytest

from gpudash.cli import act, args
from gpudash.domain import owners
from gpudash.domain.owners import BaseRules, CliSelector, OwnerRef


def flags_of(command: str) -> list[str]:
    parser = args.build_parser(command)
    return [o for a in parser._actions for o in a.option_strings
            if o in {"--unit", "--container", "--job", "--widget"}]


def test_the_parsers_owner_flags_are_the_adapters() -> None:
    declared = {c: [s.flag for s in owners.cli_selectors(c)] for c in ("reap", "reclaim",
                                                                       "start")}
    assert declared == {"reap": ["--unit", "--container", "--job"],
                        "reclaim": ["--unit", "--container"], "start": ["--unit", "--container"]}
    for command, flags in declared.items():
        assert flags_of(command) == flags


class WidgetKind(StrEnum):
    WIDGET = "widget"  # a kind gpudash does not know


class WidgetRules(BaseRules):
    """A kind added for the test: nothing but its flag."""

    kind = WidgetKind.WIDGET  # type: ignore[assignment]
    cli: tuple[CliSelector, ...] = (CliSelector(
        "--widget", "ID", {"reap": "what is left of this widget"},
        pattern=r"w[0-9]+", what="a widget id", rank=3),)


def test_a_kinds_flag_is_a_line_in_its_adapter(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(owners, "KINDS", (*owners.KINDS, WidgetRules()))
    assert flags_of("reap") == ["--unit", "--container", "--job", "--widget"]
    assert flags_of("reclaim") == ["--unit", "--container"]  # only where it is declared
    parser = args.build_parser("reap")
    ns = parser.parse_args(["gpu01", "--widget", "w7"])
    selection = act.selected(ns, "reap", gpus=None)
    assert selection.owner == OwnerRef("widget", "w7")
    with pytest.raises(SystemExit):
        parser.parse_args(["gpu01", "--widget", "x;rm -rf /"])  # its pattern, checked
    assert "not a widget id: 'x;rm -rf /'" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # one owner at a time
        parser.parse_args(["gpu01", "--widget", "w7", "--unit", "vllm"])


def test_each_flag_names_an_owner_of_its_kind() -> None:
    parser = args.build_parser("reap")
    cases = {("--unit", "vllm.service"): OwnerRef("service", "vllm.service"),
             ("--container", "embed"): OwnerRef("container", "embed"),
             ("--job", "4117"): OwnerRef("slurm job", "4117")}
    for (flag, value), expected in cases.items():
        selection = act.selected(parser.parse_args(["gpu01", flag, value]), "reap")
        assert selection.owner == expected, (flag, selection)
