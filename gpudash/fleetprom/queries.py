"""What a refresh asks Prometheus: three instant queries, aggregated on the server, whatever
the number of hosts.

Each query is an ``or`` of parts; every part is tagged with a ``stat`` label
(``label_replace``) saying what its value is, so one answer carries several figures per
host and ``gpudash.fleetprom.rows`` reads them back by that label. (``or`` matches label
sets without the metric name: the ``stat`` label is what keeps the parts apart.)

- ``GPUDASH``: per (instance, job, host) of gpudash's exporter (node-local: one host per
  target; central: several): GPU memory used/total, GPUs and GPUs held, orphaned,
  reclaimable, unattributed and stray bytes, orphaned processes, whether the exporter reads
  the host, when the host took its sample and when Prometheus last scraped it.
- ``DCGM``: per (instance, job, Hostname, hostname) of dcgm-exporter (``Hostname`` in its
  older releases, ``hostname`` since May 2026; both kept, whichever is set names the host):
  memory used and free (MiB), GPUs, GPUs held, memory held on GPUs no job and no pod has.
- ``FLEET``: crash-looping units, firing gpudash alerts (``ALERTS``), scrape targets that
  are down, and which dcgm-exporter jobs map GPUs to jobs or pods at all.
"""

from __future__ import annotations

G = "instance, job, host"
D = "instance, job, Hostname, hostname"
# A GPU some process holds memory on, as dcgm-exporter can tell: more than this used (an
# idle GPU reports a few MiB at most; a CUDA context alone is ~250 MiB)
DCGM_HELD_MIB = 64
# The alert rules of docs/prometheus/gpudash-alerts.yml
ALERT_NAMES = ("GPUMemoryOrphaned", "GPUUnitCrashLooping", "GPUHostUnwatched",
               "GPUMemoryStray")


def _tag(expr: str, stat: str) -> str:
    return f'label_replace({expr}, "stat", "{stat}", "", "")'


# A GPU is held when some process accounts for memory on it (used less what nobody
# accounts for), or when a holder's memory is unknown (then unattributed is absent).
_HELD = ("(gpudash_gpu_memory_used_bytes - gpudash_gpu_memory_unattributed_bytes) > 0 "
         "or (gpudash_gpu_memory_used_bytes unless gpudash_gpu_memory_unattributed_bytes)")

# (stat, its expression per host): the parts of GPUDASH and DCGM, and the recording rules
GPUDASH_PARTS = (
    ("used_bytes", f"sum by ({G}) (gpudash_gpu_memory_used_bytes)"),
    ("total_bytes", f"sum by ({G}) (gpudash_gpu_memory_total_bytes)"),
    ("gpus", f"count by ({G}) (gpudash_gpu_memory_total_bytes)"),
    ("gpus_held", f"count by ({G}) ({_HELD})"),
    ("orphaned_bytes", f"sum by ({G}) (gpudash_gpu_orphaned_bytes)"),
    ("orphans", f"sum by ({G}) (gpudash_orphaned_processes)"),
    ("reclaimable_bytes", f"sum by ({G}) (gpudash_reclaimable_bytes)"),
    ("unattributed_bytes", f"sum by ({G}) (gpudash_gpu_memory_unattributed_bytes)"),
    ("stray_bytes", f"sum by ({G}) (gpudash_gpu_stray_bytes)"),
    ("link_up", f"max by ({G}) (gpudash_link_up)"),
    ("sampled_at", f"max by ({G}) (gpudash_sample_timestamp_seconds)"),
    ("scraped_at", f"max by ({G}) (timestamp(gpudash_link_up))"),
)
DCGM_PARTS = (
    ("used_mib", f"sum by ({D}) (DCGM_FI_DEV_FB_USED)"),
    ("free_mib", f"sum by ({D}) (DCGM_FI_DEV_FB_FREE)"),
    ("gpus", f"count by ({D}) (DCGM_FI_DEV_FB_USED)"),
    ("gpus_held", f"count by ({D}) (DCGM_FI_DEV_FB_USED > {DCGM_HELD_MIB})"),
    # {hpc_job=""} matches a series without the label too: a GPU no mapping file names
    ("unowned_mib",
     f'sum by ({D}) (DCGM_FI_DEV_FB_USED{{hpc_job="", pod=""}} > {DCGM_HELD_MIB})'),
    ("scraped_at", f"max by ({D}) (timestamp(DCGM_FI_DEV_FB_USED))"),
)

