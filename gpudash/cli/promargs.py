"""``--prometheus [URL]``: the fleet from Prometheus instead of hosts named one by one, for
the dashboard and ``snapshot``; checked before anything is contacted (exit 2 if bad)."""

from __future__ import annotations

import argparse
from dataclasses import replace

from gpudash.state import config
from gpudash.state.promconfig import check_template, check_url


def add_prometheus(parser: argparse.ArgumentParser) -> None:
    p = parser.add_argument_group("the fleet from Prometheus")
    p.add_argument("--prometheus", nargs="?", const="", default=None, metavar="URL",
                   help="every host Prometheus has gpudash's or dcgm-exporter's series of, "
                   "from a few aggregated queries (no SSH until a host is opened); no URL: "
                   "[prometheus] url in config.toml, where its credentials are too "
                   "(docs/PROMETHEUS.md)")
    p.add_argument("--ssh-name", metavar="TEMPLATE", default=None,
                   help="with --prometheus: the SSH name Enter opens, from the host's "
                   "labels, e.g. '{instance|noport}' (the default) or 'root@{hostname}' "
                   "([prometheus] ssh_name in config.toml)")


def check_prometheus(args: argparse.Namespace, problems: list[config.Problem],
                     parser: argparse.ArgumentParser) -> None:
    """``args.prom`` (the settings to reach it, URL included) when ``--prometheus`` is
    given; a usage error when it cannot be used as asked."""
    args.prom = None
    if getattr(args, "prometheus", None) is None:
        if getattr(args, "ssh_name", None) is not None:
            parser.error("--ssh-name names the hosts of --prometheus: give --prometheus too")
        return
    if args.hosts or args.hosts_file or args.demo or args.demo_hosts:
        parser.error("--prometheus reads the hosts from Prometheus: it takes no HOST, "
                     "--hosts-file or --demo")
    bad = [str(p) for p in problems if p.key in (None, "prometheus")]
    if bad:  # half a table would authenticate or verify other than it says
        parser.error("a [prometheus] setting that cannot be used, refused (nothing was "
                     "asked): " + "; ".join(bad))
    settings: config.Settings = args.settings
    url = args.prometheus or settings.prometheus.url
    if not url:
        parser.error(f"--prometheus: no URL given and no [prometheus] url in "
                     f"{config.config_path()}")
    try:
        args.prom = replace(settings.prometheus, url=check_url(url))
    except ValueError as exc:
        parser.error(f"--prometheus: {exc}")
    if getattr(args, "ssh_name", None) is not None:
        try:
            args.prom = replace(args.prom, ssh_name=check_template(args.ssh_name))
        except ValueError as exc:
            parser.error(f"--ssh-name: {exc}")
