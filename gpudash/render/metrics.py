"""The triage as Prometheus metrics, for ``gpudash exporter``.

``gpudash.feed.follow.HostFollower`` follows each host, as it does for the dashboard, and
keeps what it knows as one immutable ``Frame`` (the snapshot, its triage, the crash-loop
verdict of the samples seen), replaced whole on every sample or link change.
``TriageCollector`` (a ``prometheus_client`` collector) reads each host's frame once per
scrape, so a scrape is consistent per host, says what the dashboard says, and a process,
unit or GPU that went away leaves no series behind. ``metric_families`` is the pure part:
frames in, metric families out.

Series of a host whose link is not up are left out (its ``gpudash_link_up`` is 0 and
``gpudash_link_info`` carries the error): a number the exporter cannot vouch for now is
not exported.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)

from gpudash.domain.fleet import reclaimable_by_gpu
from gpudash.domain.model import HostSnapshot, Process
from gpudash.domain.owners import service_unit
from gpudash.domain.triage import (
    NO_UNIT,
    HostTriage,
    unattributed_mib,
)
from gpudash.domain.untrusted import clean
from gpudash.engine.target import Target, expected_free
from gpudash.feed.follow import Frame, HostFollower

log = logging.getLogger("gpudash.render.metrics")

MIB = 1 << 20  # bytes

HOST = ["host"]
GPU = ["host", "gpu", "uuid"]
UNIT = ["host", "unit"]
GPU_UNIT = ["host", "gpu", "uuid", "unit"]
GPU_REASON = ["host", "gpu", "uuid", "reason"]


class _Families:
    """The families of one scrape, filled host by host."""

    def __init__(self) -> None:
        g, c = GaugeMetricFamily, CounterMetricFamily
        self.link_up = g("gpudash_link_up", "1 when the host's link is up and sampling, "
                         "else 0 (the other series of the host are left out)", labels=HOST)
        self.link_info = InfoMetricFamily("gpudash_link", "The host's link state "
                                          "(connecting, connected, stale, reconnecting, "
                                          "error) and its last error", labels=HOST)
        self.samples = c("gpudash_samples", "Snapshots received from the host since the "
                         "exporter started", labels=HOST)
        self.sample_time = g("gpudash_sample_timestamp_seconds", "When the host took its "
                             "newest snapshot (epoch seconds)", labels=HOST)
        self.round_trip = g("gpudash_collector_round_trip_seconds", "A request's round trip "
                            "to the host's collector (not known for the shell collector or "
                            "the demo)", labels=HOST)
        self.collector_cpu = c("gpudash_collector_cpu_seconds", "CPU time the collector (and "
                               "the programs it ran) used on the host since it started; "
                               "re-read every 10 s; starts again with each connection: "
                               "rate() of it is the host side's cost", labels=HOST)
        self.degraded = g("gpudash_host_degraded", "1 when the host's collector is degraded "
                          "(no python3, or no NVML and no nvidia-smi)", labels=HOST)
        self.used = g("gpudash_gpu_memory_used_bytes", "GPU memory in use, as the driver "
                      "reports it (absent where it reports N/A)", labels=GPU)
        self.total = g("gpudash_gpu_memory_total_bytes", "GPU memory in all", labels=GPU)
        self.gpu_orphaned = g("gpudash_gpu_orphaned_bytes", "GPU memory held by orphaned "
                              "processes (what reaping them brings back), all owners "
                              "together; 0 when none", labels=GPU)
        self.unattributed = g("gpudash_gpu_memory_unattributed_bytes", "GPU memory the "
                              "driver reports used that no listed process accounts for (a "
                              "process in another PID namespace, one the collector could "
                              "not read, the driver's own); absent where a holder's memory "
                              "is unknown", labels=GPU)
        self.reclaimable = g("gpudash_reclaimable_bytes", "GPU memory reclaim would give "
                             "back: held by orphans, or by units down or respawning (the fleet "
                             "view's figure)", labels=GPU)
        self.orphaned = g("gpudash_orphaned_bytes", "GPU memory held by orphaned processes "
                          "of the owner (the unit label: a unit, a login session, a "
                          "container, 'no unit'): what `gpudash reap` brings back; only "
                          "where > 0", labels=GPU_UNIT)
        self.orphans = g("gpudash_orphaned_processes", "Orphaned processes of the owner (a "
                         "unit; a login session, a container, 'no unit' where they have "
                         "any) that hold GPU memory", labels=UNIT)
        self.stray = g("gpudash_gpu_stray_bytes", "GPU memory held outside what the node's "
                       "scheduler allocated (a Slurm node): reason 'no job' (a GPU no running "
                       "job has), 'outside allocation' (a job's process on a GPU not its "
                       "own), 'another job's GPU'; only where > 0", labels=GPU_REASON)
        self.unit_memory = g("gpudash_unit_gpu_memory_bytes", "GPU memory held by the "
                             "unit's processes", labels=GPU_UNIT)
        self.restarts = c("gpudash_unit_restarts", "Automatic restarts of the unit "
                          "(systemd's NRestarts: reset when started by hand)", labels=UNIT)
        self.crash_looping = g("gpudash_unit_crash_looping", "1 while systemd keeps "
                               "restarting the unit, the dashboard's verdict: it died again "
                               "after a restart (auto-restart with NRestarts >= 1), NRestarts "
                               ">= 3, or 2 restarts within 5 min seen by the host's follower "
                               "(a unit that holds no memory between crashes is remembered "
                               "meanwhile)", labels=UNIT)
        self.unit_info = InfoMetricFamily("gpudash_unit", "The unit's systemd state",
                                          labels=UNIT)

    def __iter__(self) -> Iterator[Metric]:
        return iter(vars(self).values())


def metric_families(views: Sequence[Frame]) -> list[Metric]:
    """Every host's series, from one view each."""
    m = _Families()
    for view in views:
        host = clean(view.name)
        m.link_up.add_metric([host], 1.0 if view.up else 0.0)
        m.link_info.add_metric([host], {"state": view.link.state,
                                        "error": clean(view.link.error or "")})
        m.samples.add_metric([host], float(view.samples))
        if view.up and view.snapshot is not None and view.triage is not None:
            _host(m, host, view.snapshot, view.triage, view)
    return list(m)


