"""Ready URLs: a GET on this host's loopback, counted only from the unit's (or the
container's) own process at the other end of the probe's own connection (``proof``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .parsing import cgroup_path, container_of_cgroup, unit_of_cgroup, user_of_cgroup
from .procfs import _read, read_whole
from .proof import owned_get

if TYPE_CHECKING:
    from .collector import HostCollector


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def http_get(url: str, timeout_s: float) -> tuple[int | None, str | None]:
    """(status, None) or (None, why) for a GET of ``url``, which must be plain http to
    this host's loopback (a model server's /health). No proxy, no redirect followed: the
    answer is the server's own, and nothing but loopback is ever asked."""
    import urllib.error
    import urllib.parse
    import urllib.request

    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or parts.hostname not in LOOPBACK_HOSTS:
        return None, "not a loopback http URL"

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None  # the 3xx itself is the answer

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), NoRedirect())
    try:
        with opener.open(url, timeout=max(0.1, min(float(timeout_s), 30.0))) as answer:
            return int(answer.status), None
    except urllib.error.HTTPError as exc:
        return int(exc.code), None
    except Exception as exc:  # noqa: BLE001 - every failure is an answer: "why not"
        reason = getattr(exc, "reason", exc)
        return None, str(getattr(reason, "strerror", None) or reason or type(exc).__name__)[:200]




LISTEN_SCAN_MAX = 20000  # descriptors looked at to find who listens on a port


def listening_inodes(port: int, proc: str = "/proc") -> set[str]:
    """The socket inodes listening on TCP ``port`` (v4 and v6) in this network namespace."""
    found: set[str] = set()
    for name in ("tcp", "tcp6"):
        for line in (read_whole(f"{proc}/net/{name}", 1 << 26) or "").splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and fields[1].rsplit(":", 1)[-1] == (
                    f"{port:04X}"):
                found.add(fields[9])
    return found


def _port(url: str) -> int:
    import urllib.parse

    try:
        return urllib.parse.urlsplit(url).port or 80
    except ValueError:
        return 0


def unit_get(url: str, timeout_s: float, unit: str, collector: HostCollector
             ) -> tuple[int | None, str | None]:
    """GET ``url`` for ``unit``: its answer counts only from a process of the unit's own
    cgroup at the other end of the probe's connection (``proof.owned_get``)."""
    port = _port(url)
    main = collector.units.last.get(unit, {}).get("main_pid")
    return owned_get(
        url, timeout_s, lambda pid, comm, cgroup: unit_listener_refusal(
            port, unit, pid, comm, cgroup), collector.proc.proc,
        first=[main] if isinstance(main, int) else [])


def container_get(url: str, timeout_s: float, container_id: str, runtime: str,
                  collector: HostCollector) -> tuple[int | None, str | None]:
    """GET ``url`` for the container: its answer counts only from the container's own
    process or its runtime's port forwarder at the other end of the probe's connection,
    in this network namespace or (behind a DNAT) the container's own."""
    port = _port(url)
    main = collector.containers.last.get(container_id, {}).get("main_pid")
    main = main if isinstance(main, int) else None
    proc = collector.proc.proc
    uid, own = None, None
    if main is not None:  # a rootless podman's forwarders run as the container's user
        try:
            uid = os.stat(f"{proc}/{main}").st_uid
        except OSError:
            uid = None
        own = cgroup_path(_read(f"{proc}/{main}/cgroup") or "")
    return owned_get(
        url, timeout_s, lambda pid, comm, cgroup: container_listener_refusal(
            port, container_id, runtime, pid, comm, cgroup, uid, own), proc,
        first=[main] if main else [], other_nets=[main] if main else [])


def unit_listener_refusal(port: int, unit: str, pid: int, comm: str, cgroup_text: str
                          ) -> str | None:
    """Why pid ``pid`` (its ``comm`` and ``/proc/PID/cgroup`` text as read on the host),
    listening on ``port``, proves nothing for ``unit``; None when it is the unit's own.
    One rule for the Python collector and the shell fallback."""
    owner = unit_of_cgroup(cgroup_path(cgroup_text))
    if owner == unit:
        return None
    name = comm.strip()[:64] or "?"
    return (f"port {port} is not {unit}'s: pid {pid} ({name}, "
            f"{owner or 'no unit'}) listens on it")


DOCKER_FORWARDERS = ("docker-proxy",)
# podman's port forwarders: conmon (rootful), rootlessport, pasta, slirp4netns (rootless);
# comm is cut at 15 characters
PODMAN_FORWARDERS = ("conmon", "rootlessport", "rootlessport-ch", "pasta", "pasta.avx2",
                     "slirp4netns")


def container_listener_refusal(port: int, container_id: str, runtime: str, pid: int,
                               comm: str, cgroup_text: str, user_uid: int | None = None,
                               own_path: str | None = None) -> str | None:
    """Why pid ``pid`` listening on ``port`` proves nothing for the container, or None when
    the listener is the container's own: a process of its cgroup (host network), or its
    runtime's port forwarder (docker-proxy in the docker daemon's cgroup; podman's conmon
    of this container, or a rootless forwarder of this container or of the rootless
    user ``user_uid``'s podman). Decided on what the host said (comm, cgroup text) only;
    ``own_path``, where known, is the cgroup of the container's main process.

    A user's own systemd (``user@UID.service``) is theirs to name cgroups in: a cgroup
    there named after the container counts only for the container's own user (rootless),
    and only as the very cgroup its main process is in where that is known."""
    path = cgroup_path(cgroup_text) or ""
    name = comm.strip()[:64] or "?"
    owner = container_of_cgroup(path)
    theirs = user_of_cgroup(path)
    foreign = theirs is not None and theirs[0] != user_uid
    if (owner is not None and owner[0] == runtime and owner[1] == container_id
            and not foreign and (own_path is None or path == own_path
                                 or path.startswith(own_path.rstrip("/") + "/"))):
        return None
    unit = unit_of_cgroup(path)
    if runtime == "docker" and name in DOCKER_FORWARDERS and unit == "docker.service":
        return None
    if runtime == "podman" and name in PODMAN_FORWARDERS and not foreign:
        parts = path.split("/")
        if (f"libpod-conmon-{container_id}.scope" in parts
                or f"libpod-{container_id}.scope" in parts):
            return None
        if user_uid is not None and f"user@{user_uid}.service" in parts and name != "conmon":
            return None
    who = (owner[1] or "")[:12] if owner is not None else None
    return (f"port {port} is not container {container_id[:12]}'s: pid {pid} ({name}, "
            f"{who and 'container ' + who or unit or 'no unit'}) listens on it")
