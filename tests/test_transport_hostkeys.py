"""Which known_hosts files a connection reads, and what an odd line in them means."""

from __future__ import annotations

import os
from pathlib import Path

import asyncssh
import pytest

from gpudash.transport.hostkeys import (
    DEFAULT_GLOBAL_FILES,
    HostKeyCheck,
    KnownHosts,
    KnownHostsFiles,
    expand_tokens,
    known_hosts_files,
)

TOKENS = {"d": "/home/op", "h": "gpu01.lab", "p": "2222", "r": "root", "u": "op"}


def config(**settings: object):  # the shape of asyncssh's SSHClientConfig.get
    return lambda name, default: settings.get(name, default)


def test_files_as_openssh_builds_them() -> None:
    home = os.path.expanduser("~")
    files = known_hosts_files(config(), None, TOKENS)
    assert files.user == (Path(home, ".ssh/known_hosts"), Path(home, ".ssh/known_hosts2"))
    assert files.system == tuple(map(Path, DEFAULT_GLOBAL_FILES))
    files = known_hosts_files(
        config(UserKnownHostsFile=["%d/kh_%h_%p", "~/b"], GlobalKnownHostsFile=[]), None, TOKENS
    )
    assert files == KnownHostsFiles((Path("/home/op/kh_gpu01.lab_2222"), Path(home, "b")), ())
    # none is "no files", never "no check"; --known-hosts replaces only the user files
    none = known_hosts_files(config(UserKnownHostsFile=[]), None, TOKENS)
    assert none.user == () and none.system
    override = known_hosts_files(config(UserKnownHostsFile=["/x"]), Path("/k%d"), TOKENS)
    assert override.user == (Path("/k%d"),) and override.system == none.system
    assert expand_tokens("100%%", TOKENS) == "100%"
    with pytest.raises(ValueError, match="%z"):
        expand_tokens("/kh/%z", TOKENS)


def test_a_line_asyncssh_cannot_parse_still_lists_its_host(tmp_path: Path) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    good = key.export_public_key("openssh").decode().split()
    known = tmp_path / "known_hosts"
    known.write_text(
        "# comment\n"
        "odd.lab ssh-futuretype AAAAB3NzaC1yc2E\n"
        "broken.lab\n"
        f"[fine.lab]:2222 {good[0]} {good[1]}\n"
    )
    loaded = KnownHosts.load(KnownHostsFiles((known,), ()))
    assert loaded.listing("odd.lab", "127.0.0.11", 22) == [known]
    assert loaded.listing("fine.lab", "", 2222) == [known]
    assert loaded.listing("other.lab", "", 22) == []
    check = HostKeyCheck(loaded, accept_new=True, name="odd", jump_for=None, alias=None)
    assert not check.judge("odd.lab", "127.0.0.11", 22, key.convert_to_public())
    assert check.verdict == "changed"  # not "unknown, accept": OpenSSH may know that key


def test_a_key_filed_under_the_address_vouches_for_no_name(tmp_path: Path) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    algo, blob = key.export_public_key("openssh").decode().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"127.0.0.17 {algo} {blob}\n")
    loaded = KnownHosts.load(KnownHostsFiles((known,), ()))
    assert loaded.listing("127.0.0.17", "127.0.0.17", 22) == [known]
    assert loaded.listing("gpu07.lab", "127.0.0.17", 22) == []  # matched by name only
