"""docs/reference/JSON.md: the ``snapshot --json`` document, its fields read from real
documents (the demo host's, one with a pod, one of a host that could not be read) and
their meanings from ``render.jsonfields``; the values of its enumerations from the code."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

from gpudash.cli.reference.markdown import banner, code, table
from gpudash.domain.model import UNREADABLE, Pod, SourceKind
from gpudash.domain.owners import OwnerCapability, OwnerKind
from gpudash.domain.triage import Flag
from gpudash.render.jsondoc import SCHEMA, document
from gpudash.render.jsonfields import FIELDS


class UndescribedField(Exception):
    """The document and ``render.jsonfields.FIELDS`` disagree."""


def documents() -> list[dict[str, Any]]:
    """Real documents, as ``gpudash snapshot --json`` writes them: the demo host (with a
    pod, which the demo does not have, and a leak) and a host that could not be read."""
    from gpudash.cli.args import build_parser
    from gpudash.cli.main import open_sources
    from gpudash.demo.host import DemoHost

    [demo] = open_sources(build_parser("snapshot").parse_args(["--demo", "--json"]))
    assert isinstance(demo, DemoHost)
    demo.driver.leaks[7] = 512  # memory no process holds on one GPU: its `unheld`
    snap = demo.snapshot()
    with_pod = dataclasses.replace(snap, pods=(Pod("0b8c…", "serving", "vllm-0"),))
    return [document([with_pod]), document([], errors={"gpu03": "no answer within 10 s"})]


def fields_of(docs: Iterable[Any]) -> dict[str, list[str]]:
    """Object path (``hosts[].gpus[]``) -> its fields, in the order the documents have
    them. Objects keyed by GPU index (``gpu_memory_mib``) are values, not objects."""
    out: dict[str, list[str]] = {}

    def walk(value: Any, path: str) -> None:
        if isinstance(value, list):
            for item in value:
                walk(item, path + "[]")
        elif isinstance(value, dict) and not all(k.isdigit() for k in value):
            known = out.setdefault(path, [])
            for key, item in value.items():
                if key not in known:
                    known.append(key)
                walk(item, f"{path}.{key}" if path else key)

    for doc in docs:
        walk(doc, "")
    return out


def check(found: Mapping[str, list[str]]) -> None:
    """Every field of the documents is described, and every description is of a field."""
    problems = []
    for obj, names in found.items():
        described = FIELDS.get(obj, {})
        problems += [f"{obj}.{n}".lstrip(".") + ": no meaning in FIELDS" for n in names
                     if n not in described]
    for obj, described in FIELDS.items():
        problems += [f"{obj}.{n}".lstrip(".") + ": described, not in the document"
                     for n in described if n not in found.get(obj, ())]
    if problems:
        raise UndescribedField("gpudash/render/jsonfields.py and the --json document "
                               "disagree:\n  " + "\n  ".join(problems))


def json_page() -> str:
    found = fields_of(documents())
    check(found)
    example = json.loads(EXAMPLE)
    unknown = [f"{obj}.{n}" for obj, names in fields_of([example]).items() for n in names
               if n not in found.get(obj, ())]
    if unknown:
        raise UndescribedField(f"the example names fields the document has not: {unknown}")
    lines = ["# The JSON snapshot (`gpudash snapshot --json`)", "",
             banner("gpudash/render/jsondoc.py (real documents) and the meanings in "
                    "gpudash/render/jsonfields.py"), "", INTRO.format(schema=SCHEMA), "",
             "```json", EXAMPLE.strip(), "```", "", "## Fields", ""]
    for obj, names in found.items():
        title = "The document" if obj == "" else f"`{obj}`"
        lines += [f"### {title}", "",
                  *table(("field", "meaning"), ([code(n), FIELDS[obj][n]] for n in names)),
                  ""]
    lines += ["## Values", "", *table(("field", "values"), _values()), "",
              "`unreadable`, in words:", "",
              *table(("value", "meaning"), ([code(k), v] for k, v in UNREADABLE.items())),
              "", MIGRATION, ""]
    return "\n".join(lines)


def _values() -> Iterable[list[str]]:
    def each(values: Iterable[str]) -> str:
        return ", ".join(code(v) for v in values)

    yield ["`processes[].flags`, `owners[].flags`", each(f.value for f in Flag)]
    yield ["`owners[].kind`", each(k.value for k in OwnerKind)]
    yield ["`owners[].capabilities`", each(c.value for c in OwnerCapability)]
    yield ["`source`", each(s.value for s in SourceKind)]
    yield ["`processes[].unreadable`", each(UNREADABLE)]


INTRO = """\
`gpudash snapshot --json` prints one document (`"schema": {schema}`) with every host's
GPUs, processes, units, containers, pods and owners, and what the triage made of them.

