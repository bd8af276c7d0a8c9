"""The operator's settings: ``$XDG_CONFIG_HOME/gpudash/config.toml``.

Every key is optional; a flag on the command line wins over the file::

    models = ["vllm-*", "sglang@*"]   # unit name globs that are model servers, beside the
                                      # services whose ExecStart runs a known server
    interval = 2.0                    # seconds between samples (--interval)
    theme = "gpudash-day"             # the theme until one is chosen with T (kept over
                                      # it: gpudash.state.kept); --theme wins over both
    read_only = true                  # --read-only (--no-read-only for one run)
    sudo = true                       # --sudo (--no-sudo)
    accept_new_host_key = false       # --accept-new-host-key
    ssh_config = "~/.ssh/config.gpu"  # --ssh-config
    known_hosts = "~/.ssh/known_hosts.gpu"  # --known-hosts
    log_level = "info"                # --log-level

    [groups]                          # `gpudash @prod`: every host of the group
    prod = ["gpu0*", "root@10.1.230.174"]

    [prometheus]                      # `gpudash --prometheus`: the fleet from Prometheus
    url = "https://prometheus.example:9090"   # (its keys: gpudash.state.promconfig)

A bad entry is reported in one line (the file, its line, why) and the rest is used, except
where a mistake would fail open: a file that cannot be parsed, or a safety setting
(``SAFETY``: read-only, sudo, host keys, the ssh files) whose value cannot be read, refuses
to start (exit 2) unless that setting is given on the command line for this run.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import tomllib
from dataclasses import field
from pathlib import Path
from typing import Any

from gpudash.record import record
from gpudash.state.logfile import LEVELS as LOG_LEVELS
from gpudash.state.promconfig import PromSettings, PromSettingsError, parse_table

GROUP_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
# A bad value of one of these fails closed: `read_only = "yes"` once left every action key
# live under a toast that said the setting was ignored.
SAFETY = ("read_only", "sudo", "accept_new_host_key", "ssh_config", "known_hosts")
UNKNOWN = "unknown setting"
MAX_GROUP_HOSTS = 4096
INTERVAL_RANGE = (0.05, 3600.0)


@record
class Settings:
    models: tuple[str, ...] = ()  # unit name globs
    interval: float | None = None
    theme: str | None = None
    read_only: bool | None = None
    sudo: bool | None = None
    accept_new_host_key: bool | None = None
    ssh_config: Path | None = None
    known_hosts: Path | None = None
    log_level: str | None = None
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    prometheus: PromSettings = PromSettings()

    def defaults(self) -> dict[str, Any]:
        """The command line's defaults that this file sets (argparse dest -> value)."""
        out: dict[str, Any] = {}
        # not theme: the one kept from the last run comes between it and --theme
        for name in ("interval", "read_only", "sudo", "accept_new_host_key",
                     "ssh_config", "known_hosts", "log_level"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpudash" / "config.toml"


def _text(value: object, limit: int = 256) -> bool:
    return isinstance(value, str) and bool(value.strip()) and len(value) <= limit


def _check(key: str, value: object) -> tuple[object, str | None]:
    """(the value as Settings holds it, or why it is refused)."""
    if key == "models":
        if isinstance(value, list) and all(_text(m) for m in value):
            return tuple(m.strip() for m in value), None
        return None, 'expected a list of unit name globs (e.g. ["vllm-*"])'
    if key == "interval":
        low, high = INTERVAL_RANGE
        if (isinstance(value, int | float) and not isinstance(value, bool)
                and math.isfinite(value) and low <= value <= high):
            return float(value), None
        return None, f"expected seconds from {low:g} to {high:g}"
    if key in ("read_only", "sudo", "accept_new_host_key"):
        return (value, None) if isinstance(value, bool) else (None, "expected true or false")
    if key == "theme":
        return (str(value).strip(), None) if _text(value) else (None, "expected a theme name")
    if key in ("ssh_config", "known_hosts"):
        if _text(value, 4096):
            return Path(str(value)).expanduser(), None
        return None, "expected a file path"
    if key == "log_level":
        if value in LOG_LEVELS:
            return value, None
        return None, f"expected one of {', '.join(LOG_LEVELS)}"
    if key in TABLES:
        return TABLES[key](value)
    return None, UNKNOWN


def _prometheus(value: object) -> tuple[object, str | None]:
    try:
        return parse_table(value), None
    except PromSettingsError as exc:
        return None, str(exc)


def _groups(value: object) -> tuple[object, str | None]:
    if not isinstance(value, dict):
        return None, 'expected a table of lists ([groups] prod = ["gpu0*"])'
    groups: dict[str, tuple[str, ...]] = {}
    for name, hosts in value.items():
        if not GROUP_NAME.fullmatch(name):
            return None, f"{name!r}: a group name is letters, digits, '_', '.', '-'"
        if not (isinstance(hosts, list) and 0 < len(hosts) <= MAX_GROUP_HOSTS
                and all(_text(h) and not h.startswith("@") for h in hosts)):
            return None, (f"{name}: expected a list of hosts or globs (not other groups), "
                          'e.g. ["gpu0*"]')
        groups[name] = tuple(h.strip() for h in hosts)
    return groups, None


TABLES = {"groups": _groups, "prometheus": _prometheus}


@record
class Problem:
    """One thing wrong with the settings file: where, and why."""

    path: Path
    key: str | None  # None: the whole file (it cannot be read or parsed)
    line: int | None
    why: str

    @property
    def fails_closed(self) -> bool:
        """Whether gpudash refuses to start over it (unless the command line decides)."""
        return self.key is None or self.key in SAFETY or self.near_safety is not None

    @property
    def near_safety(self) -> str | None:
        """The safety setting an unknown key looks like a typo of (``readonly``)."""
        if self.key is None or self.why != UNKNOWN:
            return None
        close = difflib.get_close_matches(self.key.replace("-", "_").lower(), SAFETY, n=1,
                                          cutoff=0.75)
        return close[0] if close else None

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else str(self.path)
        meant = f" (did you mean {self.near_safety}?)" if self.near_safety else ""
        return f"{where}: {self.key}: {self.why}{meant}" if self.key else f"{where}: {self.why}"


def _line_of(text: str, key: str) -> int | None:
    """The line that sets top-level ``key`` (1-based), for the message."""
    pattern = re.compile(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=")
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("["):
            return None  # past the top level: a table's own keys
        if pattern.match(line):
            return number
    return None


def load(path: Path | None = None) -> tuple[Settings, list[Problem]]:
    """The settings, and one problem per bad entry (the file stays usable where it can)."""
    target = path or config_path()
    if not target.is_file():
        return Settings(), []
    try:
        text = target.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        line = re.search(r"at line (\d+)", str(exc))
        return Settings(), [Problem(target, None, int(line[1]) if line else None,
                                    f"cannot be read: {exc}")]
    errors: list[Problem] = []
    kept: dict[str, Any] = {}
    for key in sorted(data):
        value, why = _check(key, data[key])
        if why is not None:
            errors.append(Problem(target, key, _line_of(text, key), why))
        else:
            kept[key] = value
    return Settings(**kept), errors
