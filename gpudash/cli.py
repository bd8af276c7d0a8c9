"""Command line: the dashboard, ``snapshot`` and ``reclaim``.

    gpudash [HOST ...]                 dashboard (this machine when no host is given)
    gpudash --demo                     dashboard on the simulated incident host
    gpudash snapshot [HOST ...] --json one snapshot per host
    gpudash reclaim [HOST] --unit U    stop + disable U, reap its leftovers, wait, report

Exit codes: 0 ok / memory confirmed free; 1 memory not confirmed free; 2 usage or plan
error (nothing was done); 3 a host could not be reached; 4 outcome unknown (link lost).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from gpudash import __version__
from gpudash.engine import (
    ActionKind,
    ActionReport,
    ExecOptions,
    PlanError,
    execute,
    plan_action,
    reverify,
)
from gpudash.model import HostSnapshot
from gpudash.source import HostSource, SourceError

EXIT_OK, EXIT_NOT_FREED, EXIT_USAGE, EXIT_CONNECT, EXIT_UNKNOWN = 0, 1, 2, 3, 4
SUBCOMMANDS = ("snapshot", "reclaim")
REVERIFY_ATTEMPTS = 3


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("hosts", nargs="*", metavar="HOST",
                   help="user@host, ssh://user@host:port or a ~/.ssh/config alias; "
                   "none: this machine")
    p.add_argument("--demo", action="store_true", help="the simulated incident host")
    p.add_argument("--interval", type=float, default=1.0, metavar="S",
                   help="seconds between samples (default 1; 0.1 works)")
    p.add_argument("--sudo", action="store_true",
                   help="act through `sudo -n` when the login is not root")
    p.add_argument("--accept-new-host-key", action="store_true",
                   help="accept and remember an unknown host key (like OpenSSH accept-new); "
                   "a changed key is always refused")
    p.add_argument("--ssh-config", type=Path, default=None, metavar="FILE",
                   help="ssh config file (default ~/.ssh/config)")
    p.add_argument("--known-hosts", type=Path, default=None, metavar="FILE",
                   help="known_hosts file (default ~/.ssh/known_hosts)")


def build_parser(command: str | None) -> argparse.ArgumentParser:
    if command == "snapshot":
        p = argparse.ArgumentParser(prog="gpudash snapshot",
                                    description="Print one snapshot of each host.")
        _common(p)
        p.add_argument("--json", action="store_true", help="JSON (schema 1) instead of text")
        return p
    if command == "reclaim":
        p = argparse.ArgumentParser(
            prog="gpudash reclaim",
            description="Stop and disable a unit, reap what is left of it, wait until its "
            "GPU memory is back, print a per-GPU report. Exit 0 only if confirmed free.",
        )
        _common(p)
        p.add_argument("--unit", required=True, help="the systemd unit (e.g. vllm-minimax-m25)")
        p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
        p.add_argument("--timeout", type=float, default=120.0, metavar="S",
                       help="give up waiting for the memory after S seconds (default 120)")
        p.add_argument("--term-timeout", type=float, default=10.0, metavar="S",
                       help="seconds between SIGTERM and SIGKILL (default 10)")
        p.add_argument("--json", action="store_true", help="print the report as JSON")
        return p
    p = argparse.ArgumentParser(
        prog="gpudash",
        description="Who holds the GPU memory, which systemd unit owns it, and getting it "
        "back with proof. Subcommands: snapshot, reclaim (see `gpudash reclaim -h`).",
    )
    _common(p)
    p.add_argument("--read-only", action="store_true", help="disable every action")
    p.add_argument("--theme", default=None, help="a Textual theme or one from themes/")
    p.add_argument("--version", action="version", version=f"gpudash {__version__}")
    return p


def open_sources(args: argparse.Namespace, *, demo_speed: float = 1.0) -> list[HostSource]:
    """The hosts named on the command line, as sources (not yet connected)."""
    read_only = getattr(args, "read_only", False)
    if args.demo:
        from gpudash.demo import DemoHost

        if args.hosts:
            raise SystemExit("gpudash: --demo takes no HOST")
        return [DemoHost(speed=demo_speed, read_only=read_only)]
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
        finally:
            await s.close()

    results = await asyncio.gather(*(one(s) for s in sources))
    snaps = [r for r in results if isinstance(r, HostSnapshot)]
    errors = {s.name: r for s, r in zip(sources, results, strict=True) if isinstance(r, str)}
    return snaps, errors


def cmd_snapshot(args: argparse.Namespace) -> int:
    from gpudash import jsonfmt
    from gpudash.textreport import snapshot_text

    snaps, errors = asyncio.run(_sample_all(open_sources(args)))
    if args.json:
        print(json.dumps(jsonfmt.document(snaps, errors), indent=2, ensure_ascii=False))
    else:
        for snap in snaps:
            print(snapshot_text(snap))
        for name, message in errors.items():
            print(f"{name}: error: {message}", file=sys.stderr)
    return EXIT_CONNECT if errors else EXIT_OK


def _confirm(lines: list[str]) -> bool:
    print("\n".join(lines))
    if not sys.stdin.isatty():
        print("gpudash: not a terminal and no --yes: nothing done", file=sys.stderr)
        return False
    try:
        answer = input("Proceed? [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


async def _reclaim(args: argparse.Namespace, source: HostSource) -> int:
    from gpudash import audit

    options = ExecOptions(term_timeout=args.term_timeout, verify_timeout=args.timeout,
                          poll=min(0.5, max(0.05, args.interval / 2)))
    try:
        snap = await source.control.sample()
        try:
            plan = plan_action(snap, ActionKind.RECLAIM, unit=args.unit)
        except PlanError as exc:
            print(f"gpudash: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if not args.yes and not _confirm(plan.describe(options.term_timeout)):
            return EXIT_USAGE
        if args.yes and not args.json:
            print("\n".join(plan.describe(options.term_timeout)))

        def progress(p: object) -> None:
            if not args.json:
                print(f"  .. {getattr(p, 'message', '')}", file=sys.stderr)

        report = await execute(plan, source.control, options, progress)
        for attempt in range(1, REVERIFY_ATTEMPTS + 1):
            if not report.unknown:
                break
            # The link dropped mid-action: nothing is re-sent; look again once it is back.
            print(f"gpudash: {report.summary}; re-verifying ({attempt}/{REVERIFY_ATTEMPTS})",
                  file=sys.stderr)
            await asyncio.sleep(min(8.0, 0.5 * 2**attempt))
            report = await reverify(plan, source.control, options, progress)
    except SourceError as exc:
        print(f"gpudash: {source.name}: {exc}", file=sys.stderr)
        return EXIT_CONNECT
    finally:
        await source.close()
    try:
        audit.append(report)
    except OSError as exc:
        print(f"gpudash: warning: audit file not written: {exc}", file=sys.stderr)
    _print_report(report, as_json=args.json)
    if report.unknown:
        return EXIT_UNKNOWN
    return EXIT_OK if report.confirmed else EXIT_NOT_FREED


def _print_report(report: ActionReport, *, as_json: bool) -> None:
    if as_json:
        from gpudash.audit import record_of

        print(json.dumps(record_of(report), indent=2, ensure_ascii=False))
    else:
        print("\n".join(report.describe()))


def cmd_reclaim(args: argparse.Namespace) -> int:
    if len(args.hosts) > 1:
        print("gpudash reclaim: one host at a time", file=sys.stderr)
        return EXIT_USAGE
    # The demo runs 20x faster than real time so the incident plays out in seconds.
    sources = open_sources(args, demo_speed=20.0)
    return asyncio.run(_reclaim(args, sources[0]))


def cmd_dashboard(args: argparse.Namespace) -> int:
    from gpudash.ui.app import run_dashboard

    sources = open_sources(args)
    try:
        return int(run_dashboard(
            sources,
            interval=args.interval,
            read_only=args.read_only,
            theme=args.theme,
            exec_options=None,
            welcome=args.demo and not args.read_only,
        ))
    finally:
        asyncio.run(_close_all(sources))


async def _close_all(sources: Sequence[HostSource]) -> None:
    for s in sources:
        try:
            await s.close()
        except (SourceError, OSError):
            pass  # closing a dead link has nothing left to report


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    args = build_parser(command).parse_args(argv[1:] if command else argv)
    if args.interval <= 0:
        print("gpudash: --interval must be > 0", file=sys.stderr)
        return EXIT_USAGE
    try:
        if command == "snapshot":
            return cmd_snapshot(args)
        if command == "reclaim":
            return cmd_reclaim(args)
        return cmd_dashboard(args)
    except SourceError as exc:
        print(f"gpudash: {exc}", file=sys.stderr)
        return EXIT_CONNECT
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