def orphaned_mib(snap: HostSnapshot, orphans: Sequence[Process]) -> dict[int, int]:
    """Per GPU, what reaping ``orphans`` brings back: the engine's own expectation."""
    return expected_free(snap, [Target.of(p, snap.boot_id) for p in orphans])


def _host(m: _Families, host: str, snap: HostSnapshot, tri: HostTriage, view: Frame) -> None:
    m.sample_time.add_metric([host], snap.taken_at)
    if view.round_trip_s is not None:
        m.round_trip.add_metric([host], view.round_trip_s)
    if snap.collector_cpu_s is not None:
        m.collector_cpu.add_metric([host], snap.collector_cpu_s)
    m.degraded.add_metric([host], 1.0 if snap.degraded else 0.0)
    labels = _GpuLabels(host, snap)
    _gpu_memory(m, snap, labels)
    orphans_of = _orphans_of(snap, tri)
    _orphaned(m, snap, tri, orphans_of, labels)
    _units(m, host, snap, orphans_of, view)
    _strays(m, snap, tri, labels)
    for group in tri.groups:
        if group.owner is not None and group.owner.rules.manages_unit:
            for gpu, mib in sorted(group.gpu_memory_mib.items()):
                m.unit_memory.add_metric(labels(gpu) + [clean(group.key)], float(mib * MIB))


class _GpuLabels:
    """A GPU's labels: host, index, uuid."""

    def __init__(self, host: str, snap: HostSnapshot) -> None:
        self.host = host
        self.uuid = {g.index: clean(g.uuid or "") for g in snap.gpus}

    def __call__(self, index: int) -> list[str]:
        return [self.host, str(index), self.uuid.get(index, "")]


