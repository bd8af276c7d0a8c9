"""systemd units: their properties from one batched ``systemctl show``."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import TYPE_CHECKING

from .parsing import parse_systemctl_show
from .protocol import UNIT_PROPERTIES

if TYPE_CHECKING:
    from .protocol import Json


UNIT_TTL_S = 5.0  # unit properties are re-read at least this often, and on any change


class UnitReader:
    """Unit properties from ONE batched ``systemctl show`` when something changed."""

    def __init__(self, systemctl: str | None = None, run_dir: str = "/run/systemd/system") -> None:
        self.systemctl = systemctl or shutil.which("systemctl")
        self.booted = os.path.isdir(run_dir)
        self.last: dict[str, Json] = {}
        self.key: object = None
        self.read_at = 0.0

    @property
    def problem(self) -> str | None:
        if not self.booted:
            return "host is not running systemd: units unknown"
        if not self.systemctl:
            return "systemctl not found: units unknown"
        return None

    def read(
        self, names: set[str], key: object, force: bool = False
    ) -> tuple[list[Json], list[str]]:
        if self.problem:
            return [], [self.problem]
        if not names:
            return [], []
        now = time.monotonic()
        if not force and key == self.key and now - self.read_at < UNIT_TTL_S:
            return [self.last[n] for n in sorted(names) if n in self.last], []
        assert self.systemctl is not None
        try:
            done = subprocess.run(
                [self.systemctl, "show", "--no-pager", "-p", UNIT_PROPERTIES, "--", *sorted(names)],
                capture_output=True,
                text=True,
                encoding="utf-8",  # unit descriptions are anybody's bytes
                errors="replace",
                timeout=10,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return [], [f"systemctl show failed: {exc}"]
        self.last = {u["name"]: u for u in parse_systemctl_show(done.stdout)}
        self.key, self.read_at = key, now
        errors = []
        if done.returncode != 0 and not self.last:
            errors.append("systemctl show: " + done.stderr.strip()[:200])
        return [self.last[n] for n in sorted(names) if n in self.last], errors