GPUDASH = " or ".join(_tag(expr, stat) for stat, expr in GPUDASH_PARTS)
DCGM = " or ".join(_tag(expr, stat) for stat, expr in DCGM_PARTS)

_ALERTS = "|".join(ALERT_NAMES)
FLEET = " or ".join([
    _tag("gpudash_unit_crash_looping == 1", "crash_looping"),
    _tag(f'count by (host, alertname) (ALERTS{{alertstate="firing", '
         f'alertname=~"{_ALERTS}"}})', "alert"),
    _tag("up == 0", "target_down"),
    _tag('count by (job) (DCGM_FI_DEV_FB_USED{hpc_job!=""} '
         'or DCGM_FI_DEV_FB_USED{pod!=""})', "owner_labels"),
])

QUERIES = (("gpudash", GPUDASH), ("dcgm", DCGM), ("fleet", FLEET))

# --- the same figures, kept by Prometheus' recording rules -------------------------------
# docs/prometheus/gpudash-records.yml (``recording_rules()``) keeps every part above as one
# series per host and stat, evaluated once per evaluation interval: reading them costs the
# server a lookup, not twelve aggregations over every GPU's series per dashboard per second.
RECORDED_GPUDASH = "gpudash:host_figures"
RECORDED_DCGM = "gpudash:dcgm_host_figures"
# one series, evaluated last in the group: when it is new, every figure above is
RECORDED_CLOCK = "gpudash:fleet_hosts"
RULES_GROUP = "gpudash-fleet"
# One query per figure, side by side (Prometheus answers them on all its cores: 5,000
# hosts' 55,000 series came in half the time of one query for all), each the recorded
# series less their name and ``stat`` (shorter answers; the reader tags them again);
# then FLEET as the raw queries read it: (family, stat or None, query).
RECORDED = (
    *(("gpudash", stat, f'sum without (stat) ({RECORDED_GPUDASH}{{stat="{stat}"}})')
      for stat, _expr in GPUDASH_PARTS),
    *(("dcgm", stat, f'sum without (stat) ({RECORDED_DCGM}{{stat="{stat}"}})')
      for stat, _expr in DCGM_PARTS),
    ("fleet", None, FLEET),
)


def recording_rules() -> dict[str, object]:
    """The recording rules file (as YAML's data) that keeps the figures RECORDED reads."""
    rules: list[dict[str, object]] = [
        {"record": name, "expr": expr, "labels": {"stat": stat}}
        for name, parts in ((RECORDED_GPUDASH, GPUDASH_PARTS), (RECORDED_DCGM, DCGM_PARTS))
        for stat, expr in parts]
    # hosts of either exporter; "or vector(0)": the series exists with no host at all
    rules.append({"record": RECORDED_CLOCK,
                  "expr": f"count(count by ({G}) (gpudash_link_up) or count by ({D}) "
                          "(DCGM_FI_DEV_FB_USED)) or vector(0)"})
    return {"groups": [{"name": RULES_GROUP, "rules": rules}]}


# Whether the recording rules are there, and when they were last evaluated: one series'
# timestamp (none: no rules; the raw queries are read, every refresh). A refresh whose
# answer is no newer than the last read's reads nothing more: the recorded figures, and
# what else it reads (crash loops, ALERTS, targets down), follow the rules' evaluation.
PROBE = f"timestamp({RECORDED_CLOCK})"
