"""State files that cannot be turned against root: each attack of the security review,
made for real (symbolic links, a loose directory, a planted temporary name) against the
code that writes the file.

gpudash often runs as root; whoever could plant a link where it writes (or own the
directory) could make it chmod, append to or truncate any file of the machine.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
from pathlib import Path

import pytest

from gpudash.session import audit
from gpudash.state import files, footprints, logfile

PRECIOUS = "root's own data\n"


def victim(tmp_path: Path, mode: int = 0o644) -> Path:
    """A file elsewhere that an attacker wants gpudash to damage."""
    target = tmp_path / "elsewhere" / "precious"
    target.parent.mkdir(exist_ok=True)
    target.write_text(PRECIOUS)
    target.chmod(mode)
    return target


def intact(target: Path, mode: int = 0o644) -> bool:
    return target.read_text() == PRECIOUS and stat.S_IMODE(target.stat().st_mode) == mode


def state(tmp_path: Path) -> Path:
    return Path(os.environ["XDG_STATE_HOME"]) / "gpudash"


def test_a_gpudash_directory_linked_elsewhere_is_refused_not_chmodded(tmp_path: Path) -> None:
    # before: the directory the link pointed to was chmod'ed 0700 and written into
    elsewhere = tmp_path / "shared"
    elsewhere.mkdir(mode=0o755)
    elsewhere.chmod(0o755)
    link = state(tmp_path)
    link.symlink_to(elsewhere)
    with pytest.raises(files.StateDirError, match="a symbolic link") as raised:
        audit.write({"record": "intent"}, link / "audit.jsonl")
    assert f"rm {link}" in str(raised.value)  # how to fix it
    assert stat.S_IMODE(elsewhere.stat().st_mode) == 0o755
    assert list(elsewhere.iterdir()) == []


def test_an_audit_file_linked_to_another_file_is_refused(tmp_path: Path) -> None:
    # before: the target was made 0600 and the record appended to it (to /dev/full too)
    target = victim(tmp_path)
    path = state(tmp_path) / "audit.jsonl"
    path.parent.mkdir(mode=0o700)
    path.symlink_to(target)
    with pytest.raises(OSError, match="a symbolic link"):
        audit.write({"record": "intent"}, path)
    assert intact(target)
    dev = state(tmp_path) / "audit-demo.jsonl"
    dev.symlink_to("/dev/full")
    with pytest.raises(OSError, match="a symbolic link"):
        audit.write({"record": "intent"}, dev)
    assert stat.S_IMODE(os.stat("/dev/full").st_mode) == 0o666


def test_an_audit_file_that_is_no_regular_file_is_refused(tmp_path: Path) -> None:
    path = state(tmp_path) / "audit.jsonl"
    path.parent.mkdir(mode=0o700)
    os.mkfifo(path)  # would block an open for writing forever
    with pytest.raises(OSError, match="not a regular file"):
        audit.write({"record": "intent"}, path)


def test_a_footprints_temp_name_linked_to_a_file_does_not_truncate_it(tmp_path: Path) -> None:
    # before: footprints.tmp (a fixed name) was opened through the link and truncated
    target = victim(tmp_path)
    path = footprints.store_path()
    path.parent.mkdir(mode=0o700)
    path.with_suffix(".tmp").symlink_to(target)
    footprints.learn("gpu01", "vllm-kimi-k25.service", {0: 90000}, 18.0)
    assert intact(target)
    assert footprints.lookup("gpu01", "vllm-kimi-k25.service") is not None
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # no temporary file of ours is left behind
    assert sorted(p.name for p in path.parent.iterdir()) == ["footprints.json", "footprints.tmp"]


def test_a_footprints_file_linked_elsewhere_is_replaced_not_followed(tmp_path: Path) -> None:
    target = victim(tmp_path)
    path = footprints.store_path()
    path.parent.mkdir(mode=0o700)
    path.symlink_to(target)
    assert footprints.lookup("gpu01", "u.service") is None  # not read through the link
    footprints.learn("gpu01", "u.service", {0: 1000}, None)
    assert intact(target) and not path.is_symlink()


def test_the_log_file_is_private_and_never_opened_through_a_link(tmp_path: Path) -> None:
    # before: the log was created 0644 (umask 022), readable by every user
    old = os.umask(0o022)
    try:
        path = state(tmp_path) / "gpudash.log"
        assert logfile.setup("info", path) == path
        logging.getLogger("gpudash.test").warning("a line")
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert "a line" in path.read_text()
        path.unlink()
        target = victim(tmp_path)
        path.symlink_to(target)
        why = logfile.setup("info", path)
        assert isinstance(why, str) and "a symbolic link" in why
        assert intact(target)
    finally:
        os.umask(old)  # (the gpudash logger is put back by conftest's fixture)


def test_a_loose_state_directory_is_refused_with_how_to_fix_it(tmp_path: Path) -> None:
    directory = state(tmp_path)
    directory.mkdir()
    directory.chmod(0o777)
    with pytest.raises(files.StateDirError, match=r"writable by others \(mode 0777\)") as raised:
        audit.write({"record": "intent"}, directory / "audit.jsonl")
    assert f"chmod go-w {directory}" in str(raised.value)
    assert not (directory / "audit.jsonl").exists()
    directory.chmod(0o700)
    if os.geteuid() == 0:  # someone else's directory
        os.chown(directory, 65534, 65534)
        with pytest.raises(files.StateDirError, match="owned by uid 65534") as raised:
            audit.write({"record": "intent"}, directory / "audit.jsonl")
        assert f"chown {os.geteuid()} {directory}" in str(raised.value)


def test_the_textfile_is_written_under_a_fresh_name_never_a_planted_one(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

    from gpudash.cli.exporter import write_textfile

    directory = tmp_path / "textfile"
    directory.mkdir(mode=0o755)
    prom = directory / "gpudash.prom"
    target = victim(tmp_path)
    planted = Path(f"{prom}.{os.getpid()}.{threading.get_ident()}")
    planted.symlink_to(target)
    registry = CollectorRegistry()
    Gauge("g", "a gauge", registry=registry).set(1)
    # what the exporter used to call: its fixed temporary name goes through the link
    write_to_textfile(str(prom), registry)
    assert not intact(target) and prom.is_symlink()  # written through, then renamed
    prom.unlink()
    target.write_text(PRECIOUS)
    planted.symlink_to(target)
    write_textfile(prom, b"g 1.0\n")
    assert intact(target)
    assert prom.read_text() == "g 1.0\n" and not prom.is_symlink()
    assert stat.S_IMODE(prom.stat().st_mode) == 0o644  # node_exporter (its own user) reads it
    assert sorted(p.name for p in directory.iterdir()) == ["gpudash.prom", planted.name]


def test_a_textfile_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    from gpudash.cli.exporter import textfile_problem

    directory = tmp_path / "textfile"
    directory.mkdir()
    directory.chmod(0o777)
    problem = textfile_problem(directory)
    assert problem is not None and "writable by others" in problem
    directory.chmod(0o755)
    assert textfile_problem(directory) is None


def test_the_known_hosts_record_is_never_written_through_a_link(tmp_path: Path) -> None:
    import asyncssh

    from gpudash.transport.hostkeys import KnownHosts, KnownHostsFiles

    key = asyncssh.generate_private_key("ssh-ed25519")
    ssh_dir = tmp_path / "dot-ssh"
    ssh_dir.mkdir(mode=0o700)
    path = ssh_dir / "known_hosts"
    target = victim(tmp_path)
    path.symlink_to(target)
    known = KnownHosts.load(KnownHostsFiles(user=(path,), system=()))
    with pytest.raises(OSError, match="a symbolic link"):
        known.record("gpu01", 22, key)
    assert intact(target)
    path.unlink()
    known.record("gpu01", 2222, key)  # made here: 0600, one whole line
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().startswith("[gpu01]:2222 ssh-ed25519 ")


def test_state_files_rules_in_one_place() -> None:
    """Every writer of the operator's files goes through gpudash.state.files."""
    root = Path(__file__).resolve().parents[1] / "gpudash"
    writers = {"session/audit.py", "state/footprints.py", "state/logfile.py",
               "transport/hostkeys.py", "cli/exporter.py", "cli/report.py"}
    for name in writers:
        text = (root / name).read_text()
        assert "files." in text, name
        for banned in ("write_to_textfile", ".write_text(", 'open("a"', "os.replace("):
            assert banned not in text, (name, banned)


