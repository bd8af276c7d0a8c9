"""``--web.config.file`` followed while the exporter runs, as the exporters that share its
format do (the exporter-toolkit reads the file again for every request).

Every connection asks ``current()`` before its TLS handshake: a ``stat`` of the file and
of the certificate, key and CA files it names (nothing is read) tells whether one changed
since they were read; if one did, the file is read and checked again, so a rotated
certificate or a revoked password holds from the next connection on. SIGHUP calls
``reload``, which reads it whatever the stats say. A new file that cannot be used (not
YAML, a key that does not match its certificate, or one the exporter refuses, e.g. TLS
turned off while it listens with TLS) leaves the config in force and says why, once per
change: a file caught half-written, or a certificate replaced before its key, is taken
when the rest arrives.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from gpudash.cli import webconfig
from gpudash.cli.webconfig import WebConfig

log = logging.getLogger("gpudash.cli.exporter")

# (path, (device, inode, size, mtime, ctime) or None if it cannot be stat'ed), each file
Stamp = tuple[tuple[str, tuple[int, int, int, int, int] | None], ...]
# why a new config that loads is refused in place of the old one, or None
Check = Callable[[WebConfig, WebConfig], str | None]


def stamp(paths: Iterable[Path]) -> Stamp:
    """What ``stat`` says of each file: any change to one (a rename over it, a rewrite,
    a ``touch``) changes this."""
    out: list[tuple[str, tuple[int, int, int, int, int] | None]] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append((str(path), None))
        else:
            out.append((str(path), (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                                    st.st_ctime_ns)))
    return tuple(out)


def _accept_any(old: WebConfig, new: WebConfig) -> str | None:
    return None


class WebConfigFile:
    """The web config its files hold now (``current``), read again when they change."""

    def __init__(self, path: Path, *, check: Check = _accept_any,
                 say: Callable[[str], None] = log.warning) -> None:
        """Read ``path`` (``WebConfigError`` if it cannot be used)."""
        self.path = path
        self.check = check
        self.say = say
        self.reloads = 0  # new configs taken (for tests)
        before = stamp([path])
        self.config = webconfig.load(path)
        self._stamp = self._stamped(before, self.config)

    def current(self) -> WebConfig:
        """The config in force, read again first if one of its files changed."""
        if stamp(self._paths(self.config)) != self._stamp:
            self.reload("changed")
        return self.config

    def reload(self, why: str) -> bool:
        """Read the file again now; keep the config in force if the new one cannot be
        used, and say which happened. True if a new config was taken."""
        before = stamp(self._paths(self.config))  # before reading: a change meanwhile is seen
        self._stamp = before  # a file that failed is not read again until it changes
        try:
            new = webconfig.load(self.path)
        except webconfig.WebConfigError as exc:
            problem: str | None = str(exc)
        else:
            problem = self.check(self.config, new)
        if problem is not None:
            self.say(f"gpudash: warning: web config not reloaded ({why}): {problem}; kept "
                     f"the one in force ({self.config.describe})")
            return False
        self.config, self._stamp = new, self._stamped(before, new)
        self.reloads += 1
        self.say(f"gpudash exporter: web config {self.path} reloaded ({why}): {new.describe}")
        return True

    def _paths(self, config: WebConfig) -> list[Path]:
        return [self.path, *config.files]

    def _stamped(self, before: Stamp, config: WebConfig) -> Stamp:
        """The stamp of what ``config`` was read from: the one taken before reading, if it
        covers the same files; else one taken now (the files it names changed: a change
        to the new ones in the instant since they were read is seen at the next change)."""
        paths = self._paths(config)
        return before if [p for p, _ in before] == [str(p) for p in paths] else stamp(paths)
