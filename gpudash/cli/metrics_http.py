"""The exporter's HTTP side: ``/metrics`` for every scraper, bounded whatever they do.

* **One exposition per interval.** ``Exposition`` builds the text (triage of every host)
  at most once per ``--interval`` in a worker thread, and every scrape in that interval,
  and every scraper waiting while it is built, gets those same bytes: 300 requests that
  arrive together cost one build, not 300.
* **Connections cost no thread.** One accept loop on the event loop; each connection is a
  task that must finish its TLS handshake, send its whole request head and pass its
  password check within ``HEAD_TIMEOUT_S`` (an absolute deadline, not per read), else it
  is closed. At most ``MAX_CONNECTIONS`` are open: a new one closes the oldest that is
  not being answered yet (a scanner, an idle socket, a password not yet checked; never
  an authorised request). The answer is written within ``WRITE_TIMEOUT_S``.
* **TLS and basic auth** from ``--web.config.file`` (``gpudash.cli.webconfig``), read
  again when it changes (``gpudash.cli.webreload``). bcrypt checks run in
  ``AUTH_CHECKS`` threads of their own; when ``AUTH_QUEUE`` more wait, a request that
  needs one is answered 503 at once: a flood of wrong passwords costs two cores at most
  and queues nobody for long. A user/password pair that passed is remembered (a SHA-256
  digest, with the hash it passed) so a scraper's every request is not a bcrypt, and it
  is answered however many wrong passwords wait. An unknown user costs a check as
  costly as a known one (no telling who exists by timing); a password bcrypt cannot
  take (over 72 bytes) is a 401 at once, as it does not depend on the user.
* **Plain HTTP sent to TLS** is answered 400, as Go's servers answer it, not dropped.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import logging
import socket
import ssl
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import bcrypt
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from gpudash.cli.webconfig import WebConfig
from gpudash.cli.webreload import WebConfigFile
from gpudash.record import record

log = logging.getLogger("gpudash.cli.exporter")

HEAD_MAX = 16 * 1024  # a request head longer than this is refused (431)
HEAD_TIMEOUT_S = 10.0  # TLS handshake + the whole request head + its password, from the accept
WRITE_TIMEOUT_S = 30.0  # the answer written
MAX_CONNECTIONS = 128  # open at once (each TLS one holds ~256 KiB of buffers)
AUTH_CHECKS = 2  # bcrypt checks at once (each ~0.1-0.3 s of a core)
AUTH_QUEUE = 8  # bcrypt checks waiting for one of those; one more is a 503
AUTH_CACHE = 64  # user/password digests that passed, remembered
BCRYPT_MAX = 72  # bytes of a password bcrypt takes (the bcrypt module raises past it)
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
           405: "Method Not Allowed", 431: "Request Header Fields Too Large",
           503: "Service Unavailable", 505: "HTTP Version Not Supported"}
INDEX = b"gpudash exporter: the metrics are at /metrics\n"
TLS_HANDSHAKE = 0x16  # the first byte of a TLS client's first record

Answer = tuple[int, list[tuple[str, str]], bytes]  # status, headers, body
UNAUTHORIZED: Answer = (401, [("WWW-Authenticate", 'Basic realm="gpudash"')],
                        b"unauthorized\n")
CHECKS_BUSY: Answer = (503, [("Retry-After", "1")], b"too many password checks waiting\n")
PLAIN_TO_TLS: Answer = (400, [], b"Client sent an HTTP request to an HTTPS server.\n")


class Exposition:
    """The metrics text, built at most once per ``max_age_s`` and shared."""

    def __init__(self, registry: CollectorRegistry, max_age_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.registry = registry
        self.max_age_s = max_age_s
        self.clock = clock
        self.builds = 0  # how many times the text was built (for tests and the bench)
        self._body: bytes | None = None
        self._at = 0.0
        self._building: asyncio.Future[bytes] | None = None

    async def get(self) -> bytes:
        """The newest text if it is younger than ``max_age_s``, else a new one."""
        if self._body is not None and self.clock() - self._at < self.max_age_s:
            return self._body
        return await self.refresh()

    async def refresh(self) -> bytes:
        """A text built now (or the build already under way: it started meanwhile)."""
        if self._building is None:
            self._building = asyncio.ensure_future(self._build())
        # a scraper that goes away does not cancel the build the others wait for
        return await asyncio.shield(self._building)

    async def _build(self) -> bytes:
        try:
            body = await asyncio.to_thread(generate_latest, self.registry)
            self._body, self._at = body, self.clock()
            self.builds += 1
            return body
        finally:
            self._building = None


@record
class Request:
    """A request head that passed: what is asked, of whom it may be answered."""

    method: str
    path: str


@record(frozen=False, eq=False)
class _Connection:
    task: asyncio.Task[None] | None = None
    busy: bool = False  # its request arrived and was authorised: never evicted


class MetricsServer:
    """Serves ``exposition`` on one listening socket until ``close``."""

    def __init__(self, exposition: Exposition, web: WebConfigFile | None = None,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        self.exposition = exposition
        self.web = web
        self.max_connections = max_connections
        self.connections: dict[_Connection, None] = {}  # oldest first
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._passed: dict[bytes, bytes] = {}  # digest of user + password -> hash passed
        self._checker = ThreadPoolExecutor(AUTH_CHECKS, thread_name_prefix="bcrypt")
        self._checks = 0  # bcrypt checks queued or running in _checker
        self.evicted = 0  # connections closed to make room (for tests and the bench)

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (OSError if it cannot); returns the port."""
        infos = await asyncio.get_running_loop().getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, addr = infos[0]
        listener = socket.create_server(addr[:2], family=family, backlog=128)
        listener.setblocking(False)
        self._listener = listener
        self._accepting = asyncio.create_task(self._accept(listener), name="metrics accept")
        return int(listener.getsockname()[1])

    async def close(self) -> None:
        tasks = [t for t in (self._accepting, *(c.task for c in self.connections)) if t]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._listener is not None:
            self._listener.close()
        self._checker.shutdown(wait=False, cancel_futures=True)

    async def _accept(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, _addr = await loop.sock_accept(listener)
            except OSError as exc:  # EMFILE, ENFILE, ENOBUFS: wait, do not spin
                log.warning("accept failed: %s", exc)
                await asyncio.sleep(0.5)
                continue
            if len(self.connections) >= self.max_connections and not self._evict():
                sock.close()  # every connection is being answered: no room
                continue
            conn = _Connection()
            self.connections[conn] = None
            conn.task = asyncio.create_task(self._connection(conn, sock))

    def _evict(self) -> bool:
        """Close the oldest connection not yet authorised; False if none."""
        for conn in self.connections:
            if not conn.busy and conn.task is not None:
                conn.task.cancel()
                del self.connections[conn]
                self.evicted += 1
                return True
        return False

    async def _connection(self, conn: _Connection, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        writer: asyncio.StreamWriter | None = None
        web = None
        try:
            # the config as its files say now, one for the whole connection
            web = None if self.web is None else self.web.current()
            tls = None if web is None else web.tls
            reader = asyncio.StreamReader(limit=HEAD_MAX)
            protocol = asyncio.StreamReaderProtocol(reader)
            async with asyncio.timeout(HEAD_TIMEOUT_S):  # handshake, head and password
                plain_to_tls = tls is not None and await _first_byte(sock) != TLS_HANDSHAKE
                if plain_to_tls:
                    tls = None  # read its head in plain, to answer it in plain
                transport, _ = await loop.connect_accepted_socket(
                    lambda: protocol, sock, ssl=tls,
                    ssl_handshake_timeout=HEAD_TIMEOUT_S if tls else None)
                writer = asyncio.StreamWriter(transport, protocol, reader, loop)
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.LimitOverrunError:
                    head = b""
                request = PLAIN_TO_TLS if plain_to_tls else await self._admit(head, web)
            if isinstance(request, Request):
                conn.busy = True
                status, headers, body = await self._answer(request)
            else:
                status, headers, body = request  # refused: it can still be evicted
            writer.write(_response(status, headers, body, web,
                                   head_only=head.startswith(b"HEAD ")))
            async with asyncio.timeout(WRITE_TIMEOUT_S):
                await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, ssl.SSLError,
                OSError):
            pass  # a client that went away, never sent a request, or failed TLS
        except Exception:  # noqa: BLE001 - one connection's bug must not end the server
            log.exception("answering a scrape failed")
        finally:
            self.connections.pop(conn, None)
            if writer is not None:
                writer.transport.abort()
            else:
                sock.close()

    async def _admit(self, head: bytes, web: WebConfig | None) -> Request | Answer:
        """The request if it may be answered, else the answer that refuses it."""
        if not head:
            return 431, [], b"request head too large\n"
        request = _parse(head)
        if request is None:
            return 400, [], b"bad request\n"
        method, path, headers = request
        if web is not None and web.users:
            refused = await self._authorize(headers.get("authorization"), web)
            if refused is not None:
                return refused
        return Request(method, path)

    async def _answer(self, request: Request) -> Answer:
        method, path = request.method, request.path
        if method not in ("GET", "HEAD"):
            return 405, [("Allow", "GET, HEAD")], b"only GET\n"
        if path == "/metrics":
            body = await self.exposition.get()
            return 200, [("Content-Type", CONTENT_TYPE_LATEST)], body
        if path == "/":
            return 200, [("Content-Type", "text/plain; charset=utf-8")], INDEX
        return 404, [], b"not found: try /metrics\n"

    async def _authorize(self, header: str | None, web: WebConfig) -> Answer | None:
        """None if ``header`` has a user and password ``web`` lets in, else the answer."""
        if header is None or not header[:6].lower() == "basic ":
            return UNAUTHORIZED
        try:
            user, colon, password = base64.b64decode(header[6:].strip(), validate=True
                                                     ).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return UNAUTHORIZED
        secret = password.encode("utf-8")
        if not colon or len(secret) > BCRYPT_MAX:
            return UNAUTHORIZED
        digest = hashlib.sha256(user.encode("utf-8") + b"\0" + secret).digest()
        hashed = web.users.get(user)
        # remembered only with the hash it passed: a changed or removed one is checked anew
        if hashed is not None and self._passed.get(digest) == hashed:
            return None
        if self._checks >= AUTH_CHECKS + AUTH_QUEUE:
            return CHECKS_BUSY
        if not await self._bcrypt(secret, hashed or web.dummy) or hashed is None:
            return UNAUTHORIZED
        if len(self._passed) >= AUTH_CACHE:
            self._passed.pop(next(iter(self._passed)))
        self._passed[digest] = hashed
        return None

    async def _bcrypt(self, secret: bytes, hashed: bytes) -> bool:
        """bcrypt's verdict, from a thread of ``_checker``. A caller that goes away (its
        deadline, an eviction) takes its check out of the queue; one already running
        keeps its thread, and counts, until it ends."""
        loop = asyncio.get_running_loop()

        def done(_job: Future[bool]) -> None:  # in the thread that ran it, or here
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._check_ended)

        self._checks += 1
        job = self._checker.submit(_checkpw, secret, hashed)
        job.add_done_callback(done)
        return await asyncio.wrap_future(job)

    def _check_ended(self) -> None:
        self._checks -= 1


