"""Command line: the dashboard, ``snapshot`` and ``reclaim``.

    gpudash [HOST ...]                 dashboard (this machine when no host is given)
    gpudash --demo                     dashboard on the simulated incident host
    gpudash snapshot [HOST ...] --json one snapshot per host
    gpudash reclaim [HOST] --unit U    stop + disable U, reap its leftovers, wait, report
    gpudash reclaim [HOST] --container C   the same for a Docker/Podman container
    gpudash reap [HOST ...]            signal every orphan holding GPU memory, wait, report
    gpudash history [HOST ...]         what was done (the audit), verdicts, GiB back
    gpudash report [HOST ...] --svg F  the actions beside each GPU's memory, as a picture
    gpudash start [HOST] --unit U      start U, follow it loading, prove it serves
    gpudash swap [HOST] --from A --to B   reclaim A with proof, start B, prove it serves
    gpudash fix [HOST] --unit U        gpudash's drop-in that removes U's lint findings
    gpudash swap [HOST] --from-container C --to B   the same from a Docker/Podman container
    gpudash reset [HOST] --gpu N       nvidia-smi --gpu-reset where nothing holds GPU N
    gpudash drain [HOST] --reason TEXT   drain the host's Slurm node (its jobs finish)
    gpudash resume [HOST]              the drained Slurm node takes jobs again
    gpudash exporter [HOST ...]        the triage as Prometheus metrics (127.0.0.1:9835)

What goes to stdout and stderr, and the exit codes: ``gpudash.cli.contract``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpudash.cli.args import parse
from gpudash.cli.closing import CommandLoop, close_all
from gpudash.cli.contract import Exit, worst
from gpudash.cli.terminal import Terminal
from gpudash.domain.model import HostSnapshot, SourceKind
from gpudash.domain.untrusted import json_dumps
from gpudash.protocol.source import HostSource, SourceError
from gpudash.state import logfile

if TYPE_CHECKING:
    from gpudash.fleetprom.visit import Visit

log = logging.getLogger("gpudash.cli")

AS_CTRL_C = (signal.SIGTERM, signal.SIGHUP)


def open_sources(args: argparse.Namespace, *, demo_speed: float = 1.0,
                 demo_orphans: bool = False, demo_slurm: bool = False) -> list[HostSource]:
    """The hosts named on the command line, as sources (not yet connected). The demo host
    starts as it is before the incident, or (``demo_orphans``) after its ``kill -9`` and
    ``systemctl stop`` + ``disable``, with the workers orphaned; or (``demo_slurm``) it is
    the fleet demo's Slurm node."""
    read_only = getattr(args, "read_only", False)
    demo_speed = getattr(args, "demo_speed", None) or demo_speed  # --demo-speed: the operator's
    if args.demo and demo_slurm:
        from gpudash.demo.fleet import SLURM_NODE, ScenarioHost

        return [ScenarioHost(SLURM_NODE, "slurm", speed=demo_speed, read_only=read_only)]
    if args.demo:
        from gpudash.demo.host import DemoHost

        if getattr(args, "demo_hosts", None):
            from gpudash.demo.fleet import demo_fleet

            return demo_fleet(args.demo_hosts, speed=demo_speed, read_only=read_only)
        demo = DemoHost(speed=demo_speed, read_only=read_only, containers=True)
        if demo_orphans:
            demo.leave_orphans()
        return [demo]
    from gpudash.transport import open_source  # live hosts: local or SSH

    targets: list[str | None] = list(args.hosts) or [None]
    return [
        open_source(
            t,
            interval=args.interval,
            sudo=args.sudo,
            accept_new_host_key=args.accept_new_host_key,
            ssh_config=args.ssh_config,
            known_hosts=args.known_hosts,
            read_only=read_only,
        )
        for t in targets
    ]


async def _sample_all(sources: Sequence[HostSource]) -> tuple[list[HostSnapshot], dict[str, str]]:
    async def one(s: HostSource) -> HostSnapshot | str:
        try:
            return await s.control.sample()
        except SourceError as exc:
            return str(exc)

    try:
        results = await asyncio.gather(*(one(s) for s in sources))
    finally:
        await close_all(sources)
    snaps = [r for r in results if isinstance(r, HostSnapshot)]
    errors = {s.name: r for s, r in zip(sources, results, strict=True) if isinstance(r, str)}
    return snaps, errors


