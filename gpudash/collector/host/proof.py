"""The ready proof, in one observation: a GET whose own connection shows who answers it.

Seen before: the listener of the probe's port was looked up first and the GET made in a
second step; "nobody listens" let the GET decide. A host user whose listener was up for
4 ms in every 6 ms had 80 of 100 probes counted as the loading unit's 200. Now the probe
connects, sends its request head without the blank line that ends it, finds the server end
of *its own* connection (``/proc/net/tcp*``: local and remote addresses swapped) and the
process holding that socket, and finishes the request only when that process is the
owner's (``judge``). Whoever is not there when looked at does not answer at all.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import time
from typing import TYPE_CHECKING

from .procfs import _read, read_whole

if TYPE_CHECKING:  # annotations only: the host's python3 may be 3.7
    from collections.abc import Callable, Iterable, Iterator, Sequence

    Address = tuple[str, int]
    # pid, comm, /proc/PID/cgroup text -> why it does not prove the owner serves, or None
    Judge = Callable[[int, str, str], str | None]

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
HOLDER_SCAN_MAX = 20000  # descriptors looked at to find who holds the server end
ESTABLISHED = "01"


def kernel_ip(text: str) -> str:
    """An address as ``/proc/net/tcp*`` prints it (32-bit words in host order), as text;
    an IPv4-mapped IPv6 address as plain IPv4."""
    raw = bytes.fromhex(text)
    if sys.byteorder == "little":
        raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    if len(raw) == 16 and raw[:12] == b"\0" * 10 + b"\xff\xff":
        raw = raw[12:]
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw)


def connections(net: str) -> Iterator[tuple[Address, Address, str, str]]:
    """(local, remote, state, inode) of each TCP socket in ``net`` (a ``/proc/.../net``)."""
    for name in ("tcp", "tcp6"):
        for line in (read_whole(net + "/" + name, 1 << 26) or "").splitlines()[1:]:
            fields = line.split()
            if len(fields) < 10:
                continue
            try:
                local, remote = [(kernel_ip(a.rsplit(":", 1)[0]), int(a.rsplit(":", 1)[1], 16))
                                 for a in fields[1:3]]
            except (ValueError, OSError):
                continue
            yield local, remote, fields[3], fields[9]


def _plain(address: Sequence[object]) -> Address:
    host = str(address[0])
    if host.startswith("::ffff:") and "." in host:
        host = host[7:]
    return host, int(str(address[1]))


def server_end(ours: Address, theirs: Address, net: str) -> str | None:
    """The inode of the socket at the other end of our connection, once it is accepted
    (``"0"`` while it waits in the listener's queue); None when this namespace has none."""
    found = None
    for local, remote, state, inode in connections(net):
        if local == theirs and remote == ours and state == ESTABLISHED:
            if inode != "0":
                return inode
            found = "0"
    return found


def holder_of(inode: str, first: Iterable[int], proc: str) -> tuple[int | None, int]:
    """(the pid that holds socket ``inode``, or None; how many processes' descriptors
    could not be read). The owner's own processes are looked at first."""
    wanted = "socket:[" + inode + "]"
    budget, hidden = HOLDER_SCAN_MAX, 0
    firsts = [p for p in first if p]
    try:
        rest = sorted(int(d) for d in os.listdir(proc) if d.isdigit())
    except OSError:
        rest = []
    for pid in firsts + [p for p in rest if p not in firsts]:
        try:
            fds = os.listdir(proc + "/" + str(pid) + "/fd")
        except PermissionError:
            hidden += 1
            continue
        except OSError:
            continue
        for fd in fds:
            budget -= 1
            try:
                if os.readlink(proc + "/" + str(pid) + "/fd/" + fd) == wanted:
                    return pid, hidden
            except OSError:
                continue
        if budget <= 0:
            break
    return None, hidden


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise socket.timeout("timed out")  # noqa: UP041 - not TimeoutError before 3.10
        return left


def _target(url: str) -> tuple[str, int, str]:
    """(host, port, path) of a plain http URL on this host's loopback; ValueError else."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname not in LOOPBACK_HOSTS:
        raise ValueError("not a loopback http URL")
    port = parts.port or 80
    path = (parts.path or "/") + ("?" + parts.query if parts.query else "")
    if any(c in path for c in "\r\n \t") or any(ord(c) < 32 for c in path):
        raise ValueError("not a URL path to ask")
    return parts.hostname, port, path


def owned_get(url: str, timeout_s: float, judge: Judge, proc: str = "/proc",
              first: Iterable[int] = (), other_nets: Iterable[int] = ()
              ) -> tuple[int | None, str | None]:
    """(status, None), or (None, why): a GET of ``url`` counted only where ``judge``
    accepts the process holding the server end of the probe's own connection. ``first``:
    the owner's pids, looked at first; ``other_nets``: pids whose network namespace may
    hold the server end instead (a container's, behind a DNAT)."""
    import http.client

    try:
        host, port, path = _target(url)
    except ValueError as exc:
        return None, str(exc)
    deadline = _Deadline(max(0.1, min(float(timeout_s), 30.0)))
    sock = None
    try:
        sock = _connect(host, port, deadline)
        netloc = ("[" + host + "]" if ":" in host else host) + ":" + str(port)
        head = ("GET " + path + " HTTP/1.1\r\nHost: " + netloc + "\r\nUser-Agent: "
                "gpudash-probe\r\nAccept: */*\r\nConnection: close\r\n")
        sock.settimeout(deadline.left())
        sock.sendall(head.encode("ascii"))  # not yet the blank line: nothing is answered
        refused = _who_answers(sock, port, judge, proc, list(first), list(other_nets),
                               deadline)
        if refused is not None:
            _abort(sock)  # a reset, not an end: the head alone must not read as a request
            return None, refused
        sock.settimeout(deadline.left())
        sock.sendall(b"\r\n")
        answer = http.client.HTTPResponse(sock, method="GET")
        answer.begin()  # the status line and headers, by the deadline
        return int(answer.status), None
    except socket.timeout:  # noqa: UP041 - not TimeoutError before 3.10
        return None, f"no answer within {float(timeout_s):g} s"
    except (OSError, http.client.HTTPException) as exc:
        why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return None, str(why)[:200]
    finally:
        if sock is not None:
            sock.close()


def _abort(sock: socket.socket) -> None:
    """Close with a reset (SO_LINGER 0): a server reading the request head gets an error,
    where a plain close's end of stream would end the head and have it answered."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass


def _connect(host: str, port: int, deadline: _Deadline) -> socket.socket:
    last: OSError | None = None
    for family, kind, proto, _name, address in socket.getaddrinfo(
            host, port, 0, socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(deadline.left())
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            last = exc
            if isinstance(exc, socket.timeout):  # noqa: UP041
                raise
    raise last or OSError("no address to connect to")


def _who_answers(sock: socket.socket, port: int, judge: Judge, proc: str, first: list[int],
                 other_nets: list[int], deadline: _Deadline) -> str | None:
    """Why the process at the other end of our connection proves nothing, or None."""
    ours, theirs = _plain(sock.getsockname()), _plain(sock.getpeername())
    pause = 0.002
    while True:
        inode = server_end(ours, theirs, proc + "/net")
        if inode is None:  # not here: in a container's own namespace (DNAT), if anywhere
            inode = _in_other_nets(ours, other_nets, proc)
        if inode not in (None, "0"):
            break
        gone = _closed(sock)  # nobody will take it now: never wait out the deadline
        if gone is not None:
            return "port " + str(port) + ": " + gone
        if time.monotonic() + pause >= deadline.end:
            return ("nobody in this host's network namespace took the connection to port "
                    + str(port) if inode is None else
                    "the connection to port " + str(port) + " was not accepted in time")
        time.sleep(pause)
        pause = min(pause * 2, 0.02)
    pid, hidden = holder_of(str(inode), first, proc)
    if pid is None:
        return ("who answers on port " + str(port) + " cannot be told: "
                + ("the descriptors of " + str(hidden) + " process(es) are not readable "
                   "by this login (--sudo)" if hidden else "nobody holds its connection"))
    return judge(pid, _read(proc + "/" + str(pid) + "/comm", 64) or "?",
                 _read(proc + "/" + str(pid) + "/cgroup") or "")


def _closed(sock: socket.socket) -> str | None:
    """Why our connection is over before anyone was seen holding its other end (reset, or
    answered and closed before the request was finished), or None while it waits."""
    timeout = sock.gettimeout()
    sock.setblocking(False)  # with a timeout set, recv would wait for data up to it
    try:
        sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return None
    except OSError as exc:
        return "the connection was " + ("reset" if isinstance(exc, ConnectionResetError)
                                        else "lost") + " before anyone was seen taking it"
    finally:
        sock.settimeout(timeout)
    return "the other end spoke or closed before it was seen: who it was cannot be told"


def _in_other_nets(ours: Address, pids: list[int], proc: str) -> str | None:
    """Behind a DNAT the server end's addresses are the translated ones: our port is what
    is left of us to know it by."""
    found = None
    for pid in pids:
        for _local, remote, state, inode in connections(proc + "/" + str(pid) + "/net"):
            if remote[1] == ours[1] and state == ESTABLISHED:
                if inode != "0":
                    return inode
                found = "0"
    return found