def _checkpw(secret: bytes, hashed: bytes) -> bool:
    try:
        return bcrypt.checkpw(secret, hashed)
    except ValueError as exc:  # what the file's check and the length let in, it takes
        log.warning("a password check failed: bcrypt: %s", exc)
        return False


async def _first_byte(sock: socket.socket) -> int:
    """The first byte the client sent, left unread for the TLS handshake."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            first = sock.recv(1, socket.MSG_PEEK)
            if not first:
                raise ConnectionAbortedError("closed before it sent a byte")
            return first[0]
        except (BlockingIOError, InterruptedError):
            pass
        readable = loop.create_future()

        def ready(readable: asyncio.Future[None] = readable) -> None:
            loop.remove_reader(sock)
            if not readable.done():
                readable.set_result(None)

        loop.add_reader(sock, ready)
        try:
            await readable
        finally:
            loop.remove_reader(sock)


def _parse(head: bytes) -> tuple[str, str, dict[str, str]] | None:
    """(method, path, lower-cased headers) of a request head, or None if it is none."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return None
    method, target, _version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            return None
        headers[name.lower()] = value.strip()
    return method, target.split("?", 1)[0], headers


def _response(status: int, headers: list[tuple[str, str]], body: bytes,
              web: WebConfig | None, *, head_only: bool = False) -> bytes:
    extra = list(web.headers) if web is not None else []
    if not any(name == "Content-Type" for name, _ in headers):
        headers = [*headers, ("Content-Type", "text/plain; charset=utf-8")]
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}",
             *(f"{n}: {v}" for n, v in [*headers, *extra]),
             f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1") + (b"" if head_only else body)

