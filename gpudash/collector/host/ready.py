"""Ready URLs: a GET on this host's loopback, refused unless the unit's (or the container's)
own process listens on the port."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .parsing import cgroup_path, container_of_cgroup, unit_of_cgroup
from .procfs import _read

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
        for line in (_read(f"{proc}/net/{name}", 1 << 22) or "").splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and fields[1].rsplit(":", 1)[-1] == (
                    f"{port:04X}"):
                found.add(fields[9])
    return found


def _holds(pid: int, inodes: set[str], proc: str, budget: list[int]) -> bool | None:
    """``pid`` has one of the sockets open (None: its descriptors are not readable here)."""
    try:
        fds = os.listdir(f"{proc}/{pid}/fd")
    except PermissionError:
        return None
    except OSError:
        return False
    for fd in fds:
        budget[0] -= 1
        try:
            link = os.readlink(f"{proc}/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in inodes:
            return True
    return False


def listener_of(port: int, main_pid: int | None, proc: str = "/proc"
                ) -> tuple[int | None, bool]:
    """(the pid listening on ``port``, or None; whether some descriptors were unreadable).
    The unit's main process is looked at first: a model server's API server listens."""
    inodes = listening_inodes(port, proc)
    if not inodes:
        return None, False
    budget, hidden = [LISTEN_SCAN_MAX], False
    pids = [main_pid] if main_pid else []
    pids += sorted(int(d) for d in os.listdir(proc) if d.isdigit() and int(d) != main_pid)
    for pid in pids:
        held = _holds(pid, inodes, proc, budget)
        if held:
            return pid, hidden
        hidden = hidden or held is None
        if budget[0] <= 0:
            return None, True
    return None, hidden


def listener_refusal(url: str, unit: str, collector: HostCollector) -> str | None:
    """Why ``url`` cannot prove ``unit`` serves (its port is another process's), or None.
    Where it cannot be told (descriptors not readable by this login), it is not refused."""
    import urllib.parse

    try:
        port = urllib.parse.urlsplit(url).port or 80
    except ValueError:
        return None
    main = collector.units.last.get(unit, {}).get("main_pid")
    pid, _hidden = listener_of(port, main if isinstance(main, int) else None,
                               collector.proc.proc)
    if pid is None:
        return None  # nobody listens (the GET says so), or not readable here
    return unit_listener_refusal(port, unit, pid,
                                 _read(f"{collector.proc.proc}/{pid}/comm", 64) or "?",
                                 _read(f"{collector.proc.proc}/{pid}/cgroup") or "")


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


def container_refusal(url: str, container_id: str, runtime: str, collector: HostCollector
                      ) -> str | None:
    """Why ``url`` cannot prove the container serves (its port is another process's), or
    None; as ``listener_refusal``, what cannot be told (nobody in this namespace listens:
    DNAT into the container's own; descriptors not readable) is not refused."""
    import urllib.parse

    try:
        port = urllib.parse.urlsplit(url).port or 80
    except ValueError:
        return None
    main = collector.containers.last.get(container_id, {}).get("main_pid")
    main = main if isinstance(main, int) else None
    proc = collector.proc.proc
    pid, _hidden = listener_of(port, main, proc)
    if pid is None:
        return None
    uid = None
    if main is not None:  # a rootless podman's forwarders run as the container's user
        try:
            uid = os.stat(f"{proc}/{main}").st_uid
        except OSError:
            uid = None
    return container_listener_refusal(port, container_id, runtime, pid,
                                      _read(f"{proc}/{pid}/comm", 64) or "?",
                                      _read(f"{proc}/{pid}/cgroup") or "", uid)


DOCKER_FORWARDERS = ("docker-proxy",)
# podman's port forwarders: conmon (rootful), rootlessport, pasta, slirp4netns (rootless);
# comm is cut at 15 characters
PODMAN_FORWARDERS = ("conmon", "rootlessport", "rootlessport-ch", "pasta", "pasta.avx2",
                     "slirp4netns")


def container_listener_refusal(port: int, container_id: str, runtime: str, pid: int,
                               comm: str, cgroup_text: str, user_uid: int | None = None
                               ) -> str | None:
    """Why pid ``pid`` listening on ``port`` proves nothing for the container, or None when
    the listener is the container's own: a process of its cgroup (host network), or its
    runtime's port forwarder (docker-proxy in the docker daemon's cgroup; podman's conmon
    of this container, or a rootless forwarder of this container or of the rootless
    user ``user_uid``'s podman). Decided on what the host said (comm, cgroup text) only."""
    path = cgroup_path(cgroup_text) or ""
    name = comm.strip()[:64] or "?"
    owner = container_of_cgroup(path)
    if owner is not None and owner[0] == runtime and owner[1] == container_id:
        return None
    unit = unit_of_cgroup(path)
    if runtime == "docker" and name in DOCKER_FORWARDERS and unit == "docker.service":
        return None
    if runtime == "podman" and name in PODMAN_FORWARDERS:
        parts = path.split("/")
        if (f"libpod-conmon-{container_id}.scope" in parts
                or f"libpod-{container_id}.scope" in parts):
            return None
        if user_uid is not None and f"user@{user_uid}.service" in parts and name != "conmon":
            return None
    who = (owner[1] or "")[:12] if owner is not None else None
    return (f"port {port} is not container {container_id[:12]}'s: pid {pid} ({name}, "
            f"{who and 'container ' + who or unit or 'no unit'}) listens on it")
