"""The fit before every start (issue 19, item 2): what a model will take, from its learned
footprint or from its own arguments, on the GPUs its unit gives it.

Seen before: `start`, `u` and `R` skipped the fit check that `swap` had; with no footprint
learned, even a swap was "not checked" although vLLM's arguments say what it will take.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpudash.collector.host.parsing import parse_systemctl_show
from gpudash.domain.model import Gpu, HostSnapshot, Process, Unit
from gpudash.domain.units import gib
from gpudash.engine import SPECS, ActionKind, PlanError, Selection, unit_ref
from gpudash.engine.fit import Need, check, estimate

TOTAL = 97_887  # MiB: 95.6 GiB, as the demo's GPUs


def snapshot(used: dict[int, int], unit: Unit) -> HostSnapshot:
    gpus = tuple(Gpu(i, memory_total_mib=TOTAL, memory_used_mib=mib) for i, mib in used.items())
    procs = tuple(Process(pid=5000 + i, ppid=1, start_ticks=9, user="bob", name="python3",
                          cmdline="python3 train.py", gpu_memory_mib={i: mib})
                  for i, mib in used.items() if mib)
    return HostSnapshot("h", 100.0, gpus, procs, (unit,))


def vllm(argv: str, devices: str | None = None) -> Unit:
    return Unit("vllm-x.service", "inactive", "dead", "disabled", "always", "mixed",
                exec_start="/opt/v/bin/python3 -m vllm.entrypoints.openai.api_server " + argv,
                cuda_visible_devices=devices)


def test_vllms_arguments_say_what_it_takes_on_the_gpus_it_is_given() -> None:
    unit = vllm("--model m --tensor-parallel-size 2 --gpu-memory-utilization 0.5", "2,3")
    need = estimate(unit, snapshot(dict.fromkeys(range(4), 0), unit))
    assert need is not None and need.mib_per_gpu == {2: TOTAL // 2, 3: TOTAL // 2}
    assert "CUDA_VISIBLE_DEVICES=2,3" in need.source
    # on GPU3 bob holds 60 GiB: half of it is not free there
    snap = snapshot({0: 0, 1: 0, 2: 0, 3: 61_440}, unit)
    lines, problems = check(snap, estimate(unit, snap), {}, set())
    assert lines == [] and problems == [
        "in the way: bob's python3 (pid 5003) holds 60.0 GiB on GPU3",
        "GPU3: needs 47.8 GiB, 35.6 GiB will be free"]


def test_gpus_not_said_are_the_ones_with_the_most_room() -> None:
    # no CUDA_VISIBLE_DEVICES: the best case, so nothing that could fit is refused
    unit = vllm("--model m -tp 2")  # --gpu-memory-utilization: vLLM's default 0.9
    snap = snapshot({0: 61_440, 1: 0, 2: 0, 3: 61_440}, unit)
    lines, problems = check(snap, estimate(unit, snap), {}, set())
    assert problems == [] and lines[0].startswith("fits: 86.0 GiB on each of 2 GPU(s) "
                                                  "(GPU1, GPU2 have the room"), lines
    snap = snapshot({0: 61_440, 1: 0, 2: 61_440, 3: 61_440}, unit)
    lines, problems = check(snap, estimate(unit, snap), {}, set())
    assert problems[0] == "in the way: bob's python3 (pid 5000) holds 60.0 GiB on GPU0"
    assert problems[1].startswith("needs 86.0 GiB on each of 2 GPU(s)") and \
        problems[1].endswith("1 have that much free"), problems
    assert problems[2] == "GPU0: 35.6 GiB will be free"


def test_a_start_that_does_not_fit_is_refused_unless_forced() -> None:
    unit = vllm("--model m --tensor-parallel-size 1", "0")
    snap = snapshot({0: 61_440}, unit)
    with pytest.raises(PlanError) as refused:
        SPECS[ActionKind.START].plan(snap, Selection(owner=unit_ref(unit.name)))
    assert refused.value.lines == (
        "vllm-x.service does not fit (nothing done; --force starts it anyway):",
        "  in the way: bob's python3 (pid 5000) holds 60.0 GiB on GPU0",
        "  GPU0: needs 86.0 GiB, 35.6 GiB will be free")
    plan = SPECS[ActionKind.START].plan(snap, Selection(owner=unit_ref(unit.name), force=True))
    assert plan.fit[0].startswith("FORCED: started although it does not fit: in the way")
    assert "Fit: FORCED" in "\n".join(plan.describe())
    # a learned footprint wins over the arguments
    plan = SPECS[ActionKind.START].plan(snap, Selection(owner=unit_ref(unit.name),
                                                        footprint={0: 30_000}))
    assert plan.fit == ("fits: up to 29.3 GiB per GPU on 1 GPU(s), learned when it last "
                        "served here",)


def test_a_server_whose_arguments_say_nothing_is_not_checked_and_says_so() -> None:
    unit = replace(vllm(""), exec_start="/usr/bin/llama-server -m x.gguf")
    plan = SPECS[ActionKind.START].plan(snapshot({0: 90_000}, unit),
                                        Selection(owner=unit_ref(unit.name)))
    assert plan.fit[0].startswith("not checked: no learned footprint")


def test_only_cuda_visible_devices_of_a_units_environment_travels() -> None:
    show = ("Id=vllm-x.service\nEnvironment=HF_TOKEN=hf_secret CUDA_VISIBLE_DEVICES=4,5 "
            "VLLM_X=1\n")
    [u] = parse_systemctl_show(show)
    assert u["cuda_visible_devices"] == "4,5" and "hf_secret" not in repr(u)
    [u] = parse_systemctl_show("Id=a.service\nEnvironment=CUDA_VISIBLE_DEVICES=GPU-1a\n")
    assert "cuda_visible_devices" not in u  # UUIDs: not indices, not guessed
    assert Unit("a.service", cuda_visible_devices="9,x").visible_gpus is None


def test_a_shortfall_gib_rounds_away_is_said_in_mib() -> None:
    # issue 33, item 5: "GPU7: needs 94.6 GiB, 94.6 GiB will be free" hid a ~21 MiB gap
    unit = vllm("--model m --tensor-parallel-size 1", "0")
    snap = snapshot({0: 0}, unit)
    free = snap.gpus[0].memory_total_mib
    assert free is not None
    _lines, problems = check(snap, Need({0: free + 21}, "learned when it last served here"),
                             {}, set())
    assert gib(free + 21) == gib(free)  # the figure that hid it
    assert problems[-1] == (f"GPU0: needs {gib(free + 21)}, {gib(free)} will be free "
                            "(short by 21 MiB)")
