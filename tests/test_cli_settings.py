"""The documented config file, host groups, mistyped commands and shell completion
(issue 20, "Settings and the command line").

Seen before: only `models = [...]` was read (and the README never said so); no defaults for
interval, theme, read-only, sudo or ssh options; no host groups; `gpudash histroy` was
taken for a host and SSHed to; declining at the prompt printed exit 1's words; no completion.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpudash.cli.args import parse


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    path = tmp_path / "config" / "gpudash" / "config.toml"
    path.parent.mkdir(parents=True)
    return path


def test_the_config_files_settings_are_the_defaults_and_flags_win(config: Path) -> None:
    config.write_text('interval = 2.5\nread_only = true\nsudo = true\ntheme = "gpudash-day"\n'
                      'ssh_config = "~/ssh-gpu"\nlog_level = "info"\n')
    _cmd, args = parse(["--demo"])
    assert (args.interval, args.read_only, args.sudo, args.log_level) == (
        2.5, True, True, "info")
    assert args.theme is None  # the file's theme comes after the kept one: cmd_dashboard
    assert args.ssh_config == Path("~/ssh-gpu").expanduser() and args.config_errors == []
    _cmd, args = parse(["--demo", "--interval", "1", "--no-read-only", "--no-sudo",
                        "--theme", "textual-dark"])
    assert (args.interval, args.read_only, args.sudo, args.theme) == (
        1.0, False, False, "textual-dark")
    # an acting command takes the same defaults (it has no --read-only)
    _cmd, args = parse(["reclaim", "--demo", "--unit", "vllm-minimax-m25"])
    assert args.sudo is True and args.interval == 2.5 and not hasattr(args, "read_only")


def test_bad_settings_are_named_one_line_each_and_the_rest_used(config: Path) -> None:
    config.write_text('interval = 0\nlog_level = "loud"\ntheme = "x"\n'
                      'colour = 3\n[groups]\n"bad name" = ["a"]\n')
    _cmd, args = parse(["--demo"])
    assert args.interval == 1.0
    errors = "\n".join(args.config_errors)
    for said in (f"{config}:1: interval: expected seconds from 0.05 to 3600",
                 f"{config}:2: log_level: expected one of debug, info, warning, error",
                 f"{config}:4: colour: unknown setting", "groups: 'bad name': a group name is"):
        assert said in errors, errors
    # the command line says them, and goes on
    cp = subprocess.run([sys.executable, "-m", "gpudash", "snapshot", "--demo"],
                        capture_output=True, text=True, timeout=60, env=os.environ.copy())
    assert cp.returncode == 0, cp.stderr
    assert f"warning: settings ignored: {config}:2: log_level: expected one of" in cp.stderr


def gpudash(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpudash", *args], capture_output=True,
                          text=True, timeout=60, env=os.environ.copy(), stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(("text", "said"), [
    # seen: a toast said it was ignored, and every action key was live
    ('interval = 2\nread_only = "yes"\n', ':2: read_only: expected true or false '
     '(--read-only or --no-read-only decides for one run)'),
    ('sudo = 1\n', ':1: sudo: expected true or false'),
    ('readonly = true\n', ':1: readonly: unknown setting (did you mean read_only?)'),
    ('known_hosts = ""\n', ':1: known_hosts: expected a file path (--known-hosts FILE'),
    # seen: a syntax error dropped the whole file, a valid read_only = true with it
    ('read_only = true\ninterval = 2\ntheme = "x\n', ':3: cannot be read: '),
])
def test_a_safety_setting_that_cannot_be_read_refuses_to_start(config: Path, text: str,
                                                              said: str) -> None:
    config.write_text(text)
    for argv in (["--demo"], ["reap", "--demo", "--yes"], ["snapshot", "--demo"]):
        cp = gpudash(*argv)
        if argv[0] != "--demo" and "read_only" in said:
            # read_only is the dashboard's (--read-only): the commands have none to refuse
            assert cp.returncode == 0 and "settings ignored" in cp.stderr, cp.stderr
            continue
        assert cp.returncode == 2, (argv, cp.stderr)
        assert cp.stdout == "" and "Traceback" not in cp.stderr
        assert "a setting that would fail open, refused (nothing was done)" in cp.stderr
        assert f"{config}{said}" in cp.stderr, cp.stderr
    # the files of this machine are still read (completion runs in every new shell)
    assert gpudash("history").returncode == 0


def test_the_command_line_decides_a_broken_safety_setting_for_one_run(config: Path) -> None:
    config.write_text('read_only = "yes"\nsudo = "no"\n')
    _cmd, args = parse(["--demo", "--read-only", "--no-sudo"])
    assert (args.read_only, args.sudo) == (True, False)
    _cmd, args = parse(["--demo", "--no-read-only", "--sudo"])
    assert (args.read_only, args.sudo) == (False, True)
    with pytest.raises(SystemExit) as refused:
        parse(["--demo", "--read-only"])  # sudo is still unread: refused
    assert refused.value.code == 2


def test_a_host_group_names_its_hosts(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config.write_text('[groups]\nprod = ["root@127.0.0.1", "ssh://gpu@127.0.0.1:2222"]\n'
                      'lab = ["lab1", "root@127.0.0.1"]\n')
    _cmd, args = parse(["@prod", "@lab"])
    assert args.hosts == ["root@127.0.0.1", "ssh://gpu@127.0.0.1:2222", "lab1"]
    with pytest.raises(SystemExit) as exc:
        parse(["snapshot", "@stage"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "no host group @stage in" in err and "groups there: @lab, @prod" in err, err


def test_a_mistyped_command_is_not_taken_for_a_host() -> None:
    cp = subprocess.run([sys.executable, "-m", "gpudash", "histroy"], capture_output=True,
                        text=True, timeout=30, env=os.environ.copy())
    assert cp.returncode == 2
    assert "'histroy' is not a command (did you mean 'history'?)" in cp.stderr, cp.stderr
    assert "gpudash -- histroy" in cp.stderr


def test_help_lists_every_command() -> None:
    cp = subprocess.run([sys.executable, "-m", "gpudash", "--help"], capture_output=True,
                        text=True, timeout=30)
    text = " ".join(cp.stdout.split())
    assert ("Subcommands: snapshot, reclaim, reap, start, swap, fix, reset, drain, resume, "
            "exporter, history, report, completion") in text, text


@pytest.mark.parametrize(("line", "expected"), [
    ("gpudash re", {"reclaim", "reap", "reset", "resume", "report"}),
    ("gpudash reap --dr", {"--dry-run"}),
    ("gpudash completion ", {"bash", "zsh", "fish"}),
    ("gpudash swap --from-c", {"--from-container"}),
    ("gpudash fix --re", {"--revert"}),
    # issue 33, item 9: completion offered no unit or host names
    ("gpudash reclaim --demo --unit vllm-k", {"vllm-kimi-k25"}),
    ("gpudash swap --demo --from vllm-minimax-m25 --to vllm-", {
        "vllm-minimax-m25", "vllm-kimi-k25", "vllm-deepseek-v3", "vllm-rerank"}),
    ("gpudash --ssh-config {config} gpu", {"gpu01", "gpu02"}),
    ("gpudash @p", {"prod"}),  # bash breaks the word at @: it keeps the @ it has
])
def test_bash_completes_commands_and_options(line: str, expected: set[str],
                                             tmp_path: Path) -> None:
    # the real bash, the script `gpudash completion bash` prints, the installed gpudash
    ssh = tmp_path / "ssh_config"
    ssh.write_text("Host gpu01\n  HostName 127.0.0.1\nHost gpu02 gpu*\n  User root\n")
    ssh.chmod(0o600)
    config = tmp_path / "xdg-config" / "gpudash" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[groups]\nprod = ["gpu01"]\n')
    line = line.format(config=ssh)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "gpudash").write_text(f"#!/bin/sh\nexec {sys.executable} -m gpudash \"$@\"\n")
    (bindir / "gpudash").chmod(0o755)
    words = line.split(" ")
    script = (
        'eval "$(gpudash completion bash)"\n'
        f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
        f"COMP_LINE={line!r}; COMP_POINT={len(line)}\n"
        f"_python_argcomplete gpudash {words[-1]!r} {words[-2]!r}\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n')
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}",
           "XDG_CONFIG_HOME": str(tmp_path / "xdg-config")}
    cp = subprocess.run(["bash", "--norc", "-c", script], capture_output=True, text=True,
                        timeout=60, env=env)
    got = {w.strip() for w in cp.stdout.splitlines() if w.strip()}
    assert expected <= got and len(got) <= len(expected) + 2, (cp.stdout, cp.stderr)


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts_name_gpudash(shell: str) -> None:
    cp = subprocess.run([sys.executable, "-m", "gpudash", "completion", shell],
                        capture_output=True, text=True, timeout=30)
    assert cp.returncode == 0 and "gpudash" in cp.stdout and "_ARGCOMPLETE" in cp.stdout


async def test_the_theme_chosen_with_t_is_kept_for_the_next_run(config: Path) -> None:
    from gpudash.demo.host import DemoHost
    from gpudash.state import kept
    from gpudash.ui.app import GpudashApp

    assert kept.resolve_theme(None, "gpudash-day") == "gpudash-day"  # nothing kept yet
    app = GpudashApp([DemoHost(seed=7)], interval=0.25, read_only=True, theme="gpudash-day",
                     exec_options=None)
    async with app.run_test(size=(120, 35)) as pilot:
        await pilot.pause(0.3)
        await pilot.press("T")  # Textual's theme picker; what choosing in it does:
        await pilot.pause(0.3)
        app.theme = "textual-light"
        await pilot.pause(0.3)
        chosen = app.theme
    assert chosen != "gpudash-day"
    assert kept.kept_theme() == chosen
    # the next run: what was chosen, over the config file's; --theme over both
    assert kept.resolve_theme(None, "gpudash-day") == chosen
    assert kept.resolve_theme("textual-light", "gpudash-day") == "textual-light"
    # a kept file that is not ours is ignored, never a crash
    kept.kept_path().write_bytes(b"[1, 2")  # noqa: ASYNC240 (the app is gone by now)
    assert kept.resolve_theme(None, "gpudash-day") == "gpudash-day"


@pytest.mark.parametrize("command", ["reclaim", "start", "swap", "fix", "reap", "snapshot"])
def test_a_commands_help_puts_its_own_flags_first_and_shows_examples(command: str) -> None:
    # issue 33, item 7: each --help repeated ~25 lines of connection options and the exit
    # code table before the command's own flags, with no example
    r = subprocess.run([sys.executable, "-m", "gpudash", command, "--help"],
                       capture_output=True, text=True, timeout=60, env=os.environ.copy())
    out = r.stdout
    shared = out.index("hosts and connection (the same for every command):")
    own = {"reclaim": "--unit UNIT", "start": "--enable", "swap": "--from UNIT",
           "fix": "--revert", "reap": "--dry-run", "snapshot": "--json"}[command]
    assert out.index(own, out.index("options:")) < shared
    assert out.count("--ssh-config FILE ") == 1  # once, in the shared group
    assert f"examples:\n  gpudash {command} " in out
    assert out.index("examples:") < out.index("exit codes:")
    if command == "fix":  # it signals nothing: no flag that does nothing for it
        assert "--term-timeout" not in out


def test_demo_without_dashes_is_not_taken_for_a_host() -> None:
    # issue 33, item 9: `gpudash demo` tried SSH to a host named demo
    r = subprocess.run([sys.executable, "-m", "gpudash", "demo"], capture_output=True,
                       text=True, timeout=60, env=os.environ.copy(), stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "did you mean --demo?" in r.stderr, r.stderr
    assert "gpudash -- demo" in r.stderr
