"""Reaching hosts: this machine (``LocalSource``) or a remote one over SSH.

``open_source`` picks one from what the operator typed (``gpudash.feed`` keeps its
snapshots coming across dropped links). Nothing here prints or notifies: errors are
typed ``SourceError``s and state changes go to a callback.

Inside: a source is a ``Connection`` (``link``: SSH or local; how to reach the host and
run programs there) plus the ``Collector`` its probe chose (``collectors``: Python or
the shell fallback; how to read and act on the host).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudash.protocol.source import HostSource
from gpudash.transport.local import LocalSource

if TYPE_CHECKING:
    from gpudash.transport.ssh import SshSource, parse_target


def __getattr__(name: str) -> Any:
    # The SSH side (asyncssh, cryptography: ~15 MB resident) is imported when a remote
    # host is first named, not by a dashboard of this machine only.
    if name in ("SshSource", "parse_target"):
        from gpudash.transport import ssh

        return getattr(ssh, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "LocalSource",
    "SshSource",
    "open_source",
    "parse_target",
]


def open_source(
    target: str | None,
    *,
    interval: float = 1.0,
    sudo: bool = False,
    accept_new_host_key: bool = False,
    ssh_config: Path | None = None,
    known_hosts: Path | None = None,
    read_only: bool = False,
) -> HostSource:
    """The source for ``target``: ``None``/``"local"`` is this machine, else SSH.

    Nothing is contacted until the first ``stream()`` or control call. ``interval`` is
    the default the caller will stream at; it is validated here.
    """
    if not 0.05 <= interval <= 3600:
        raise ValueError(f"interval out of range: {interval}")
    if target is None or target == "local":
        # one process: the stream collector runs in a thread of this one (``inprocess``)
        return LocalSource(sudo=sudo, read_only=read_only, in_process=True)
    from gpudash.transport.ssh import SshSource

    return SshSource(
        target,
        sudo=sudo,
        read_only=read_only,
        accept_new_host_key=accept_new_host_key,
        ssh_config=ssh_config,
        known_hosts=known_hosts,
    )
