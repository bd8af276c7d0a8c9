"""One refresh's answers as one immutable row per host (pure: no I/O).

A host is named by gpudash's ``host`` label (its exporter's series), else dcgm-exporter's
``hostname`` or ``Hostname``, else its scrape target (``instance`` without the port); a
host both export is one row, gpudash's figures first. What a source cannot say is
``None`` (shown N/A), never 0: dcgm-exporter knows no orphans, and "held with no job / no
pod" only where its scrape job labels GPUs with jobs or pods at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from gpudash.fleetprom.sample import Sample
from gpudash.fleetprom.sshname import strip_port
from gpudash.record import record

MIB = 1024 * 1024
GONE_KEPT_S = 900.0  # a host gone from the answers stays (stale) this long
STALE_AFTER_S = 120.0  # a host whose newest scrape is older than this is stale
IDENTITY = ("instance", "job", "host", "hostname", "Hostname")


@record
class PromHost:
    """One host's row, as Prometheus has it."""

    name: str
    labels: tuple[tuple[str, str], ...]  # instance, job and the host label: ssh_name's input
    sources: tuple[str, ...]  # "gpudash", "dcgm" (none: only a target that is down)
    gpus: int | None = None
    gpus_held: int | None = None  # GPUs on which some process holds memory
    used_bytes: float | None = None
    total_bytes: float | None = None
    orphaned_bytes: float | None = None
    orphans: int | None = None  # orphaned processes
    reclaimable_bytes: float | None = None
    unattributed_bytes: float | None = None
    stray_bytes: float | None = None
    unowned_bytes: float | None = None  # dcgm: held on GPUs no job and no pod has
    crash_looping: tuple[str, ...] | None = None
    alerts: tuple[str, ...] = ()  # firing gpudash alerts, one name per alert
    link_up: bool | None = None  # gpudash's exporter reads the host
    target_down: bool = False  # Prometheus cannot scrape its target (up == 0)
    sampled_at: float | None = None  # when the host took its newest sample (gpudash)
    scraped_at: float | None = None  # Prometheus' newest scrape of it
    gone_since: float | None = None  # not in the answers since (kept from before)

    def label(self, name: str) -> str | None:
        return dict(self.labels).get(name)

    def age(self, now: float) -> float | None:
        """Seconds since Prometheus last scraped the host."""
        return None if self.scraped_at is None else max(0.0, now - self.scraped_at)

    def states(self, now: float) -> frozenset[str]:
        """The filter words it answers to (``gpudash.ui.fleet_rows.STATE_FILTERS``)."""
        age = self.age(now)
        on = {
            "orphans": bool(self.orphans) or bool(self.orphaned_bytes),
            "crashloop": bool(self.crash_looping),
            "reclaim": bool(self.reclaimable_bytes),
            "alerting": bool(self.alerts),
            "down": self.target_down or self.link_up is False,
            "stale": (self.gone_since is not None or self.target_down
                      or age is None or age > STALE_AFTER_S),
        }
        return frozenset(k for k, v in on.items() if v)


@record
class PromFleet:
    """Every host of one refresh, sorted by name; ``at``: Prometheus' time of it;
    ``source``: "recorded" (read from the recording rules' series) or "raw" (summed by
    the queries themselves)."""

    at: float
    hosts: tuple[PromHost, ...]
    down_targets: frozenset[tuple[str, str]] = frozenset()  # (instance, job) with up == 0
    source: str = "raw"


def _stats(samples: Iterable[Sample], keys: tuple[str, ...]
           ) -> dict[tuple[str, ...], dict[str, float]]:
    """{the identity labels' values: {stat: value}}."""
    out: dict[tuple[str, ...], dict[str, float]] = {}
    blank = ("",) * len(keys)
    for s in samples:
        labels = s.labels
        stat = labels.get("stat")
        if stat:  # (map: tens of thousands of samples a read at 5,000 hosts)
            out.setdefault(tuple(map(labels.get, keys, blank)), {})[stat] = s.value
    return out


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def _gpudash_rows(samples: list[Sample]) -> dict[str, PromHost]:
    keys = ("instance", "job", "host")
    rows: dict[str, PromHost] = {}
    for (instance, job, host), st in _stats(samples, keys).items():
        name = host or strip_port(instance)
        row = PromHost(
            name=name, labels=tuple((k, v) for k, v in zip(keys, (instance, job, host),
                                                           strict=True) if v),
            sources=("gpudash",), gpus=_int(st.get("gpus")),
            gpus_held=_int(st.get("gpus_held", 0.0 if "gpus" in st else None)),
            used_bytes=st.get("used_bytes"), total_bytes=st.get("total_bytes"),
            orphaned_bytes=st.get("orphaned_bytes", 0.0 if "gpus" in st else None),
            orphans=_int(st.get("orphans", 0.0 if "gpus" in st else None)),
            reclaimable_bytes=st.get("reclaimable_bytes"),
            unattributed_bytes=st.get("unattributed_bytes"),
            stray_bytes=st.get("stray_bytes", 0.0 if "gpus" in st else None),
            crash_looping=() if "gpus" in st else None,
            link_up=None if "link_up" not in st else st["link_up"] > 0,
            sampled_at=st.get("sampled_at"), scraped_at=st.get("scraped_at"))
        old = rows.get(name)  # two exporters watch it: the one scraped last
        if old is None or (row.scraped_at or 0) > (old.scraped_at or 0):
            rows[name] = row
    return rows