- A value the host does not report is `null` (N/A), never 0.
- Every field of the model's GPUs, processes, units, containers and pods is written under
  its own name; fields are only ever added (to schema 1, then 2), never renamed or
  removed (schema 3 changed two values, below). Added since the first release:
  `boot_id`, `cannot_act_reason`, host
  `cpu_pct`/`mem_used_mib`/`mem_total_mib`/`collector_cpu_s`, process
  `cpu_pct`/`rss_mib`/`device_gpus`, unit `description`; process `pgid`, what its cgroup
  says of its owner (`container_runtime`, `container_id`, `pod_uid`, and under a user's
  own systemd `user_uid` and `user_unit`), `unreadable` and `orphan`; GPU
  `unattributed_mib`; owner kind `user service`; what was checked of memory no process
  holds: GPU `process_list`, `device_scan`, `mig_mode`, `display_active`,
  `persistence_mode`, `unheld`, host `pid_view`.
- A host that could not be read appears as `{{"name": …, "error": "…"}}` (its lists
  empty) and the exit code is 3; a host without a GPU source (`source` `none`) exits 1.
- Text is JSON-escaped as usual, and control, bidi and invisible characters are `\\uNNNN`
  escapes, so the document is safe to print.

An excerpt (one entry of each list):"""

EXAMPLE = """
{"schema": 3,
 "hosts": [{"name": "gpu01", "taken_at": 1796000000.0, "boot_id": "5e1f0c2a-…",
   "source": "nvml", "degraded": false, "errors": [], "can_act": true,
   "cannot_act_reason": null, "cpu_pct": 6.5, "mem_used_mib": 124518,
   "mem_total_mib": 2112512, "collector_cpu_s": 41.37,
   "gpus": [{"index": 0, "uuid": "GPU-…", "name": "NVIDIA RTX PRO 6000 Blackwell",
             "memory_total_mib": 97887, "memory_used_mib": 96801, "memory_free_mib": 1086,
             "memory_reserved_mib": 0, "utilization_pct": 0, "temperature_c": 44,
             "power_w": 118.5, "power_limit_w": 600.0, "error": null}],
   "processes": [{"pid": 215004, "ppid": 1, "start_ticks": 25202000,
                  "started_at": 1795990000.0, "user": "root", "state": "S",
                  "name": "VLLM::Worker_TP", "cmdline": "VLLM::Worker_TP0",
                  "unit": "vllm-minimax-m25.service",
                  "cgroup": "/system.slice/vllm-minimax-m25.service",
                  "gpu_memory_mib": {"0": 96801}, "cpu_pct": 99.0, "rss_mib": 9216,
                  "sm_util_pct": 0, "device_gpus": [], "flags": ["ORPHAN", "UNIT INACTIVE"]}],
   "units": [{"name": "vllm-minimax-m25.service", "active_state": "inactive",
              "sub_state": "dead", "unit_file_state": "disabled", "restart": "always",
              "kill_mode": "process", "n_restarts": 1, "main_pid": null,
              "control_group": "/system.slice/vllm-minimax-m25.service",
              "description": "vLLM MiniMax-M2.5 (TP=8, EP)"}],
   "containers": [{"id": "c0ffee5e9d2b…", "runtime": "docker", "name": "vllm-embed",
                   "image": "vllm/vllm-openai:v0.11.0", "state": "running",
                   "restart_policy": "always", "restart_count": 0, "main_pid": 215530,
                   "health": "none", "init": "no", "pid_mode": "private", "port": 8100}],
   "pods": [],
   "owners": [{"key": "docker:vllm-embed", "kind": "container",
               "unit": "docker-c0ffee5e9d2b….scope", "container_id": "c0ffee5e9d2b…",
               "runtime": "docker", "pod_uid": null,
               "capabilities": ["disable", "reclaim", "remove", "stop"],
               "respawner": "docker (restart policy always)", "flags": [],
               "gpu_memory_mib": {"7": 1000}, "pids": [215530],
               "warnings": ["restart policy always: …"]}]}]}
"""

MIGRATION = """\
## Migrating from schema 2 to 3

Every field is where it was. Two values changed: a process's `claim` names its container
or pod as well (`container:docker/ID`, `container:podman/ID`, `pod:UID`; it named only
Slurm jobs before), the one way gpudash's collector names an owner; and a process in a
Kubernetes pod has `container_id` null (its `container_runtime` is still `cri`, its
`pod_uid` the pod's), as has the pod's entry of `owners`: the pod is the owner, not the
container in it.

## Migrating from schema 1 to 2

Nothing of schema 1 moved or changed meaning, except who owns a container's processes:
each process now has `owner` (the key of an entry of `owners`), and a process in a
container's cgroup is owned by `docker:NAME`, `podman:NAME` or `pod:NAMESPACE/NAME`
(`pod:UID` where `crictl` does not answer), no longer by its `docker-<id>.scope` (still in
`unit`). Group processes by `owner`, not by `unit`. `containers` lists what
`docker inspect` / `podman inspect` said of the containers the processes' cgroups name
(`state` `removed`: the runtime said there is no such container any more); `pods` the
Kubernetes pods."""
