"""The ssh config as ssh reads it: checked for its owner and modes before a line of it is
used, and walked through its ``Include`` lines.

A config can run commands as whoever reads it (``ProxyCommand``, ``Match exec``,
``LocalCommand``), and gpudash often runs as root. ``ssh`` refuses ("Bad owner or
permissions on ~/.ssh/config") a user config another user could have written, and so
does gpudash, with the same rule (OpenSSH's readconf.c, ``SSHCONF_CHECKPERM``):

* checked: ``~/.ssh/config`` and every file an ``Include`` names, from any config (also
  from one given with ``--ssh-config``, as ssh checks the includes of ``-F``). Not
  checked, as ssh does not check them: the file given with ``--ssh-config`` itself (the
  operator named it; ``-F /dev/null`` is how ssh is told to read none) and the system's
  ``/etc/ssh/ssh_config``, which asyncssh never reads;
* a checked file belongs to you (the real uid) or root, and neither group nor others may
  write it, except a group holding no user but you (Debian's and Ubuntu's ssh allow that
  for their one-user groups and umask 002, and so does gpudash).

One more check than ssh: every directory from the file up to your home directory (or
``/``) must pass the same rule, as sshd's ``safe_path`` walks them for
``authorized_keys``. ssh reads the very descriptor it checked; asyncssh opens the file
again by its name, later, so a directory another user can write would let them swap
the checked file for theirs in between. A sticky directory (``/tmp``) is the exception
``safe_path`` does not make: nobody else can rename or remove what is in it, and what is
in it on the way is checked in turn.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import shlex
import stat
from pathlib import Path

from gpudash.protocol.source import ConnectError

MAX_INCLUDE_DEPTH = 16  # as OpenSSH's READCONF_MAX_DEPTH
# "Keyword args" or "Keyword=args" (OpenSSH allows one '=' with optional spaces around it)
_KEYWORD = re.compile(r"^(\w+)(?:\s*=\s*|\s+)(.*)$")


class UnsafeSshConfig(ConnectError):
    """An ssh config (or a file it includes) another user could have written: nothing is
    connected; the message names the file and what is wrong, as ssh would refuse it."""


class ConfigSyntaxError(ValueError):
    """A line of an ssh config that cannot be split into words (asyncssh refuses it too)."""


def default_config() -> Path:
    """The user config asyncssh reads when none is given: ``$HOME/.ssh/config``."""
    return Path("~", ".ssh", "config").expanduser()


def check_ssh_config(explicit: Path | None) -> None:
    """Raise ``UnsafeSshConfig`` unless every config file ssh would check is safe to use:
    ``~/.ssh/config`` when ``explicit`` is None, and every file either one includes."""
    if explicit is not None:
        _walk(explicit.expanduser(), checked=False, depth=0)
    else:
        _walk(default_config(), checked=True, depth=0)


def _walk(path: Path, *, checked: bool, depth: int) -> None:
    if depth > MAX_INCLUDE_DEPTH:  # OpenSSH: "Too many recursive configuration includes"
        raise UnsafeSshConfig(f"{path}: Include nested more than {MAX_INCLUDE_DEPTH} deep "
                              "(an Include loop?); ssh refuses it too")
    try:
        text = read_config(path, checked=checked)
    except OSError:
        return  # asyncssh reads nothing of it either
    for keyword, args in directives(path, text, strict=False):
        if keyword == "include":
            for pattern in args:
                for included in include_paths(pattern):
                    _walk(included, checked=True, depth=depth + 1)


def read_config(path: Path, *, checked: bool) -> str:
    """The text of the config at ``path``, read from the descriptor that was checked when
    ``checked`` (``UnsafeSshConfig`` if it fails the check); ``OSError`` if unreadable."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)  # a FIFO cannot hang it
    try:
        st = os.fstat(fd)
        if checked:
            why = _unsafe(st)
            if why is not None:
                raise UnsafeSshConfig(f"Bad owner or permissions on {path}: {why}; ssh "
                                      "refuses it too, as another user could make it run "
                                      f"commands as you ({_fix(path, why)})")
            _check_directories(path)
        return _read(fd).decode("utf-8", "replace") if stat.S_ISREG(st.st_mode) else ""
    finally:
        os.close(fd)


