"""Host keys as OpenSSH checks them: which known_hosts files, what they say, what to do.

One list of files per connection, built as ``ssh`` builds it (the config's
``UserKnownHostsFile`` / ``GlobalKnownHostsFile``, ``--known-hosts`` replacing the user
files as ``-o UserKnownHostsFile`` would, OpenSSH's defaults otherwise). The files are
read once, off the event loop, and the one parsed result is both what asyncssh trusts
and what decides "unknown" against "changed" here, so the two can never disagree.
There is no unchecked connection: ``none`` means "no files", so every key is unknown.
"""

from __future__ import annotations

import base64
import contextlib
import getpass
import os
import socket
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncssh

from gpudash.protocol.source import HostKeyError
from gpudash.record import record
from gpudash.state import files

DEFAULT_USER_FILES = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
DEFAULT_GLOBAL_FILES = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")


def _ssh_string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


# A key no server has: it stands in for a known_hosts line whose key asyncssh cannot
# parse (a type it lacks), so that host counts as listed ("changed"), never as unknown.
_PLACEHOLDER_KEY = "ssh-ed25519 " + base64.b64encode(
    _ssh_string(b"ssh-ed25519") + _ssh_string(b"gpudash: a stand-in, not a key!!")
).decode("ascii")


@record
class KnownHostsFiles:
    """The files a connection's host key is checked against, in OpenSSH's order."""

    user: tuple[Path, ...]  # accept-new records a new key in the first of these
    system: tuple[Path, ...]

    @property
    def all(self) -> tuple[Path, ...]:
        return self.user + self.system

    def described(self) -> str:
        return ", ".join(str(p) for p in self.all) or "no files (UserKnownHostsFile none)"


