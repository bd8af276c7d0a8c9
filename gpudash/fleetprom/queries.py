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


def _sum(metric: str, stat: str, by: str = G) -> str:
    return _tag(f"sum by ({by}) ({metric})", stat)


# A GPU is held when some process accounts for memory on it (used less what nobody
# accounts for), or when a holder's memory is unknown (then unattributed is absent).
_HELD = ("(gpudash_gpu_memory_used_bytes - gpudash_gpu_memory_unattributed_bytes) > 0 "
         "or (gpudash_gpu_memory_used_bytes unless gpudash_gpu_memory_unattributed_bytes)")

GPUDASH = " or ".join([
    _sum("gpudash_gpu_memory_used_bytes", "used_bytes"),
    _sum("gpudash_gpu_memory_total_bytes", "total_bytes"),
    _tag(f"count by ({G}) (gpudash_gpu_memory_total_bytes)", "gpus"),
    _tag(f"count by ({G}) ({_HELD})", "gpus_held"),
    _sum("gpudash_gpu_orphaned_bytes", "orphaned_bytes"),
    _sum("gpudash_orphaned_processes", "orphans"),
    _sum("gpudash_reclaimable_bytes", "reclaimable_bytes"),
    _sum("gpudash_gpu_memory_unattributed_bytes", "unattributed_bytes"),
    _sum("gpudash_gpu_stray_bytes", "stray_bytes"),
    _tag(f"max by ({G}) (gpudash_link_up)", "link_up"),
    _tag(f"max by ({G}) (gpudash_sample_timestamp_seconds)", "sampled_at"),
    _tag(f"max by ({G}) (timestamp(gpudash_link_up))", "scraped_at"),
])

DCGM = " or ".join([
    _sum("DCGM_FI_DEV_FB_USED", "used_mib", D),
    _sum("DCGM_FI_DEV_FB_FREE", "free_mib", D),
    _tag(f"count by ({D}) (DCGM_FI_DEV_FB_USED)", "gpus"),
    _tag(f"count by ({D}) (DCGM_FI_DEV_FB_USED > {DCGM_HELD_MIB})", "gpus_held"),
    # {hpc_job=""} matches a series without the label too: a GPU no mapping file names
    _sum(f'DCGM_FI_DEV_FB_USED{{hpc_job="", pod=""}} > {DCGM_HELD_MIB}', "unowned_mib", D),
    _tag(f"max by ({D}) (timestamp(DCGM_FI_DEV_FB_USED))", "scraped_at"),
])

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