def _read(fd: int) -> bytes:
    """All of it, as asyncssh reads it: an Include anywhere in it counts."""
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def directives(path: Path, text: str, *, strict: bool = True
               ) -> list[tuple[str, list[str]]]:
    """(keyword, its words) of each directive line of an ssh config, keyword lower-case.
    A line that cannot be split is ``ConfigSyntaxError``, or skipped if not ``strict``
    (the check then looks at every other line: what asyncssh reads is never less)."""
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        m = _KEYWORD.match(line) if line and not line.startswith("#") else None
        if m is None:
            continue
        try:
            out.append((m.group(1).lower(), shlex.split(m.group(2), comments=True)))
        except ValueError as exc:
            if strict:
                raise ConfigSyntaxError(f"{path}:{number}: {exc}") from None
    return out


def include_paths(pattern: str) -> list[Path]:
    """The files asyncssh reads for ``Include pattern``: a relative pattern is under
    ``~/.ssh`` (as OpenSSH does for user configs and ``-F``), then globbed."""
    path = Path(pattern).expanduser()
    if path.anchor:
        base, rest = Path(path.anchor), str(Path(*path.parts[1:]))
    else:
        base, rest = Path("~", ".ssh").expanduser(), pattern
    try:
        return sorted(p for p in base.glob(rest) if p.is_file())
    except (OSError, ValueError):
        return []  # a pattern glob refuses: asyncssh fails on it before anything is used


def _check_directories(path: Path) -> None:
    """Every directory from ``path`` up to the home directory (or ``/``), as written and
    as resolved (a link's own directory and its target's), must pass the rule too."""
    home = os.path.abspath(Path.home())
    stops = {home, os.path.realpath(home)}
    seen: set[str] = set()
    for start in (os.path.abspath(path), os.path.realpath(path)):
        at = start
        while (parent := os.path.dirname(at)) != at and parent not in seen:
            at = parent
            seen.add(at)
            try:
                why = _unsafe(os.stat(at), directory=True)
            except OSError as exc:
                why = f"not to be checked ({exc.strerror})"
            if why is not None:
                raise UnsafeSshConfig(
                    f"Bad owner or permissions on {path}: its directory {at} is {why}, so "
                    f"another user could put their file in its place ({_fix(Path(at), why)})")
            if at in stops:
                break


def _unsafe(st: os.stat_result, *, directory: bool = False) -> str | None:
    """Why a file or directory with status ``st`` is not safe to read as you, or None."""
    uid = os.getuid()
    if st.st_uid not in (0, uid):
        return f"owned by uid {st.st_uid} ({_user(st.st_uid)}), not by you (uid {uid}) or root"
    mode = stat.S_IMODE(st.st_mode)
    if directory and mode & stat.S_ISVTX:
        return None  # others may add names to it, never replace one that is not theirs
    writers = []
    if mode & 0o020 and not _only_member(st.st_gid, uid, st.st_uid):
        writers.append(f"group {_group(st.st_gid)}")
    if mode & 0o002:
        writers.append("others")
    if writers:
        return f"writable by {' and '.join(writers)} (mode {mode:04o})"
    return None


def _only_member(gid: int, uid: int, owner: int) -> bool:
    """Debian's ``secure_permissions``: the group holds one user, ``uid``: as its primary
    group, or as the group's one listed member (the owner)."""
    try:
        group = grp.getgrgid(gid)
        owner_name = pwd.getpwuid(owner).pw_name
    except KeyError:
        return False
    members = 0
    for account in pwd.getpwall():
        if account.pw_gid == gid:
            members += 1
            if account.pw_uid != uid:
                return False
    if group.gr_mem:
        members += 1
        if group.gr_mem != [owner_name]:
            return False
    return members > 0


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "no such user"


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _fix(path: Path, why: str) -> str:
    if why.startswith("owned"):
        return f"read it, then: chown {os.getuid()} {path}"
    if why.startswith("writable"):
        return f"fix: chmod go-w {path}"
    return f"check {path}"
