"""``gpudash exporter``: the triage of every host named, as Prometheus metrics.

Served over HTTP (``--listen``, 127.0.0.1:9835 by default; TLS and basic auth from
``--web.config.file``, one that sets TLS or users required off loopback unless
``--insecure-listen``; see ``metrics_http`` for the bounds) and/or written to
``DIR/gpudash.prom`` every interval for node_exporter's textfile collector
(``--textfile``), atomically: a fresh temporary file in DIR, then a rename. One
exposition is built per interval and shared by every scraper and the textfile. It only
looks: every host is opened read-only. It runs until SIGTERM or Ctrl+C (exit 0); SIGHUP
reads the web config again (it is also read again when it changes) and never stops it. A
host that fails is shown by its ``gpudash_link_up`` and a line on stderr, never stops the
others.
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

from prometheus_client import CollectorRegistry
from prometheus_client.process_collector import ProcessCollector

from gpudash.cli import webconfig
from gpudash.cli.closing import CommandLoop, close_all
from gpudash.cli.contract import Exit
from gpudash.cli.metrics_http import Exposition, MetricsServer
from gpudash.cli.terminal import Terminal
from gpudash.cli.webconfig import WebConfig
from gpudash.cli.webreload import WebConfigFile
from gpudash.feed.follow import Frame, HostFollower
from gpudash.feed.reconnect import LinkState
from gpudash.protocol.source import HostSource
from gpudash.render.metrics import TriageCollector
from gpudash.state import files

log = logging.getLogger("gpudash.cli")

DEFAULT_LISTEN = ("127.0.0.1", 9835)
TEXTFILE_NAME = "gpudash.prom"  # node_exporter reads *.prom; the temporary file is not one
TEXTFILE_MODE = 0o644  # node_exporter runs as its own user
TEXTFILE_OWNERS = (os.geteuid(), 0)  # its directory: ours or root's, writable by no one else

EXIT_HELP = """exit codes:
  0  stopped by SIGTERM or Ctrl+C (SIGHUP reads --web.config.file again; never stops it)
  2  usage error: bad --listen, --textfile not a writable directory, address in use,
     a bad --web.config.file, --listen off loopback without one that sets TLS or
     basic_auth_users (or --insecure-listen)
 70  internal error (a bug): $XDG_STATE_HOME/gpudash/gpudash.log has the traceback
metrics on /metrics (or in DIR/gpudash.prom); which hosts could not be read: stderr."""


class LinkReporter:
    """One stderr line when a host's link breaks or comes back, not one per retry."""

    def __init__(self, term: Terminal) -> None:
        self.term = term
        self.last: dict[str, str | None] = {}

    def framed(self, frame: Frame, sampled: bool) -> None:
        if not sampled:
            self(frame.name, frame.link)

    def __call__(self, host: str, state: LinkState) -> None:
        if state.state in ("error", "stale", "reconnecting", "failed"):
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
    """Why ``--textfile DIR`` cannot be written to, by the state-file rules, or None."""
    if not directory.is_dir():
        return f"--textfile {directory}: not a directory"
    try:
        os.close(files.open_dir(directory, create=False, private=False,
                                owners=TEXTFILE_OWNERS))
    except OSError as exc:
        return f"--textfile {directory}: {exc}"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"--textfile {directory}: not writable"
    return None


def write_textfile(path: Path, body: bytes) -> None:
    """``path`` made to hold ``body``: a fresh random name in its directory, then a
    rename (never a fixed temporary name, never through a link); readable by all, as
    node_exporter (its own user) must read it: metrics are no secret, they are served."""
    files.replace(path, body, mode=TEXTFILE_MODE, private_dir=False, dir_owners=TEXTFILE_OWNERS)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    return ipaddress.ip_address(host).is_loopback


def listen_problem(args: argparse.Namespace, listen: tuple[str, int] | None,
                   web: WebConfig | None) -> str | None:
    """Why ``--listen`` is refused: off loopback it needs a web config that sets TLS or
    users (one of headers only secures nothing), or the flag."""
    if (listen is None or is_loopback(listen[0]) or (web is not None and web.secures)
            or args.insecure_listen):
        return None
    if web is not None:
        return (f"--listen {listen[0]}: not a loopback address, and --web.config.file "
                f"{web.path} sets neither TLS nor basic_auth_users: anyone who reaches it "
                "would read the fleet's metrics over plain HTTP. Add tls_server_config or "
                "basic_auth_users to it, or give --insecure-listen to serve it as it is")
    return (f"--listen {listen[0]}: not a loopback address: anyone who reaches it would read "
            "the fleet's metrics over plain HTTP. Give --web.config.file FILE (TLS, basic "
            "auth), or --insecure-listen to serve it as it is")


def reload_problem(args: argparse.Namespace, listen: tuple[str, int] | None,
                   old: WebConfig, new: WebConfig) -> str | None:
    """Why a web config read again is refused in place of ``old`` while it serves: the
    scheme scrapers were told stays (TLS is not turned on or off), and the listen
    guard holds for the new one as it did at the start."""
    if (old.tls is None) != (new.tls is None):
        change = "removes tls_server_config" if new.tls is None else "adds tls_server_config"
        return (f"{new.path}: {change}: the exporter serves "
                f"{'HTTPS' if old.tls is not None else 'plain HTTP'} until it restarts")
    return listen_problem(args, listen, new)


