"""Containers and pods the processes' cgroups name: ``docker``/``podman inspect`` and
``crictl``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from typing import TYPE_CHECKING, Any

from .protocol import CONTAINER_ID, MAX_CONTAINERS, POD_UID, REMOVED, TEXT_MAX, WORD_MAX
from .text import cap_text
from .units import UNIT_TTL_S

if TYPE_CHECKING:
    from .protocol import Json


CONTAINER_CLI_TIMEOUT_S = 5.0


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def parse_inspect(text: str, runtime: str) -> list[Json]:
    """``docker inspect`` / ``podman inspect`` JSON (a list) -> container dicts."""
    try:
        items = json.loads(text) if text.strip() else []
    except ValueError:
        return []
    out: list[Json] = []
    for item in items if isinstance(items, list) else []:
        cid = _get(item, "Id")
        if not isinstance(cid, str) or not CONTAINER_ID.fullmatch(cid):
            continue
        c: Json = {"id": cid, "runtime": runtime}
        name = _get(item, "Name")
        image = _get(item, "Config", "Image") or _get(item, "ImageName")
        policy = _get(item, "HostConfig", "RestartPolicy", "Name")
        for field, value, limit in (
            ("name", name.lstrip("/") if isinstance(name, str) else None, TEXT_MAX),
            ("image", image, TEXT_MAX),
            ("state", _get(item, "State", "Status"), WORD_MAX),
            ("restart_policy", policy or ("no" if policy == "" else None), WORD_MAX),
        ):
            if isinstance(value, str) and value:
                c[field] = cap_text(value, limit)
        for field, value in (("restart_count", _get(item, "RestartCount")),
                             ("main_pid", _get(item, "State", "Pid"))):
            low = 0 if field == "restart_count" else 1  # Pid 0: not running
            if type(value) is int and low <= value < 2**31:
                c[field] = value
        port = published_port(item)
        if port is not None:
            c["port"] = port
        c.update(_lint_facts(item))
        out.append(c)
    return out


PORTS_MAX = 64  # published ports of one container looked at


def published_port(item: Any) -> int | None:
    """The host TCP port a container publishes its lowest TCP port on (its ready URL's),
    or None: from ``NetworkSettings.Ports`` (what the runtime bound, dynamic ports too),
    else ``HostConfig.PortBindings`` (what was asked)."""
    for where in (("NetworkSettings", "Ports"), ("HostConfig", "PortBindings")):
        ports = _get(item, *where)
        if not isinstance(ports, dict):
            continue
        best: tuple[int, int] | None = None
        for key, binds in list(ports.items())[:PORTS_MAX]:
            inner, _, proto = str(key).partition("/")
            if proto not in ("tcp", "") or not inner.isdigit() or not isinstance(binds, list):
                continue
            for bind in binds[:PORTS_MAX]:
                host = _get(bind, "HostPort")
                if isinstance(host, str) and host.isdigit() and 0 < int(host) < 65536 and (
                        best is None or int(inner) < best[0]):
                    best = (int(inner), int(host))
        if best is not None:
            return best[1]
    return None


def _lint_facts(item: Any) -> Json:
    """What the container lint reads of one inspect record: its health check, --init and
    PID mode (each only where the runtime said it)."""
    out: Json = {}
    status = _get(item, "State", "Health", "Status")
    test = _get(item, "Config", "Healthcheck", "Test")
    if isinstance(status, str) and status:
        out["health"] = cap_text(status, WORD_MAX)
    elif isinstance(test, list) and test and test[0] != "NONE":
        out["health"] = "configured"
    elif isinstance(_get(item, "Config"), dict):  # inspected, and no health check in it
        out["health"] = "none"
    init = _get(item, "HostConfig", "Init")
    if isinstance(init, bool):
        out["init"] = "yes" if init else "no"
    elif init is None and isinstance(_get(item, "HostConfig"), dict):
        out["init"] = "no"  # docker says null when --init was not given
    mode = _get(item, "HostConfig", "PidMode")
    if isinstance(mode, str):
        out["pid_mode"] = cap_text(mode or "private", WORD_MAX)
    return out


def _missing(stderr: str, ids: list[str]) -> set[str]:
    """The ids the runtime said do not exist (``No such object/container: ID``)."""
    gone = set()
    for line in stderr.lower().splitlines():
        if "no such" in line:
            gone |= {i for i in ids if i in line}
    return gone


class ContainerReader:
    """Name, image, state and restart policy of the containers the processes' cgroups name,
    from ONE batched ``docker inspect`` (and ``podman inspect``) when the set changed or
    ``UNIT_TTL_S`` passed. No CLI: no metadata and no error (the host runs no such runtime).

    A container once seen stays reported while the runtime knows it: after ``docker stop``
    no process names it, and its state ``exited`` is the proof.
    """

    def __init__(self, sudo: bool = False, which: Any = shutil.which) -> None:
        self.clis = {rt: which(rt) for rt in ("docker", "podman")}
        self.sudo = sudo and hasattr(os, "geteuid") and os.geteuid() != 0
        self.remembered: dict[str, str] = {}  # id -> runtime
        self.last: dict[str, Json] = {}
        self.key: object = None
        self.read_at = 0.0

    def read(self, seen: dict[str, str], force: bool = False) -> tuple[list[Json], list[str]]:
        """``seen``: container id -> runtime, from this sample's cgroups."""
        for cid, runtime in seen.items():
            if runtime in self.clis and self.clis[runtime]:
                self.remembered[cid] = runtime
        errors: list[str] = []
        if len(self.remembered) > MAX_CONTAINERS:
            errors.append(f"{len(self.remembered) - MAX_CONTAINERS} containers beyond "
                          f"{MAX_CONTAINERS} not inspected")
        while len(self.remembered) > MAX_CONTAINERS:  # the oldest first
            self.remembered.pop(next(iter(self.remembered)))
        ids = dict(self.remembered)
        now = time.monotonic()
        key = tuple(sorted(ids))
        if not force and key == self.key and now - self.read_at < UNIT_TTL_S:
            return [self.last[i] for i in sorted(ids) if i in self.last], []
        found: dict[str, Json] = {}
        for runtime in ("docker", "podman"):
            asked = sorted(i for i, rt in ids.items() if rt == runtime)
            cli = self.clis.get(runtime)
            if not asked or not cli:
                continue
            argv = [cli, "inspect", "--type", "container", "--", *asked]
            if self.sudo:
                argv = ["sudo", "-n", *argv]
            try:
                done = subprocess.run(argv, capture_output=True, text=True, encoding="utf-8",
                                      errors="replace", timeout=CONTAINER_CLI_TIMEOUT_S)
            except (OSError, subprocess.SubprocessError) as exc:
                errors.append(f"{runtime} inspect failed: {exc}")
                continue
            got = {c["id"]: c for c in parse_inspect(done.stdout, runtime)}
            gone = _missing(done.stderr, asked) - set(got)
            if done.returncode != 0 and not got and not gone:
                errors.append(f"{runtime} inspect: " + (done.stderr.strip()[:200] or
                                                        f"exit {done.returncode}"))
            for cid in gone:
                got[cid] = {"id": cid, "runtime": runtime, "state": REMOVED}
                if cid not in seen:  # removed, and no process names it: forget it
                    self.remembered.pop(cid, None)
            found.update(got)
        self.last, self.key, self.read_at = found, key, now
        return [found[i] for i in sorted(found)], errors


def parse_crictl_pods(text: str) -> list[Json]:
    """``crictl pods -o json`` -> pod dicts (uid, namespace, name)."""
    try:
        items = _get(json.loads(text), "items")
    except ValueError:
        return []
    out = []
    for item in items if isinstance(items, list) else []:
        uid, ns, name = (_get(item, "metadata", k) for k in ("uid", "namespace", "name"))
        if isinstance(uid, str) and POD_UID.fullmatch(uid):
            pod: Json = {"uid": uid}
            for field, value in (("namespace", ns), ("name", name)):
                if isinstance(value, str) and value:
                    pod[field] = cap_text(value, TEXT_MAX)
            out.append(pod)
    return out


class PodReader:
    """Namespace and name of the Kubernetes pods the cgroups name, where ``crictl`` answers;
    else only their UIDs (from the cgroup path)."""

    def __init__(self, sudo: bool = False, which: Any = shutil.which) -> None:
        self.crictl = which("crictl")
        self.sudo = sudo and hasattr(os, "geteuid") and os.geteuid() != 0
        self.last: dict[str, Json] = {}
        self.read_at = -UNIT_TTL_S

    def read(self, uids: set[str], force: bool = False) -> list[Json]:
        if not uids:
            return []
        now = time.monotonic()
        if self.crictl and (force or now - self.read_at >= UNIT_TTL_S
                            or not uids <= set(self.last)):
            argv = [self.crictl, "pods", "-o", "json"]
            try:
                done = subprocess.run(["sudo", "-n", *argv] if self.sudo else argv,
                                      capture_output=True, text=True, encoding="utf-8",
                                      errors="replace", timeout=CONTAINER_CLI_TIMEOUT_S)
                self.last = {p["uid"]: p for p in parse_crictl_pods(done.stdout)}
            except (OSError, subprocess.SubprocessError):
                self.last = {}
            self.read_at = now
        return [self.last.get(u) or {"uid": u} for u in sorted(uids)][:MAX_CONTAINERS]