def expand_tokens(text: str, tokens: dict[str, str]) -> str:
    """OpenSSH's ``%`` tokens (``%d``, ``%h``, ``%%`` ...) and a leading ``~``."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "%":
            token = text[i + 1 : i + 2]
            if token == "%":
                out.append("%")
            elif token in tokens:
                out.append(tokens[token])
            else:
                raise ValueError(f"unknown token %{token} in {text!r}")
            i += 2
            continue
        out.append(char)
        i += 1
    return os.path.expanduser("".join(out))


def local_tokens(
    *, host: str, original: str, port: int, user: str, alias: str | None
) -> dict[str, str]:
    """Token values for one connection (the ones OpenSSH allows in known_hosts paths)."""
    local = socket.gethostname()
    return {
        "d": os.path.expanduser("~"),
        "u": getpass.getuser(),
        "i": str(os.getuid()),
        "l": local,
        "L": local.split(".")[0],
        "h": host,
        "n": original,
        "p": str(port),
        "r": user,
        "k": alias or original,
    }


def known_hosts_files(
    config_get: Callable[[str, Any], Any], override: Path | None, tokens: dict[str, str]
) -> KnownHostsFiles:
    """The files as ``ssh`` would use them with this config (``config_get`` is the
    config's ``get``: ``()`` when unset, ``[]`` for ``none``, else a list of paths)."""
    user_setting = config_get("UserKnownHostsFile", ())
    system_setting = config_get("GlobalKnownHostsFile", ())
    user = DEFAULT_USER_FILES if user_setting == () else tuple(user_setting)
    system = DEFAULT_GLOBAL_FILES if system_setting == () else tuple(system_setting)
    return KnownHostsFiles(
        # --known-hosts is a path as typed, not a config value: no tokens in it
        (override.expanduser(),) if override is not None else _paths(user, tokens),
        _paths(system, tokens),
    )


def _paths(values: tuple[str, ...], tokens: dict[str, str]) -> tuple[Path, ...]:
    return tuple(Path(expand_tokens(value, tokens)) for value in values)


class _ByName(asyncssh.SSHKnownHosts):
    """Entries matched by the host's name only (its HostKeyAlias, or its HostName), as
    OpenSSH does by default (CheckHostIP no): a key filed under the address alone,
    or under another alias of the same address, vouches for nothing here."""

    def match(self, host: str, addr: str, port: int | None) -> Any:
        return super().match(host, "", port)


class KnownHosts:
    """The parsed files. Built with ``load`` (blocking: run it in a thread)."""

    def __init__(self, files: KnownHostsFiles) -> None:
        self.files = files
        self.trusted = _ByName()  # what asyncssh checks against
        self._per_file: list[tuple[Path, Any]] = []

    @classmethod
    def load(cls, files: KnownHostsFiles) -> KnownHosts:
        known = cls(files)
        for path in files.all:
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except FileNotFoundError:
                continue
            except OSError as exc:
                # Unreadable is not "empty": a key it may list must not look unknown.
                raise HostKeyError(f"cannot read known_hosts file {path}: {exc}") from None
            entries = _ByName()
            for line in text.splitlines():
                for target in (known.trusted, entries):
                    _load_line(target, line)
            known._per_file.append((path, entries))
        return known

    def listing(self, host: str, addr: str, port: int) -> list[Path]:
        """The files with any entry (key, CA, revocation) for this host."""
        wanted = None if port == 22 else port
        return [
            path for path, entries in self._per_file if any(entries.match(host, addr, wanted)[:3])
        ]

    def record(self, host: str, port: int, key: Any) -> Path:
        """Append ``key`` for ``host`` to the first user file (blocking), as OpenSSH's
        accept-new does. Returns the file."""
        path = self.files.user[0]
        algo, blob = key.export_public_key("openssh").decode().split()[:2]
        # By the state-file rules: never through a link, a regular file of ours (0600 when
        # made here), in a directory only we can write (as ssh wants ~/.ssh); an existing
        # file's and directory's modes are OpenSSH's business and left as they are.
        files.append_line(path, f"{entry_name(host, port)} {algo} {blob}\n".encode(),
                          sync=True, private_dir=False, enforce_mode=False)
        return path


def _load_line(target: Any, line: str) -> None:
    """Add one known_hosts line. asyncssh skips a key it cannot parse (and rejects a
    malformed line): either way the line's hosts get the placeholder key as well."""
    words = line.split()
    if not words or words[0].startswith("#"):
        return
    with contextlib.suppress(ValueError):
        target.load(line)
    marker = words[0].startswith("@")
    pattern, data = (words[1:2], words[2:]) if marker else (words[:1], words[1:])
    if pattern and not _parses(" ".join(data)):
        target.load(f"{pattern[0]} {_PLACEHOLDER_KEY}")


def _parses(data: str) -> bool:
    for reader in (asyncssh.import_public_key, asyncssh.import_certificate):
        try:
            reader(data)
            return True
        except (asyncssh.KeyImportError, ValueError):
            pass
    return False


def entry_name(host: str, port: int) -> str:
    """How known_hosts names a host: ``host``, or ``[host]:port`` off port 22."""
    return host if port == 22 else f"[{host}]:{port}"


class HostKeyCheck:
    """The decision for one connection's host key, made when asyncssh found no trusted
    key for it; ``error()`` words a refusal, naming the host and the files."""

    def __init__(
        self,
        known: KnownHosts,
        *,
        accept_new: bool,
        name: str,
        jump_for: str | None,
        alias: str | None,
    ) -> None:
        self.known = known
        self.accept_new = accept_new
        self.name = name  # the host as the operator typed it (a config alias, a target)
        self.jump_for = jump_for  # the host this one is a jump host for, if it is one
        self.alias = alias  # HostKeyAlias: the name keys are filed under, without a port
        self.verdict: str | None = None  # "changed", "unknown", "nowhere", "new"
        self.listed_in: list[Path] = []
        self.entry = ""
        self.new_key: tuple[str, int, Any] | None = None

    def judge(self, host: str, addr: str, port: int, key: Any) -> bool:
        """Whether to trust ``key``: only a host no file lists, with accept-new, and a
        user file to record it in."""
        self.listed_in = self.known.listing(host, addr, port)
        # OpenSSH files keys under a HostKeyAlias without a port
        port = 22 if self.alias is not None and host == self.alias else port
        self.entry = entry_name(host, port)
        if self.listed_in:
            self.verdict = "changed"
        elif not self.accept_new:
            self.verdict = "unknown"
        elif not self.known.files.user:
            self.verdict = "nowhere"
        else:
            self.verdict = "new"
            self.new_key = (host, port, key)
        return self.verdict == "new"

    def error(self, reason: str | None = None) -> HostKeyError:
        files = self.known.files.described()
        role = f"; jump host for {self.jump_for}" if self.jump_for else ""
        if self.verdict == "changed":
            where = " ".join(f"-f '{p}'" for p in self.listed_in[:1])
            return HostKeyError(
                f"HOST KEY FOR {self.name} ({self.entry}{role}) HAS CHANGED: it does not "
                f"match {', '.join(map(str, self.listed_in))}. This may be an attack, or the "
                f"host was reinstalled. Verify the new key out of band, then remove the old "
                f"one with `ssh-keygen -R '{self.entry}' {where}`. Refusing to connect."
            )
        label = self.name + (f" (jump host for {self.jump_for})" if self.jump_for else "")
        if self.verdict == "nowhere":
            return HostKeyError(
                f"host key for {label} is not in any known_hosts file, and "
                f"UserKnownHostsFile none leaves nowhere to record it: gpudash never "
                f"connects without checking the key. Add it to a known_hosts file, or pass "
                f"--known-hosts FILE"
            )
        if self.verdict == "unknown":
            return HostKeyError(
                f"host key for {label} is not in any known_hosts file ({files}); verify it "
                f"and run `ssh {self.name}` once, or pass --accept-new-host-key"
            )
        return HostKeyError(
            f"host key for {label} was refused ({reason or 'not trusted'}); "
            f"checked against {files}"
        )
