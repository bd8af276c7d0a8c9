"""A user keymap rebinds actions by binding id; bad entries are reported, not fatal."""

from __future__ import annotations

import os
from pathlib import Path

from gpudash.demo.host import DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.engine import ExecOptions
from gpudash.ui.app import GpudashApp
from gpudash.ui.keymap import load_keymap
from gpudash.ui.screens import ConfirmModal


def write_keymap(text: str) -> Path:
    path = Path(os.environ["XDG_CONFIG_HOME"]) / "gpudash" / "keymap.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_load_keymap_keeps_good_entries_and_names_bad_ones() -> None:
    write_keymap('"gpudash.reclaim" = "R"\n"gpudash.stop" = 3\n"other.thing" = "x"\n')
    keymap, errors = load_keymap()
    assert keymap == {"gpudash.reclaim": "R"}
    assert len(errors) == 2 and "gpudash.stop" in errors[0] and "other.thing" in errors[1]


def test_broken_keymap_file_is_an_error_line() -> None:
    write_keymap("this is not toml = = =")
    assert load_keymap() == ({}, [load_keymap()[1][0]])
    assert load_keymap()[1][0].startswith("keymap.toml:")


async def test_rebound_key_opens_the_reclaim_plan() -> None:
    write_keymap('"gpudash.reclaim" = "Z"\n')
    app = GpudashApp([DemoHost(clock=SteppedClock())], interval=0.25, read_only=False, theme=None,
                     exec_options=ExecOptions())
    async with app.run_test(size=(160, 50)) as pilot:
        for _ in range(100):
            if app.selected_key:
                break
            await pilot.pause(0.05)
        await pilot.press("Z")
        await pilot.pause(0.3)
        assert isinstance(app.screen, ConfirmModal)
        assert "Reclaim unit" in "\n".join(app.screen.lines)


async def test_rebound_key_of_a_greyed_action_still_explains_itself() -> None:
    write_keymap('"gpudash.reap" = "O"\n')
    app = GpudashApp([DemoHost(clock=SteppedClock())], interval=0.25, read_only=False, theme=None,
                     exec_options=ExecOptions())
    async with app.run_test(size=(160, 50)) as pilot:
        for _ in range(100):
            if app.selected_key:
                break
            await pilot.pause(0.05)
        await pilot.press("O")  # no orphans yet: greyed, and the key says why
        await pilot.pause(0.2)
        messages = [n.message for n in app._notifications]
        assert any("no orphaned processes" in m for m in messages), messages


async def test_help_screen_shows_the_rebound_keys() -> None:
    from gpudash.ui.screens import HelpScreen

    write_keymap('"gpudash.reclaim" = "ctrl+r"\n')
    app = GpudashApp([DemoHost(clock=SteppedClock())], interval=0.25, read_only=False, theme=None,
                     exec_options=ExecOptions())
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause(0.2)
        assert isinstance(app.screen, HelpScreen)
        keys = {description: key for key, description, _ in app.screen.rows}
        assert keys["Reclaim unit (stop + disable + reap + wait)"] == "ctrl+r"
        assert keys["Stop unit"] == "s"


def test_a_key_another_action_uses_is_refused_and_named() -> None:
    from gpudash.ui.bindings import binding_table

    write_keymap('"gpudash.kill" = "s"\n"gpudash.reclam" = "R"\n"gpudash.reap" = "O"\n')
    keymap, errors = load_keymap(bindings=binding_table())
    assert keymap == {"gpudash.reap": "O"}
    assert len(errors) == 2
    assert "gpudash.kill" in errors[1] and "s is already Stop (gpudash.stop_unit)" in errors[1]
    assert "kept k" in errors[1]
    assert "gpudash.reclam: unknown binding id (did you mean gpudash.reclaim?)" in errors[0]


def test_swapping_two_keys_is_allowed_but_two_entries_on_one_key_are_not() -> None:
    from gpudash.ui.bindings import binding_table

    write_keymap('"gpudash.kill" = "s"\n"gpudash.stop_unit" = "k"\n')
    assert load_keymap(bindings=binding_table()) == (
        {"gpudash.kill": "s", "gpudash.stop_unit": "k"}, [])
    write_keymap('"gpudash.kill" = "K"\n"gpudash.reap" = "K"\n"gpudash.theme" = "down"\n')
    keymap, errors = load_keymap(bindings=binding_table())
    assert keymap == {"gpudash.kill": "K"}
    assert any("gpudash.reap" in e and "K is already Kill" in e for e in errors)
    assert any("gpudash.theme" in e and "moving the cursor" in e for e in errors)