def cmd_exporter(args: argparse.Namespace, term: Terminal, sources: Sequence[HostSource]
                 ) -> int:
    textfile: Path | None = args.textfile
    listen: tuple[str, int] | None = args.listen
    if listen is None and textfile is None:
        listen = DEFAULT_LISTEN
    if textfile is not None and (problem := textfile_problem(textfile)):
        term.error(problem)
        return Exit.USAGE
    web_file = None
    if args.web_config is not None:
        if listen is None:
            term.error("--web.config.file: nothing is served over HTTP (only --textfile)")
            return Exit.USAGE
        try:
            web_file = WebConfigFile(
                args.web_config, say=term.say,
                check=lambda old, new: reload_problem(args, listen, old, new))
        except webconfig.WebConfigError as exc:
            term.error(f"--web.config.file: {exc}")
            return Exit.USAGE
    web = None if web_file is None else web_file.config
    if problem := listen_problem(args, listen, web):
        term.error(problem)
        return Exit.USAGE
    if (web is not None and listen is not None and web.users and web.tls is None
            and not is_loopback(listen[0])):
        term.error("warning: basic auth without TLS: passwords cross the network in the clear")
    # SIGTERM before the loop's own handler is in place stops it the same way (exit 0);
    # SIGHUP then is let go: the web config was just read, and is read again on a change
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _interrupt),
                signal.SIGHUP: signal.signal(signal.SIGHUP, _let_go)}
    try:
        return _export(args, term, sources, listen, textfile, web_file)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _let_go(signum: int, frame: object) -> None:
    return None


def _export(args: argparse.Namespace, term: Terminal, sources: Sequence[HostSource],
            listen: tuple[str, int] | None, textfile: Path | None,
            web: WebConfigFile | None) -> int:
    report = LinkReporter(term)
    watches = [HostFollower(s, args.interval, on_frame=report.framed) for s in sources]
    registry = exporter_registry(watches)
    path = None if textfile is None else textfile / TEXTFILE_NAME
    try:
        with CommandLoop() as loop:
            return loop.run(_serve(watches, Exposition(registry, args.interval), listen, web,
                                   path, term))
    except KeyboardInterrupt:
        return Exit.OK  # Ctrl+C before the loop's own handler was in place: the same stop


def exporter_registry(followers: Sequence[HostFollower]) -> CollectorRegistry:
    """Every metric family the exporter serves: the hosts' triage and its own cost (also
    what docs/reference/METRICS.md is generated from)."""
    registry = CollectorRegistry()
    registry.register(TriageCollector(followers))
    ProcessCollector(namespace="gpudash_exporter", registry=registry)
    return registry


async def _serve(watches: Sequence[HostFollower], exposition: Exposition,
                 listen: tuple[str, int] | None, web: WebConfigFile | None,
                 path: Path | None, term: Terminal) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGHUP, _hang_up, web, term)
    server = None
    if listen is not None:
        addr, port = listen
        server = MetricsServer(exposition, web)
        try:
            port = await server.start(addr, port)
        except OSError as exc:
            term.error(f"cannot listen on {addr}:{port}: {exc.strerror or exc}")
            return Exit.USAGE
        shown = f"[{addr}]" if ":" in addr else addr
        config = None if web is None else web.config
        scheme = "https" if config is not None and config.tls is not None else "http"
        term.say(f"gpudash exporter: {scheme}://{shown}:{port}/metrics ({len(watches)} "
                 f"host(s){'; ' + config.describe if config is not None else ''})")
    if path is not None:
        term.say(f"gpudash exporter: writing {path} every {exposition.max_age_s:g} s")
    tasks = [asyncio.create_task(w.run(), name=f"follow {w.frame.name}") for w in watches]
    try:
        await _tick(stop, exposition, path, term)
    finally:
        if server is not None:
            await server.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await close_all([w.source for w in watches])
    return Exit.OK


def _hang_up(web: WebConfigFile | None, term: Terminal) -> None:
    """SIGHUP (``systemctl reload``): the web config read again; never a stop."""
    if web is None:
        term.say("gpudash exporter: SIGHUP: no --web.config.file, nothing to reload")
    else:
        web.reload("SIGHUP")


async def _tick(stop: asyncio.Event, exposition: Exposition, path: Path | None,
                term: Terminal) -> None:
    """Every interval until ``stop``: the textfile, from the interval's one exposition."""
    failed: str | None = None
    while not stop.is_set():
        if path is not None:
            try:  # triaging every host is CPU work: off the loop that samples them
                body = await exposition.refresh()
                await asyncio.to_thread(write_textfile, path, body)
                failed = None
            except OSError as exc:
                if failed != str(exc):
                    term.error(f"cannot write {path}: {exc}")
                failed = str(exc)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(exposition.max_age_s):
                await stop.wait()