def _dcgm_rows(samples: list[Sample], owner_jobs: set[str]) -> dict[str, PromHost]:
    keys = ("instance", "job", "Hostname", "hostname")
    rows: dict[str, PromHost] = {}
    for (instance, job, old_name, new_name), st in _stats(samples, keys).items():
        name = new_name or old_name or strip_port(instance)
        used, free = st.get("used_mib"), st.get("free_mib")
        labelled = job in owner_jobs
        row = PromHost(
            name=name, labels=tuple((k, v) for k, v in zip(
                keys, (instance, job, old_name, new_name), strict=True) if v),
            sources=("dcgm",), gpus=_int(st.get("gpus")),
            gpus_held=_int(st.get("gpus_held", 0.0)),
            used_bytes=None if used is None else used * MIB,
            total_bytes=None if used is None or free is None else (used + free) * MIB,
            unowned_bytes=st.get("unowned_mib", 0.0) * MIB if labelled else None,
            scraped_at=st.get("scraped_at"))
        old = rows.get(name)
        if old is None or (row.scraped_at or 0) > (old.scraped_at or 0):
            rows[name] = row
    return rows


def _with_fleet(rows: dict[str, PromHost], fleet: list[Sample]) -> None:
    """Crash loops and firing alerts, into the rows of the hosts they name."""
    looping: dict[str, set[str]] = {}
    alerts: dict[str, list[str]] = {}
    for s in fleet:
        stat, host = s.labels.get("stat"), s.labels.get("host", "")
        if stat == "crash_looping" and host in rows:
            looping.setdefault(host, set()).add(s.labels.get("unit", ""))
        elif stat == "alert" and host in rows:
            alerts.setdefault(host, []).extend([s.labels.get("alertname", "")] *
                                               max(1, int(s.value)))
    for name, units in looping.items():
        rows[name] = replace(rows[name], crash_looping=tuple(sorted(units)))
    for name, names in alerts.items():
        rows[name] = replace(rows[name], alerts=tuple(sorted(names)))


def _with_down(rows: dict[str, PromHost], fleet: list[Sample]) -> None:
    """Targets Prometheus cannot scrape: their hosts marked down; a target of a job the
    fleet knows, with no row, gets one of its own (named by its address)."""
    by_target: dict[tuple[str | None, str | None], list[str]] = {}
    for name, row in rows.items():  # a central exporter is the target of several hosts
        by_target.setdefault((row.label("instance"), row.label("job")), []).append(name)
    jobs = {r.label("job") for r in rows.values()}
    for s in fleet:
        if s.labels.get("stat") != "target_down":
            continue
        instance, job = s.labels.get("instance", ""), s.labels.get("job", "")
        for name in by_target.get((instance, job), []):
            rows[name] = replace(rows[name], target_down=True, link_up=False)
        if (instance, job) not in by_target and job in jobs and instance:
            name = strip_port(instance)
            if name not in rows:
                rows[name] = PromHost(name, (("instance", instance), ("job", job)), (),
                                      target_down=True, scraped_at=s.at)


def fleet_of(answers: Mapping[str, list[Sample]]) -> PromFleet:
    """The rows of one refresh's answers (``gpudash.fleetprom.queries.QUERIES`` by name)."""
    every = [s for samples in answers.values() for s in samples]
    at = max((s.at for s in every), default=0.0)
    fleet = answers.get("fleet", [])
    owner_jobs = {s.labels.get("job", "") for s in fleet
                  if s.labels.get("stat") == "owner_labels"}
    rows = _dcgm_rows(answers.get("dcgm", []), owner_jobs)
    for name, row in _gpudash_rows(answers.get("gpudash", [])).items():
        also = rows.get(name)
        rows[name] = row if also is None else replace(row, sources=("gpudash", "dcgm"))
    _with_fleet(rows, fleet)
    _with_down(rows, fleet)
    down = frozenset((s.labels.get("instance", ""), s.labels.get("job", "")) for s in fleet
                     if s.labels.get("stat") == "target_down")
    return PromFleet(at, tuple(rows[n] for n in sorted(rows)), down)


def carried(previous: PromFleet | None, new: PromFleet) -> PromFleet:
    """``new``, with the hosts of ``previous`` it no longer has kept as they were, marked
    gone (stale) for up to GONE_KEPT_S: a host whose exporter went away shows as stale,
    not as nothing; one whose target is down keeps its name and last figures."""
    if previous is None:
        return new
    before = {(h.label("instance"), h.label("job")): h for h in previous.hosts}
    named = {h.name: h for h in previous.hosts}
    hosts: dict[str, PromHost] = {}
    for h in new.hosts:
        old = before.get((h.label("instance"), h.label("job")))
        if not h.sources and old is not None:  # only "target down": as it was, and down
            h = replace(old, target_down=True, link_up=False,
                        gone_since=old.gone_since or new.at)
        was = named.get(h.name)
        if (was is not None and "gpudash" in was.sources and "gpudash" not in h.sources
                and (was.label("instance") or "", was.label("job") or "") in new.down_targets):
            h = replace(h, target_down=True, link_up=False)  # dcgm's figures, gpudash's gone
        hosts[h.name] = h
    for h in previous.hosts:
        if h.name not in hosts and new.at - (h.gone_since or new.at) <= GONE_KEPT_S:
            h = h if h.gone_since is not None else replace(h, gone_since=new.at)
            if (h.label("instance") or "", h.label("job") or "") in new.down_targets:
                h = replace(h, target_down=True, link_up=False)
            hosts[h.name] = h
    return PromFleet(new.at, tuple(hosts[n] for n in sorted(hosts)), new.down_targets,
                     new.source)
