"""Which hosts: the command line's names, a hosts file, and globs over the ssh config.

    gpudash gpu01 gpu02                 # names as typed
    gpudash --hosts-file fleet.txt      # one per line, '#' starts a comment
    gpudash 'gpu*'                      # every concrete Host of the ssh config that matches

A glob (``*``, ``?``, ``[...]``) is matched against the *concrete* ``Host`` names of the ssh
config (and the files it ``Include``s): names without wildcards or negation, so
``Host gpu*`` itself never becomes a host. Errors are ``HostSelectionError`` with a message
for the operator; the CLI turns them into a usage error (exit 2) before contacting anyone.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
import shlex
from collections.abc import Iterable, Sequence
from pathlib import Path

MAX_INCLUDE_DEPTH = 16  # as OpenSSH's READCONF_MAX_DEPTH
GLOB_CHARS = frozenset("*?[")
# "Keyword args" or "Keyword=args" (OpenSSH allows one '=' with optional spaces around it)
_KEYWORD = re.compile(r"^(\w+)(?:\s*=\s*|\s+)(.*)$")


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


def default_ssh_config() -> Path:
    return Path.home() / ".ssh" / "config"


def ssh_config_hosts(config: Path | None = None) -> list[str]:
    """The concrete ``Host`` names of an ssh config and its ``Include``s, in file order."""
    path = config if config is not None else default_ssh_config()
    names: list[str] = []
    _read_config(path.expanduser(), names, depth=0, user=config is None)
    return _unique(names)


def _read_config(path: Path, names: list[str], *, depth: int, user: bool) -> None:
    if depth > MAX_INCLUDE_DEPTH:
        raise HostSelectionError(f"{path}: Include nested more than {MAX_INCLUDE_DEPTH} deep")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if depth == 0:
            raise HostSelectionError(
                f"no ssh config at {path} to expand host globs against") from None
        return  # a missing Include is not an error for OpenSSH either
    except (OSError, UnicodeDecodeError) as exc:
        raise HostSelectionError(f"cannot read ssh config {path}: {exc}") from None
    for keyword, args in _directives(path, text):
        if keyword == "host":
            names += [a for a in args if not a.startswith("!") and not is_glob(a)]
        elif keyword == "include":
            for pattern in args:
                for included in _include_paths(pattern, path, user=user):
                    _read_config(included, names, depth=depth + 1, user=user)


def _directives(path: Path, text: str) -> list[tuple[str, list[str]]]:
    """(keyword, its words) of each directive line of an ssh config, keyword lower-case."""
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        m = _KEYWORD.match(line) if line and not line.startswith("#") else None
        if m is None:
            continue
        try:
            out.append((m.group(1).lower(), shlex.split(m.group(2), comments=True)))
        except ValueError as exc:
            raise HostSelectionError(f"{path}:{number}: {exc}") from None
    return out


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
                where = ssh_config or default_ssh_config()
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