def _gpu_memory(m: _Families, snap: HostSnapshot, labels: _GpuLabels) -> None:
    for gpu, mib in sorted(unattributed_mib(snap).items()):
        m.unattributed.add_metric(labels(gpu), float(mib * MIB))
    for g in snap.gpus:
        if g.memory_used_mib is not None:  # N/A stays absent, never 0
            m.used.add_metric(labels(g.index), float(g.memory_used_mib * MIB))
        if g.memory_total_mib is not None:
            m.total.add_metric(labels(g.index), float(g.memory_total_mib * MIB))


def _orphans_of(snap: HostSnapshot, tri: HostTriage) -> dict[str, list[Process]]:
    """Each owner's ORPHAN processes, by the owner's key (a unit's name, a login session's
    scope, ``docker:NAME``, ``no unit``): the ``unit`` label."""
    orphans_of: dict[str, list[Process]] = {}
    for p in tri.orphans():
        group = tri.group_of(p.pid)
        orphans_of.setdefault(group.key if group else (p.unit or NO_UNIT), []).append(p)
    return orphans_of


def _orphaned(m: _Families, snap: HostSnapshot, tri: HostTriage,
              orphans_of: dict[str, list[Process]], labels: _GpuLabels) -> None:
    """Orphaned bytes per GPU and unit, per GPU, and what reclaim would give back."""
    by_gpu = {g.index: 0 for g in snap.gpus}
    for unit, procs in sorted(orphans_of.items()):
        for gpu, mib in sorted(orphaned_mib(snap, procs).items()):
            if mib > 0:
                m.orphaned.add_metric(labels(gpu) + [clean(unit)], float(mib * MIB))
                by_gpu[gpu] = by_gpu.get(gpu, 0) + mib
    for gpu, mib in sorted(by_gpu.items()):
        m.gpu_orphaned.add_metric(labels(gpu), float(mib * MIB))
    reclaimable, _unknown = reclaimable_by_gpu(tri)
    for g in snap.gpus:
        m.reclaimable.add_metric(labels(g.index), float(reclaimable.get(g.index, 0) * MIB))


def _strays(m: _Families, snap: HostSnapshot, tri: HostTriage, labels: _GpuLabels) -> None:
    held: dict[tuple[int, str], int] = {}
    for pid, stray in tri.strays.items():
        p = snap.process(pid)
        for gpu, mib in sorted(p.gpu_memory_mib.items()) if p is not None else ():
            if mib:
                held[gpu, stray.reason] = held.get((gpu, stray.reason), 0) + mib
    for (gpu, reason), mib in sorted(held.items()):
        m.stray.add_metric(labels(gpu) + [clean(reason)], float(mib * MIB))


def _units(m: _Families, host: str, snap: HostSnapshot,
           orphans_of: dict[str, list[Process]], view: Frame) -> None:
    services = [u for u in snap.units if service_unit(u.name)]
    for u in services:
        labels = [host, clean(u.name)]
        m.orphans.add_metric(labels, float(len(orphans_of.get(u.name, ()))))
        if u.n_restarts is not None:
            m.restarts.add_metric(labels, float(u.n_restarts))
        m.unit_info.add_metric(labels, {
            "active_state": clean(u.active_state or ""), "sub_state": clean(u.sub_state or ""),
            "unit_file_state": clean(u.unit_file_state or ""),
            "restart": clean(u.restart or ""), "kill_mode": clean(u.kill_mode or ""),
        })
    names = {u.name for u in services}
    for key, procs in sorted(orphans_of.items()):  # a session's, a container's, nobody's
        if key not in names:
            m.orphans.add_metric([host, clean(key)], float(len(procs)))
    # a crash-looping unit may be missing from this sample (it held nothing just now)
    for name in sorted(names | view.crash_looping):
        m.crash_looping.add_metric([host, clean(name)],
                                   1.0 if name in view.crash_looping else 0.0)


class TriageCollector:
    """A ``prometheus_client`` collector over the hosts' followers."""

    def __init__(self, followers: Sequence[HostFollower]) -> None:
        self.followers = tuple(followers)

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        views = [f.frame for f in self.followers]  # one reference each: a consistent scrape
        yield from metric_families(views)
        cost = GaugeMetricFamily("gpudash_exporter_scrape_duration_seconds",
                                 "What building this scrape took the exporter")
        cost.add_metric([], time.perf_counter() - started)
        yield cost
