"""docs/reference/METRICS.md: every metric family ``gpudash exporter`` serves, read from
the exporter's own registry scraped in-process while it follows the demo host."""

from __future__ import annotations

import time
from collections.abc import Iterable

from gpudash.cli.reference.markdown import banner, code, table


def families() -> list[tuple[str, str, list[str], str]]:
    """(series name, type, labels, help) of each family, in the order /metrics has them."""
    from gpudash.cli.exporter import exporter_registry
    from gpudash.demo.host import DemoHost
    from gpudash.feed.follow import HostFollower
    from gpudash.feed.reconnect import LinkState

    demo = DemoHost(containers=True)
    demo.leave_orphans()  # every family has series: orphans, a unit down
    follower = HostFollower(demo, 1.0)
    follower.link_changed(LinkState("connected", time.time()))
    follower.sampled(demo.snapshot())
    out = []
    for family in exporter_registry([follower]).collect():
        declared: Iterable[str] = getattr(family, "_labelnames", ())
        labels = list(declared)
        for sample in family.samples:  # an info family's keys are its samples'
            labels += [k for k in sorted(sample.labels) if k not in labels]
        suffix = {"counter": "_total", "info": "_info"}.get(family.type, "")
        out.append((family.name + suffix, family.type, labels, family.documentation))
    return out


def metrics_page() -> str:
    rows = [[code(name), kind, ", ".join(labels) or "—", " ".join(doc.split())]
            for name, kind, labels, doc in families()]
    lines = [
        "# Prometheus metrics (`gpudash exporter`)", "",
        banner("the exporter's registry (gpudash/render/metrics.py, "
               "`gpudash.cli.exporter.exporter_registry`), scraped in-process"), "",
        "Every family `/metrics` (or `DIR/gpudash.prom`) has, with its type, labels and "
        "`# HELP` text. `host` is the host as given; `gpu` the GPU's index and `uuid` its "
        "UUID; `unit` the owner's key: a service, a login session (`session-7.scope`, "
        "whose orphans are a model server's engine and workers that lost their API "
        "server), `docker:NAME`, or `no unit` ([the triage rules](../TRIAGE.md)). A host "
        "whose link is not up has only `gpudash_link_up` 0 and `gpudash_link_info`. The "
        "`gpudash_exporter_process_*` families are prometheus_client's process collector: "
        "what the exporter itself costs. How to run it, the alert rules and queries: "
        "[the exporter's page](../EXPORTER.md).", "",
        *table(("metric", "type", "labels", "what"), rows), "",
    ]
    return "\n".join(lines)
