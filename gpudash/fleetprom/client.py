"""Instant queries to a Prometheus server's HTTP API (``/api/v1/query``), bounded.

The standard library's ``urllib`` in worker threads: no new dependency, and the few
requests of a refresh run side by side. Every request is bounded: one deadline for the
whole answer (not per read, so a server that trickles bytes cannot hold a refresh), a
cap on the answer's size, no redirect followed (an ``Authorization`` header must not go
to where a server points), no proxy from the environment. Failures are one typed
``PromError`` whose ``kind`` says which (the dashboard's header and the CLI's message);
its text never carries a secret, and what the server wrote is cleaned before it is shown.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpudash.domain.untrusted import clean
from gpudash.fleetprom.sample import Sample
from gpudash.state.promconfig import PromSettings

MAX_ANSWER_BYTES = 64 * 1024 * 1024  # 5,000 hosts x a dozen series of a query: ~10 MB
MAX_SECRET_BYTES = 4096
ERROR_TEXT_MAX = 300  # what a server's error says is shown up to this many characters
WORKERS = 8  # requests in flight at once (a refresh is about a dozen queries)

KINDS = ("down", "slow", "refused", "tls", "query", "too big", "bad answer", "config")


class PromError(Exception):
    """A query that gave no answer; ``kind`` is one of ``KINDS``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind

    def __str__(self) -> str:
        return f"{self.kind}: {self.args[0]}"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> None:
        raise PromError("bad answer", f"HTTP {code} redirect to {clean(newurl)[:200]} "
                        "(not followed: set the URL it points to)")


