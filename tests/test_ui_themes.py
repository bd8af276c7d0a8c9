"""Theme files: ours load, broken ones are reported together, --theme picks one."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_ui import wait_for

from gpudash.demo.host import DemoHost
from gpudash.ui.app import GpudashApp
from gpudash.ui.text import clean, duration
from gpudash.ui.themes import load_themes

THEMES_DIR = Path(__file__).resolve().parents[1] / "themes"


def test_our_themes_load() -> None:
    themes, errors = load_themes([THEMES_DIR])
    names = {t.name for t in themes}
    assert {"gpudash-night", "gpudash-day"} <= names and errors == []
    day = next(t for t in themes if t.name == "gpudash-day")
    assert day.dark is False and "gpu-mem-critical" in day.variables


def test_broken_theme_files_are_each_reported(tmp_path: Path) -> None:
    (tmp_path / "good.toml").write_text('name = "mine"\nprimary = "#123456"\n')
    (tmp_path / "syntax.toml").write_text("name = \n")
    (tmp_path / "noname.toml").write_text('primary = "#123456"\n')
    (tmp_path / "colour.toml").write_text('name = "c"\nprimary = "not-a-colour"\n')
    (tmp_path / "extra.toml").write_text('name = "e"\nprimary = "#fff"\nbogus = 1\n')
    themes, errors = load_themes([tmp_path])
    assert [t.name for t in themes] == ["mine"]
    assert sorted(e.split(":")[0] for e in errors) == [
        "colour.toml", "extra.toml", "noname.toml", "syntax.toml",
    ]


async def test_failures_in_one_toast_and_theme_argument(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text("oops")
    (tmp_path / "b.toml").write_text('name = "b"\n')
    app = GpudashApp([DemoHost()], interval=1.0, read_only=False, theme="gpudash-day",
                     exec_options=None, theme_dirs=[THEMES_DIR, tmp_path])
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause(0.1)
        assert app.theme == "gpudash-day"
        toasts = [n for n in app._notifications if "Theme files" in n.message]
        assert len(toasts) == 1
        assert "a.toml" in toasts[0].message and "b.toml" in toasts[0].message
        app.theme = "textual-dark"  # switching redraws with the theme's colours
        await pilot.pause(0.1)
        assert app.theme_variables["gpu-mem-critical"]


async def test_unknown_theme_falls_back_with_a_warning() -> None:
    app = GpudashApp([DemoHost()], interval=1.0, read_only=False, theme="nope",
                     exec_options=None, theme_dirs=[THEMES_DIR])
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause(0.1)
        assert app.theme != "nope"
        assert any("Unknown theme" in n.message for n in app._notifications)


async def test_help_and_palette_grey_what_does_not_fit() -> None:
    app = GpudashApp([DemoHost()], interval=1.0, read_only=False, theme=None,
                     exec_options=None, theme_dirs=[THEMES_DIR])
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.selected_key is not None)

        def offered() -> tuple[set[str], dict[str, str]]:
            commands = app.main.palette_commands()
            ready = {action for _t, _h, action, ok in commands if ok}
            greyed = {action: why for _t, why, action, ok in commands if not ok}
            return ready, greyed

        async def select(key: str) -> None:
            await wait_for(pilot, lambda: key in [str(k.value) for k in app.main.holders.rows])
            app.main.holders.select_key(key)
            await wait_for(pilot, lambda: app.selected_key == key)

        await select("u:session-4.scope")
        ready, greyed = offered()
        assert "stop_unit" not in ready and "reclaim" not in ready
        assert "select a system service" in greyed["stop_unit"]
        await select("u:vllm-minimax-m25.service")
        ready, greyed = offered()
        assert {"stop_unit", "reclaim", "stop_disable"} <= ready and "kill" in greyed
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "HelpScreen")
        await pilot.press("escape")
        await wait_for(pilot, lambda: type(app.screen).__name__ != "HelpScreen")


def test_clean_makes_controls_visible() -> None:
    assert clean("a\x1b[2Jb\tc\nd\x7f\u202e") == "a\\x1b[2Jb\\x09c\\x0ad\\x7f\\u202e"
    assert clean("[red]x[/red]") == "[red]x[/red]"
    assert duration(None) == "N/A" and duration(7200) == "2h00m" and duration(59) == "50s"
    assert [duration(s) for s in (0, 9.9, 10, 19, 20, 60, 119)] == [
        "0s", "9s", "10s", "10s", "20s", "1m", "1m"]
    assert duration(425) == "7m" and duration(3 * 86400 + 4 * 3600) == "3d04h"


CRASHERS = {  # each loaded before, then ended the app at start
    "brace.toml": 'name = "brace"\nprimary = "#123456"\n[variables]\nborder = "}}} ; ;"\n',
    "colour.toml": 'name = "colour"\nprimary = "#123456"\n[variables]\n'
                   'footer-background = "notacolour"\n',
    "nan.toml": 'name = "nan"\nprimary = "#123456"\nluminosity_spread = nan\n',
    "style.toml": 'name = "style"\nprimary = "#123456"\n[variables]\n'
                  'link-style = "blink42"\n',
}


def test_themes_that_would_crash_the_app_are_refused_while_loading(tmp_path: Path) -> None:
    for name, text in CRASHERS.items():
        (tmp_path / name).write_text(text)
    themes, errors = load_themes([tmp_path])
    assert themes == []
    assert sorted(e.split(":")[0] for e in errors) == sorted(CRASHERS)
    assert any("'border'" in e and "not CSS" in e for e in errors)
    assert any("footer-background" in e and "not a colour" in e for e in errors)


@pytest.mark.parametrize("name", ["brace", "colour", "nan"])
async def test_the_app_starts_beside_a_bad_theme_and_names_its_file(tmp_path: Path,
                                                                   name: str) -> None:
    (tmp_path / f"{name}.toml").write_text(CRASHERS[f"{name}.toml"])
    app = GpudashApp([DemoHost()], interval=1.0, read_only=False, theme=name,
                     exec_options=None, theme_dirs=[THEMES_DIR, tmp_path])
    async with app.run_test(size=(120, 35)) as pilot:
        await pilot.pause(0.3)
        assert app.theme != name
        toasts = [n.message for n in app._notifications if "Theme files" in n.message]
        assert len(toasts) == 1 and f"{name}.toml" in toasts[0]
    assert app.return_code in (None, 0)
