"""The demo's unit files: what ``systemctl cat`` shows, gpudash's drop-in on its simulated
disk, and ``daemon-reload`` applying it to the unit's settings, as systemd would."""

from __future__ import annotations

from gpudash.demo.records import SimUnit
from gpudash.domain import dropin

# the unit's settings a drop-in of gpudash's may change: key -> SimUnit field
SETTINGS = {
    "KillMode": "kill_mode",
    "Restart": "restart",
    "RestartSec": "restart_sec",
    "StartLimitIntervalSec": "start_limit_interval_s",
    "StartLimitBurst": "start_limit_burst",
    "TimeoutStopSec": "timeout_stop_s",
    "SendSIGKILL": "send_sigkill",
}


def _seconds(value: str) -> float:
    return float(value.removesuffix("s"))


def unit_file(u: SimUnit) -> str:
    """``systemctl cat``: the unit's own file, then gpudash's drop-in as it is on disk."""
    base = u.base_settings or _settings(u)
    command = u.server.cmdline() if u.server is not None else "python3 -m vllm.entrypoints"
    text = (f"# /etc/systemd/system/{u.name}\n[Unit]\nDescription={u.description}\n"
            f"StartLimitIntervalSec={base['start_limit_interval_s']:g}\n\n"
            f"[Service]\nExecStart=/usr/bin/{command}\nRestart={base['restart']}\n"
            f"RestartSec={base['restart_sec']:g}\nKillMode={base['kill_mode']}\n\n"
            "[Install]\nWantedBy=multi-user.target\n")
    if u.drop_in is not None:
        text += f"\n# {dropin.drop_in_path(u.name)}\n{u.drop_in}"
    return text


def _settings(u: SimUnit) -> dict[str, object]:
    return {f: getattr(u, f) for f in SETTINGS.values()}


def reload(u: SimUnit) -> None:
    """``daemon-reload``: the unit's settings are its own file's with the drop-in over them."""
    if u.base_settings is None:
        u.base_settings = _settings(u)
    for field, value in u.base_settings.items():
        setattr(u, field, value)
    for _section, key, value in dropin.parse(u.drop_in or ""):
        field = SETTINGS.get(key, "")
        if not field:
            continue
        if field in ("kill_mode", "send_sigkill", "restart"):
            setattr(u, field, value)
        elif field == "start_limit_burst":
            u.start_limit_burst = int(value)
        else:
            setattr(u, field, _seconds(value))