def test_a_record_is_one_json_line_in_a_private_file(tmp_path: Path) -> None:
    path = state(tmp_path) / "audit.jsonl"
    audit.write({"record": "intent", "n": 1}, path)
    audit.write({"record": "outcome", "n": 2}, path)
    lines = path.read_text().splitlines()
    assert [json.loads(line)["n"] for line in lines] == [1, 2]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_file_the_operator_names_is_never_written_through_a_link(tmp_path: Path) -> None:
    """``report --svg FILE`` (issue 29 item 11): the name may be anywhere the operator
    writes, but a link there is refused, and so is a FIFO or a directory."""
    target = victim(tmp_path)
    link = tmp_path / "report.svg"
    link.symlink_to(target)
    with pytest.raises(files.StateDirError, match="a symbolic link"):
        files.write_named(link, b"<svg/>")
    assert intact(target) and link.is_symlink()
    fifo = tmp_path / "fifo.svg"
    os.mkfifo(fifo)
    with pytest.raises(files.StateDirError, match="not a regular file"):
        files.write_named(fifo, b"<svg/>")  # refused at once: never opened, never waits
    plain = tmp_path / "plain.svg"
    old = os.umask(0o027)
    try:
        files.write_named(plain, b"<svg/>")
    finally:
        os.umask(old)
    assert plain.read_bytes() == b"<svg/>" and stat.S_IMODE(plain.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "elsewhere", "fifo.svg", "plain.svg", "report.svg", "xdg"]  # no temporary name left
