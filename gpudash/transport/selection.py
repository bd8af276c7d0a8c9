"""Which hosts: the command line's names, a hosts file, and globs over the ssh config.

    gpudash gpu01 gpu02                 # names as typed
    gpudash --hosts-file fleet.txt      # one per line, '#' starts a comment
    gpudash 'gpu*'                      # every concrete Host of the ssh config that matches

A glob (``*``, ``?``, ``[...]``) is matched against the *concrete* ``Host`` names of the ssh
config (and the files it ``Include``s): names without wildcards or negation, so
``Host gpu*`` itself never becomes a host. Errors are ``HostSelectionError`` with a message
for the operator; the CLI turns them into a usage error (exit 2) before contacting anyone.
The config is checked as ssh checks it before it is read (``sshconfig``): one another
user could have written is ``UnsafeSshConfig`` (a refusal to connect, exit 3).
"""

from __future__ import annotations

import fnmatch
import glob
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from gpudash.transport.sshconfig import (
    MAX_INCLUDE_DEPTH,
    ConfigSyntaxError,
    default_config,
    directives,
    read_config,
)

GLOB_CHARS = frozenset("*?[")


class HostSelectionError(ValueError):
    """The hosts asked for cannot be worked out; the message says why, for the operator."""


def is_glob(name: str) -> bool:
    """A host pattern (``gpu*``, ``root@gpu0?``), not a name; ``ssh://`` URLs never are
    (``ssh://root@[::1]:22``)."""
    if name.startswith("ssh://"):
        return False
    return any(c in GLOB_CHARS for c in name.rpartition("@")[2])


def read_hosts_file(path: Path) -> list[str]:
    """The hosts in ``path``: one per line; blank lines and ``#`` comments (whole-line or
    after the name) are skipped. A line with two words is an error, naming the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise HostSelectionError(f"cannot read hosts file {path}: {exc}") from None
    hosts: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if len(line.split()) != 1:
            raise HostSelectionError(
                f"{path}:{number}: one host per line, not {line!r}")
        hosts.append(line)
    if not hosts:
        raise HostSelectionError(f"hosts file {path} names no host")
    return hosts


def ssh_config_hosts(config: Path | None = None) -> list[str]:
    """The concrete ``Host`` names of an ssh config and its ``Include``s, in file order."""
    path = config if config is not None else default_config()
    names: list[str] = []
    _read_config(path.expanduser(), names, depth=0, user=config is None)
    return _unique(names)


def _read_config(path: Path, names: list[str], *, depth: int, user: bool) -> None:
    if depth > MAX_INCLUDE_DEPTH:
        raise HostSelectionError(f"{path}: Include nested more than {MAX_INCLUDE_DEPTH} deep")
    try:  # ~/.ssh/config and every Include as ssh checks them (not --ssh-config itself)
        text = read_config(path, checked=user or depth > 0)
    except FileNotFoundError:
        if depth == 0:
            raise HostSelectionError(
                f"no ssh config at {path} to expand host globs against") from None
        return  # a missing Include is not an error for OpenSSH either
    except OSError as exc:
        raise HostSelectionError(f"cannot read ssh config {path}: {exc}") from None
    try:
        lines = directives(path, text)
    except ConfigSyntaxError as exc:
        raise HostSelectionError(str(exc)) from None
    for keyword, args in lines:
        if keyword == "host":
            names += [a for a in args if not a.startswith("!") and not is_glob(a)]
        elif keyword == "include":
            for pattern in args:
                for included in _include_paths(pattern, path, user=user):
                    _read_config(included, names, depth=depth + 1, user=user)


def _include_paths(pattern: str, parent: Path, *, user: bool) -> list[Path]:
    """OpenSSH: relative Include paths are under ~/.ssh for user configs, else /etc/ssh;
    for a config given with -F/--ssh-config we take its own directory."""
    expanded = os.path.expanduser(pattern)
    if not os.path.isabs(expanded):
        base = Path.home() / ".ssh" if user else parent.parent
        expanded = str(base / expanded)
    return [Path(p) for p in sorted(glob.glob(expanded))]


def select_hosts(
    names: Sequence[str], hosts_file: Path | None = None, ssh_config: Path | None = None
) -> list[str]:
    """The hosts to watch, in order, each once: ``names`` then the hosts file's, with every
    glob replaced by the ssh config's concrete Host names it matches (an error if none)."""
    wanted: list[str] = list(names)
    if hosts_file is not None:
        wanted += read_hosts_file(hosts_file)
    concrete: list[str] | None = None
    out: list[str] = []
    for name in wanted:
        if is_glob(name):
            if concrete is None:
                concrete = ssh_config_hosts(ssh_config)
            user, at, pattern = name.rpartition("@")  # root@gpu* -> root@gpu01, ...
            matched = [f"{user}{at}{c}" for c in concrete if fnmatch.fnmatchcase(c, pattern)]
            if not matched:
                where = ssh_config or default_config()
                raise HostSelectionError(
                    f"no concrete Host in {where} matches {name!r}"
                    + (f" (known: {', '.join(concrete[:8])}"
                       f"{', …' if len(concrete) > 8 else ''})" if concrete else ""))
            out += matched
        else:
            out.append(name)
    return _unique(out)


def _unique(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))