async def test_conflicting_keymap_keeps_stop_on_s_and_warns_once() -> None:
    from gpudash.ui.screens import HelpScreen

    write_keymap('"gpudash.kill" = "s"\n"gpudash.reclam" = "R"\n')
    app = GpudashApp([DemoHost(clock=SteppedClock())], interval=0.25, read_only=False, theme=None,
                     exec_options=ExecOptions())
    async with app.run_test(size=(160, 50)) as pilot:
        for _ in range(100):
            if app.selected_key:
                break
            await pilot.pause(0.05)
        warnings = [n for n in app._notifications if n.severity == "warning"]
        assert len(warnings) == 1
        assert "gpudash.kill" in warnings[0].message and "gpudash.reclam" in warnings[0].message
        await pilot.press("s")
        await pilot.pause(0.3)
        assert isinstance(app.screen, ConfirmModal)
        assert app.screen.lines[0].startswith("Stop unit")
        await pilot.press("escape")
        await pilot.pause(0.1)
        await pilot.press("question_mark")
        await pilot.pause(0.2)
        assert isinstance(app.screen, HelpScreen)
        keys = [key for key, _d, _a in app.screen.rows]
        assert keys.count("s") == 1 and "k" in keys


async def test_the_confirm_dialog_names_the_keys_of_the_keymap() -> None:
    # "y: confirm  n/Esc: cancel" was fixed text: with y rebound it named a dead key.
    write_keymap('"gpudash.confirm.yes" = "Y"\n"gpudash.confirm.no" = "N"\n')
    app = GpudashApp([DemoHost(clock=SteppedClock())], interval=0.25, read_only=False, theme=None,
                     exec_options=ExecOptions())
    async with app.run_test(size=(160, 50)) as pilot:
        for _ in range(100):
            if app.selected_key:
                break
            await pilot.pause(0.05)
        await pilot.press("s")
        await pilot.pause(0.3)
        assert isinstance(app.screen, ConfirmModal)
        question = str(app.screen.query_one("#question").render())
        assert "Y: confirm" in question and "N/Esc: cancel" in question, question


def test_every_key_is_written_once_and_each_has_its_action_on_its_screen() -> None:
    from gpudash.engine import SPECS_BY_NAME
    from gpudash.ui.app import GpudashApp
    from gpudash.ui.bindings import KEYS
    from gpudash.ui.fleet_screen import FleetScreen
    from gpudash.ui.main_screen import MainScreen

    ids = [k.binding_id for k in KEYS if k.action]
    assert len(ids) == len(set(ids))
    assert {f"gpudash.{name}" for name in SPECS_BY_NAME} <= set(ids)
    from gpudash.ui.widgets.holders import HoldersTable

    owners = {"main": MainScreen, "fleet": FleetScreen, "app": GpudashApp}
    for k in KEYS:
        if k.action:
            # the holders table's keys call their screen's action ("screen.fold(...)")
            method = f"action_{k.action.split('(')[0].removeprefix('screen.')}"
            actor = MainScreen if k.where == "holders" else owners[k.where]
            holder = HoldersTable if k.where == "holders" else owners[k.where]
            assert callable(getattr(actor, method, None)), (k.where, method)
            assert [getattr(b, "id", None) for b in holder.BINDINGS
                    if getattr(b, "id", None) == k.binding_id] == [k.binding_id]


def test_help_lists_every_column_the_holders_sort_by() -> None:
    # issue 33, item 9: help's sort list omitted SM% (it was written by hand)
    from gpudash.ui.bindings import help_rows
    from gpudash.ui.widgets.holder_view import SORTS

    [sort] = [text for keys, text, _ in help_rows("main", {}, 1, {})
              if text.startswith("Sort the holders")]
    assert all(label in sort for _key, label in SORTS), sort
    assert "SM%" in sort