def no_gpu_source(snap: HostSnapshot) -> bool:
    """Read, but unable to say anything about its GPUs (no NVML, no nvidia-smi)."""
    return snap.source is SourceKind.NONE


def cmd_snapshot(args: argparse.Namespace, term: Terminal) -> int:
    from gpudash.render import jsondoc
    from gpudash.render.textreport import snapshot_lines

    try:
        with CommandLoop() as loop:
            snaps, errors = loop.run(_sample_all(open_sources(args)))
    except KeyboardInterrupt:
        term.error("interrupted: nothing printed")
        return Exit.CANCELLED
    if args.json:
        from gpudash.state.footprints import LearnedUnits

        learned = LearnedUnits()  # what the unit lint reads of the units' past stops
        term.result_json(json_dumps(jsondoc.document(
            snaps, errors, lambda s: learned(s.host, simulated=s.source is SourceKind.DEMO)),
            indent=2))
    else:
        for snap in snaps:
            term.result(snapshot_lines(snap))
    for name, message in errors.items():
        term.error(f"{name}: {message}")
    blind = [s for s in snaps if no_gpu_source(s)]
    for snap in blind:
        term.error(f"{snap.host}: no GPU source: " + "; ".join(snap.errors))
    return worst([Exit.CONNECT] * bool(errors) + [Exit.NOT_FREED] * bool(blind))


def cmd_act(command: str, args: argparse.Namespace, term: Terminal) -> int:
    from gpudash.cli import act

    run = {"reclaim": act.run_reclaim, "start": act.run_start, "swap": act.run_swap,
           "reset": act.run_reset, "drain": act.run_drain, "resume": act.run_resume}[command]
    # The demo runs 20x faster than real time so the incident plays out in seconds; a
    # Slurm node's drain and resume act on the demo's Slurm node.
    return run(args, open_sources(args, demo_speed=20.0,
                                  demo_slurm=command in ("drain", "resume"))[0], term)


NO_TERMINAL = ("the dashboard needs a terminal (stdin and stdout a tty); from a script, "
               "cron or a pipe: gpudash snapshot --json (what holds the memory), gpudash "
               "reclaim/reap --yes --json (act), gpudash exporter (Prometheus)")


def cmd_dashboard(args: argparse.Namespace, term: Terminal) -> int:
    if not (term.stdin.isatty() and term.stdout.isatty()):
        # seen: `gpudash --demo </dev/null` wrote escape codes and exited 0 silently, once
        # with a traceback; nothing is drawn where nobody can see it
        term.error(NO_TERMINAL)
        return Exit.USAGE
    from gpudash.state import kept

    theme = kept.resolve_theme(args.theme, args.settings.theme)
    if getattr(args, "prom", None) is not None:
        return _prometheus_fleet(args, term, theme)
    return _host_dashboard(args, term, theme)


def _prometheus_fleet(args: argparse.Namespace, term: Terminal, theme: str | None) -> int:
    """The fleet from Prometheus; Enter opens a host as ``gpudash HOST`` does, and quitting
    that host comes back to the table (an action cut short ends both, with its verdict)."""
    import time

    from gpudash.fleetprom.visit import Visit
    from gpudash.ui.prom_app import run_prom_fleet

    memory = None
    while True:
        chosen, memory = run_prom_fleet(args.prom, interval=args.interval, theme=theme,
                                        memory=memory)
        if chosen is None:
            return Exit.OK
        args.hosts = [chosen]
        try:
            code = _host_dashboard(args, term, theme, memory.visits)
        except (SourceError, ValueError) as exc:  # a name SSH cannot take: back to the table
            term.error(f"{chosen}: {exc}")
            memory.visits[chosen] = Visit(time.time(), error=str(exc))
            continue
        if code not in (Exit.OK, Exit.CONNECT):
            return code