def _secret(path: Path, what: str) -> str:
    try:
        with path.open("rb") as f:
            data = f.read(MAX_SECRET_BYTES + 1)
    except OSError as exc:
        raise PromError("config", f"{what} {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_SECRET_BYTES:
        raise PromError("config", f"{what} {path}: over {MAX_SECRET_BYTES} bytes")
    try:
        return data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise PromError("config", f"{what} {path}: not UTF-8") from None


def _tls_context(settings: PromSettings) -> ssl.SSLContext:
    try:
        ctx = ssl.create_default_context(
            cafile=str(settings.ca_file) if settings.ca_file else None)
        if settings.cert_file is not None and settings.key_file is not None:
            ctx.load_cert_chain(str(settings.cert_file), str(settings.key_file))
    except (OSError, ssl.SSLError) as exc:
        raise PromError("config", f"tls_config: {exc}") from None
    if settings.insecure_skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _server_error(body: bytes) -> str:
    """What Prometheus said was wrong (its JSON ``error``), cleaned, or the body's start."""
    try:
        doc = json.loads(body)
        said = f"{doc.get('errorType', '')}: {doc.get('error', '')}".strip(": ")
    except (ValueError, AttributeError):
        said = body[:ERROR_TEXT_MAX].decode("utf-8", "replace")
    return clean(said)[:ERROR_TEXT_MAX]


_gc_lock = threading.Lock()
_gc_readers = 0
_gc_was_on = True  # whether the collector ran when the first reader paused it


@contextmanager
def paused_collection() -> Iterator[None]:
    """The cyclic garbage collector paused while an answer is parsed (and its rows made):
    60,000 samples' dicts made at once set off full collections over the dashboard's
    whole heap, which took longer than the parsing (they hold no cycles; collection
    resumes after). Counted: a refresh's answers are parsed side by side, in threads."""
    global _gc_readers, _gc_was_on
    with _gc_lock:
        _gc_readers += 1
        if _gc_readers == 1:
            _gc_was_on = gc.isenabled()
            gc.disable()
    try:
        yield
    finally:
        with _gc_lock:
            _gc_readers -= 1
            if _gc_readers == 0 and _gc_was_on:  # (paused by someone else: left so)
                gc.enable()


def parse_vector(body: bytes) -> list[Sample]:
    """An instant query's answer as samples; PromError ("bad answer", "query") else."""
    with paused_collection():
        return _parse_vector(body)


def _parse_vector(body: bytes) -> list[Sample]:
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise PromError("bad answer", f"not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise PromError("bad answer", "not a Prometheus API answer")
    if doc.get("status") != "success":
        raise PromError("query", _server_error(body))
    data = doc.get("data")
    if not isinstance(data, dict) or data.get("resultType") not in ("vector", "scalar"):
        raise PromError("bad answer", "not an instant vector")
    result = data.get("result")
    if data["resultType"] == "scalar":
        result = [{"metric": {}, "value": result}]
    if not isinstance(result, list):
        raise PromError("bad answer", "no result list")
    out: list[Sample] = []
    append = out.append
    for item in result:
        try:
            metric, (at, value) = item["metric"], item["value"]
            if not isinstance(metric, dict):
                raise TypeError("labels are not a mapping")
            # JSON's keys are strings; join raises TypeError on a value that is not one
            "".join(metric.values())
            append(Sample(metric, float(value), float(at)))
        except (KeyError, TypeError, ValueError) as exc:
            raise PromError("bad answer", f"a series is not label set and value ({exc})"
                            ) from None
    return out


class PromClient:
    """Instant queries to one Prometheus: ``await client.query(expr)``."""

    def __init__(self, settings: PromSettings, *, max_answer: int = MAX_ANSWER_BYTES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if settings.url is None:
            raise ValueError("no Prometheus URL")
        self.settings = settings
        self.base = settings.url.rstrip("/")
        self.max_answer = max_answer
        self.clock = clock
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="gpudash-prom")
        self._opener: urllib.request.OpenerDirector | None = None

    def close(self) -> None:
        """Stop taking requests (one in flight ends by its own deadline)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _open(self) -> urllib.request.OpenerDirector:
        if self._opener is None:
            handlers: list[urllib.request.BaseHandler] = [
                urllib.request.ProxyHandler({}), _NoRedirect()]
            if self.base.startswith("https:"):
                handlers.append(urllib.request.HTTPSHandler(
                    context=_tls_context(self.settings)))
            self._opener = urllib.request.build_opener(*handlers)
        return self._opener

    def _headers(self) -> dict[str, str]:
        s = self.settings
        headers = {"Accept": "application/json", "User-Agent": "gpudash"}
        if s.bearer_token_file is not None:
            headers["Authorization"] = "Bearer " + _secret(s.bearer_token_file, "bearer token")
        elif s.basic_auth_username is not None:
            password = ("" if s.basic_auth_password_file is None
                        else _secret(s.basic_auth_password_file, "basic_auth password_file"))
            pair = f"{s.basic_auth_username}:{password}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        return headers

    def _get(self, expr: str) -> bytes:
        """One query, in a worker thread: the answer's body, or PromError."""
        timeout = self.settings.timeout
        deadline = self.clock() + timeout
        url = f"{self.base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        request = urllib.request.Request(url, headers=self._headers())
        try:
            with self._open().open(request, timeout=timeout) as answer:
                return self._read(answer, deadline)
        except PromError:
            raise
        except urllib.error.HTTPError as exc:
            raise self._http_error(exc, deadline) from None
        except urllib.error.URLError as exc:
            raise self._link_error(exc.reason) from None
        except TimeoutError:
            raise PromError("slow", f"no answer within {timeout:g} s") from None
        except (ssl.SSLError, ssl.CertificateError) as exc:
            raise PromError("tls", clean(exc)[:ERROR_TEXT_MAX]) from None
        except OSError as exc:
            raise self._link_error(exc) from None

    def _read(self, answer: Any, deadline: float) -> bytes:
        # The deadline is checked between reads and each read is bounded by the socket's
        # timeout: a thread lingers at most twice the timeout; the caller stops waiting
        # at once (``query``).
        chunks: list[bytes] = []
        size = 0
        while True:
            left = deadline - self.clock()
            if left <= 0:
                raise PromError("slow", f"the answer took over {self.settings.timeout:g} s")
            chunk = answer.read1(65536) if hasattr(answer, "read1") else answer.read(65536)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > self.max_answer:
                raise PromError("too big", f"an answer over {self.max_answer // 2**20} MiB "
                                "(narrow the fleet, or raise the limit)")
            chunks.append(chunk)

    def _http_error(self, exc: urllib.error.HTTPError, deadline: float) -> PromError:
        try:
            body = self._read(exc, deadline) if exc.fp is not None else b""
        except PromError:
            body = b""
        if exc.code in (401, 403):
            how = ("check bearer_token_file / basic_auth in config.toml"
                   if exc.code == 401 else "the credentials may not query this server")
            return PromError("refused", f"HTTP {exc.code} {clean(exc.reason)} ({how})")
        if exc.code in (400, 422, 503) and body.lstrip().startswith(b"{"):
            return PromError("query", f"HTTP {exc.code}: {_server_error(body)}")
        return PromError("bad answer", f"HTTP {exc.code} {clean(exc.reason)[:80]}")

    def _link_error(self, reason: object) -> PromError:
        if isinstance(reason, TimeoutError):
            return PromError("slow", f"no answer within {self.settings.timeout:g} s")
        if isinstance(reason, ssl.SSLError | ssl.CertificateError):
            return PromError("tls", clean(reason)[:ERROR_TEXT_MAX])
        if isinstance(reason, PromError):
            return reason
        text = reason.strerror if isinstance(reason, OSError) and reason.strerror else reason
        return PromError("down", f"{clean(self.base)}: {clean(text)[:ERROR_TEXT_MAX]}")

    def _samples(self, expr: str) -> list[Sample]:
        # parsed in the worker thread too: thousands of samples do not hold the event loop
        return parse_vector(self._get(expr))

    async def query(self, expr: str) -> list[Sample]:
        """The samples of one instant query, or PromError."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.settings.timeout + 1):
                return await loop.run_in_executor(self._pool, self._samples, expr)
        except TimeoutError:
            raise PromError("slow", f"no answer within {self.settings.timeout:g} s") from None
        except RuntimeError as exc:  # the pool was shut down: the client is closing
            raise PromError("down", f"closed ({exc})") from None

    async def query_all(self, exprs: Sequence[str]) -> list[list[Sample]]:
        """Several instant queries side by side; the first PromError, if any."""
        results = await asyncio.gather(*(self.query(e) for e in exprs),
                                       return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return [r for r in results if not isinstance(r, BaseException)]
