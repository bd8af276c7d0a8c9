"""``gpudash exporter``: the triage of every host named, as Prometheus metrics.

Served over HTTP (``--listen``, 127.0.0.1:9835 by default) and/or written to
``DIR/gpudash.prom`` every interval for node_exporter's textfile collector
(``--textfile``), atomically: a temporary file in DIR, then a rename. It only looks:
every host is opened read-only. It runs until SIGTERM or Ctrl+C (exit 0); a host that
fails is shown by its ``gpudash_link_up`` and a line on stderr, never stops the others.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import logging
import os
import signal
from collections.abc import Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry, start_http_server, write_to_textfile
from prometheus_client.process_collector import ProcessCollector

from gpudash.cli.contract import Exit
from gpudash.cli.terminal import Terminal
from gpudash.feed.reconnect import LinkState
from gpudash.feed.watch import HostWatch
from gpudash.protocol.source import HostSource
from gpudash.render.metrics import TriageCollector

log = logging.getLogger("gpudash.cli")

DEFAULT_LISTEN = ("127.0.0.1", 9835)
TEXTFILE_NAME = "gpudash.prom"  # node_exporter reads *.prom; the temporary file is not one

EXIT_HELP = """exit codes:
  0  stopped by SIGTERM or Ctrl+C
  2  usage error: bad --listen, --textfile not a writable directory, address in use
 70  internal error (a bug): $XDG_STATE_HOME/gpudash/gpudash.log has the traceback
metrics on /metrics (or in DIR/gpudash.prom); which hosts could not be read: stderr."""


class LinkReporter:
    """One stderr line when a host's link breaks or comes back, not one per retry."""

    def __init__(self, term: Terminal) -> None:
        self.term = term
        self.last: dict[str, str | None] = {}

    def __call__(self, host: str, state: LinkState) -> None:
        if state.state in ("error", "stale"):
            if self.last.get(host) != state.error:
                said = state.error or state.state
                # transport errors name their host already
                self.term.error(said if said.startswith(f"{host}:") else f"{host}: {said}")
            self.last[host] = state.error
        elif state.state == "connected":
            if self.last.get(host) is not None:
                self.term.say(f"gpudash: {host}: connected again")
            self.last[host] = None


def listen_address(text: str) -> tuple[str, int]:
    """An argparse type: ``HOST:PORT`` (``[::1]:PORT`` for IPv6), HOST an IP address or
    ``localhost``; port 0 picks a free one."""
    host, colon, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not colon or not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT (e.g. 127.0.0.1:9835), not {text!r}")
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"HOST must be an IP address or localhost, not {host!r}") from None
    return host, int(port)


def textfile_problem(directory: Path) -> str | None:
    if not directory.is_dir():
        return f"--textfile {directory}: not a directory"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"--textfile {directory}: not writable"
    return None


def cmd_exporter(args: argparse.Namespace, term: Terminal, sources: Sequence[HostSource]
                 ) -> int:
    textfile: Path | None = args.textfile
    listen: tuple[str, int] | None = args.listen
    if listen is None and textfile is None:
        listen = DEFAULT_LISTEN
    if textfile is not None and (problem := textfile_problem(textfile)):
        term.error(problem)
        return Exit.USAGE
    # SIGTERM before the loop's own handler is in place stops it the same way (exit 0)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        return _export(args, term, sources, listen, textfile)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _export(args: argparse.Namespace, term: Terminal, sources: Sequence[HostSource],
            listen: tuple[str, int] | None, textfile: Path | None) -> int:
    watches = [HostWatch(s, args.interval, on_link=LinkReporter(term)) for s in sources]
    registry = CollectorRegistry()
    registry.register(TriageCollector(watches))
    ProcessCollector(namespace="gpudash_exporter", registry=registry)
    server = None
    if listen is not None:
        addr, port = listen
        try:
            server, _thread = start_http_server(port, addr, registry)
        except OSError as exc:
            term.error(f"cannot listen on {addr}:{port}: {exc.strerror or exc}")
            return Exit.USAGE
        shown = f"[{addr}]" if ":" in addr else addr
        term.say(f"gpudash exporter: http://{shown}:{server.server_port}/metrics "
                 f"({len(watches)} host(s))")
    path = None if textfile is None else textfile / TEXTFILE_NAME
    if path is not None:
        term.say(f"gpudash exporter: writing {path} every {args.interval:g} s")
    try:
        asyncio.run(_serve(watches, registry, path, args.interval, term))
    except KeyboardInterrupt:
        pass  # Ctrl+C before the loop's own handler was in place: the same stop
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
    return Exit.OK


async def _serve(watches: Sequence[HostWatch], registry: CollectorRegistry, path: Path | None,
                 interval: float, term: Terminal) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(w.run(), name=f"watch {w.view.name}") for w in watches]
    failed: str | None = None
    try:
        while not stop.is_set():
            if path is not None:
                try:  # triaging every host is CPU work: off the loop that samples them
                    await asyncio.to_thread(write_to_textfile, str(path), registry)
                    failed = None
                except OSError as exc:
                    if failed != str(exc):
                        term.error(f"cannot write {path}: {exc}")
                    failed = str(exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for w in watches:
            try:
                await w.source.close()
            except Exception:  # noqa: BLE001 - closing a dead link has nothing to report
                log.debug("closing %s failed", w.view.name, exc_info=True)