def _host_dashboard(args: argparse.Namespace, term: Terminal, theme: str | None,
                    visits: dict[str, Visit] | None = None) -> int:
    """The dashboard on ``args.hosts``; ``visits``: where what it found of the host is kept
    (the Prometheus fleet's row of it, once the table is back)."""
    from gpudash.ui.app import run_dashboard

    sources = open_sources(args)
    try:
        outcome = run_dashboard(
            sources,
            interval=args.interval,
            read_only=args.read_only,
            theme=theme,
            exec_options=None,
            demo=args.demo,
        )
    finally:
        with contextlib.suppress(KeyboardInterrupt), CommandLoop() as loop:
            # Bounded: a link that does not close must not keep a dashboard whose
            # terminal is gone (its collectors end with the connection anyway).
            loop.run(close_all(sources))
    if visits is not None and outcome.visit is not None:
        visits[args.hosts[0]] = outcome.visit
    said = outcome.lines()
    if said:  # the verdict of the action it quit during, or waited for
        term.result(said)
    if outcome.interrupted is not None:
        return Exit.INTERRUPTED
    return outcome.code


def _run(command: str | None, args: argparse.Namespace, term: Terminal) -> int:
    """The subcommand (None: the dashboard); the rarer ones are imported when used."""
    if command == "snapshot" and getattr(args, "prom", None) is not None:
        from gpudash.cli.promfleet import cmd_prom_snapshot

        return cmd_prom_snapshot(args, term)
    if command == "snapshot":
        return cmd_snapshot(args, term)
    if command in ("reclaim", "start", "swap", "reset", "drain", "resume"):
        return cmd_act(command, args, term)
    if command == "completion":
        from gpudash.cli.completion import script

        sys.stdout.write(script(args.shell))
        return Exit.OK
    if command == "history":
        from gpudash.cli.history import cmd_history

        return cmd_history(args, term)
    if command == "report":
        from gpudash.cli.report import cmd_report

        return cmd_report(args, term)
    if command == "fix":
        from gpudash.cli.fix import run_fix

        return run_fix(args, open_sources(args, demo_speed=20.0)[0], term)
    if command == "reap":
        from gpudash.cli.reap import run_reap

        return run_reap(args, open_sources(args, demo_speed=20.0, demo_orphans=True), term)
    if command == "exporter":
        from gpudash.cli.exporter import cmd_exporter

        args.read_only = True  # the exporter only looks
        return cmd_exporter(args, term, open_sources(args))
    return cmd_dashboard(args, term)


def main(argv: Sequence[str] | None = None) -> int:
    term = Terminal()
    if argv is None and "_ARGCOMPLETE" in os.environ:  # argcomplete loads only then
        from gpudash.cli.completion import complete_if_asked

        complete_if_asked()  # the shell asking for completions: answered, exited
    try:
        command, args = parse(list(sys.argv[1:] if argv is None else argv))
        opened = logfile.setup(args.log_level)
        if isinstance(opened, str):  # a state directory refused: say so, and how to fix it
            term.error(f"warning: {opened}")
        if command is not None:  # the dashboard says them in a notification
            for problem in args.config_errors:
                term.error(f"warning: settings ignored: {problem}")
    except KeyboardInterrupt:
        term.error("interrupted while starting: nothing done")
        return Exit.CANCELLED
    previous: dict[signal.Signals, Any] = {}
    if command is not None:
        # SIGTERM (`timeout`, systemd, CI) and SIGHUP (the session dropped) are a Ctrl+C:
        # before anything is sent they cancel (exit 5); while acting the action's own
        # handler takes over (gpudash.cli.act). The dashboard handles them itself.
        with contextlib.suppress(ValueError):  # not the main thread: leave them alone
            for sig in AS_CTRL_C:
                previous[sig] = signal.signal(sig, signal.default_int_handler)
    try:
        return _run(command, args, term)
    except SourceError as exc:
        term.error(str(exc))
        return Exit.CONNECT
    except KeyboardInterrupt:  # the actions handle their own once they may send anything
        term.error("interrupted: nothing done")
        return Exit.CANCELLED
    except Exception as exc:  # a bug: one line here, the traceback in the log
        log.exception("internal error")
        term.error(f"internal error: {type(exc).__name__}: {exc} "
                   f"(traceback in {logfile.log_path()})")
        return Exit.INTERNAL
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    raise SystemExit(main())
