"""Things Prometheus and gpudash's Prometheus reader talk to in the tests, on 127.0.0.1.

- ``dcgm_exposition`` / ``ExpositionServer``: dcgm-exporter's memory series as its source
  names and labels them (``DCGM_FI_DEV_FB_USED``/``_FB_FREE`` in MiB; ``gpu``, ``UUID``,
  ``device``, ``modelName``, the host as ``Hostname`` in releases before May 2026 and
  ``hostname`` since; ``pod``/``namespace``/``container`` on Kubernetes; ``hpc_job`` where
  a mapping file names the GPU's job), served for a real Prometheus to scrape.
- ``BadServer``: a "Prometheus" that answers 401, garbage, a huge body, a query error,
  over TLS with a certificate nobody trusts, or accepts and never answers.
"""

from __future__ import annotations

import http.server
import json
import socket
import ssl
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

MODEL = "NVIDIA H100 80GB HBM3"
TOTAL_MIB = 81559


def dcgm_exposition(host: str, used_mib: Sequence[int], *, spelling: str = "hostname",
                    jobs: dict[int, str] | None = None, pods: dict[int, str] | None = None
                    ) -> str:
    """dcgm-exporter's /metrics for one host: FB_USED and FB_FREE per GPU. ``jobs``:
    GPU -> hpc_job (other GPUs have no such label: no mapping file names them);
    ``pods``: GPU -> pod (with namespace and container)."""
    lines: list[str] = []
    for metric, help_text in (("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
                              ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).")):
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge"]
        for gpu, used in enumerate(used_mib):
            labels = {"gpu": str(gpu), "UUID": f"GPU-{host}-{gpu:04d}",
                      "pci_bus_id": f"00000000:{gpu + 7:02X}:00.0", "device": f"nvidia{gpu}",
                      "modelName": MODEL, spelling: host,
                      "DCGM_FI_DRIVER_VERSION": "550.54.15"}
            if jobs and gpu in jobs:
                labels["hpc_job"] = jobs[gpu]
            if pods and gpu in pods:
                labels |= {"pod": pods[gpu], "namespace": "ml", "container": "vllm"}
            value = used if metric.endswith("USED") else TOTAL_MIB - used
            text = ",".join(f'{k}="{v}"' for k, v in labels.items())
            lines.append(f"{metric}{{{text}}} {value}")
    return "\n".join(lines) + "\n"


class _Quiet(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hangs up is no failure of the test server


@contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler],
            tls: tuple[Path, Path] | None = None) -> Iterator[str]:
    """An HTTP(S) server on 127.0.0.1 in a thread; its base URL."""
    server = _Quiet(("127.0.0.1", 0), handler)
    if tls is not None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(tls[0]), str(tls[1]))
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        scheme = "https" if tls else "http"
        yield f"{scheme}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def exposition_handler(pages: dict[str, str]) -> type[http.server.BaseHTTPRequestHandler]:
    """Serves ``pages`` (path -> exposition text); the text can change while it runs."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = pages.get(self.path.split("?")[0], "").encode()
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


def answering(status: int, body: bytes, *, seen: list[dict[str, str]] | None = None,
              content_type: str = "application/json"
              ) -> type[http.server.BaseHTTPRequestHandler]:
    """Answers every request with ``status`` and ``body``; records the request headers."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            if seen is not None:
                seen.append(dict(self.headers))
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except OSError:
                pass

        def log_message(self, *args: object) -> None:
            pass

    return Handler


def empty_vector() -> bytes:
    return json.dumps({"status": "success",
                       "data": {"resultType": "vector", "result": []}}).encode()


@contextmanager
def silent_server() -> Iterator[str]:
    """Accepts connections and never answers (a hung Prometheus); its base URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        for s in held:
            s.close()
        listener.close()


class Recorded:
    """A Prometheus that answers the fleet's queries with answers a real one gave
    (tests/data/fleetprom/answers.json), or fails as ``mode`` says: "ok", "401", "hang"
    (until released), "garbage". ``extra``: series added to a query's answer. It has no
    recording rules: the probe (``PROBE``) and the recorded series' queries answer
    nothing, as Prometheus does."""

    def __init__(self, answers: dict[str, object]) -> None:
        import threading as _threading

        from gpudash.fleetprom.queries import PROBE, QUERIES, RECORDED

        self.answers = answers
        self.by_expr = dict((expr, name) for name, expr in QUERIES)
        self.probe = PROBE
        self.recorded = {expr for _name, stat, expr in RECORDED if stat is not None}
        self.mode = "ok"
        self.extra: dict[str, list[dict[str, object]]] = {}
        self.release = _threading.Event()
        self.asked = 0

    def handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        import urllib.parse as _parse

        recorded = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                recorded.asked += 1
                mode = recorded.mode
                if mode == "hang":
                    recorded.release.wait(60)
                    return
                if mode == "401":
                    status, body = 401, b"Unauthorized"
                elif mode == "garbage":
                    status, body = 200, b"\x00garbage"
                else:
                    expr = _parse.parse_qs(_parse.urlsplit(self.path).query)["query"][0]
                    if expr == recorded.probe or expr in recorded.recorded:
                        status, body = 200, empty_vector()  # no recording rules here
                    else:
                        name = recorded.by_expr[expr]
                        doc = json.loads(json.dumps(recorded.answers[name]))
                        doc["data"]["result"] += recorded.extra.get(name, [])
                        status, body = 200, json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        return Handler
