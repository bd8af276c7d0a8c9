"""The stand-in driver's leak and GPU reset (issue 34): memory used on a GPU with no
process, that NVML lists no holder of and no device file holds; ``nvidia-smi
--gpu-reset -i N`` gives it back, and is refused, as the real tool refuses it, while a
process holds the GPU. Real processes, the real pynvml binding, the stand-in nvidia-smi."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from fakegpu.fixtures import fakegpu_build, fakegpu_state  # noqa: F401  (fixtures)

READ = textwrap.dedent("""
    import json, pynvml as n
    n.nvmlInit()
    out = []
    for i in range(n.nvmlDeviceGetCount()):
        h = n.nvmlDeviceGetHandleByIndex(i)
        out.append([n.nvmlDeviceGetMemoryInfo(h).used >> 20,
                    len(n.nvmlDeviceGetComputeRunningProcesses(h)),
                    n.nvmlDeviceGetMigMode(h)[0], n.nvmlDeviceGetDisplayActive(h),
                    n.nvmlDeviceGetPersistenceMode(h)])
    print(json.dumps(out))
""")


def read(state) -> list[list[int]]:  # type: ignore[no-untyped-def]
    import json

    done = subprocess.run([sys.executable, "-c", READ], env=state.env, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_leak_is_used_memory_no_process_holds_and_a_reset_gives_it_back(
        fakegpu_state) -> None:  # type: ignore[no-untyped-def]
    fakegpu_state.init(gpus=2, baseline_mib=300)
    fakegpu_state.cli("set", "--gpu", "1", "leak_mib=6000")
    assert read(fakegpu_state) == [[300, 0, 0, 0, 1], [6300, 0, 0, 0, 1]]
    r = fakegpu_state.run("nvidia-smi", "--gpu-reset", "-i", "1")
    assert r.returncode == 0, r.stdout
    assert r.stdout == "GPU 00000000:2A:00.0 was successfully reset.\n"
    assert [g[0] for g in read(fakegpu_state)] == [300, 300]  # back to its baseline


def test_a_reset_is_refused_in_the_real_tools_words_while_a_process_holds_the_gpu(
        fakegpu_state) -> None:  # type: ignore[no-untyped-def]
    fakegpu_state.init(gpus=2)
    fakegpu_state.cli("set", "--gpu", "0", "leak_mib=4000")
    fakegpu_state.hold(0, 1000, name="python3")
    r = fakegpu_state.run("nvidia-smi", "-r", "-i", "0")
    assert r.returncode == 255
    assert r.stdout.startswith("GPU 00000000:18:00.0 is currently in use by another process.\n\n"
                               "1 device is currently being used by one or more other "
                               "processes (e.g., Fabric Manager"), r.stdout
    assert read(fakegpu_state)[0][0] == 5000  # nothing was given back


def test_a_forked_child_holding_the_device_files_refuses_the_reset_too(
        fakegpu_state) -> None:  # type: ignore[no-untyped-def]
    fakegpu_state.init(gpus=1, teardown_ms=0)
    p = fakegpu_state.hold(0, 2000, name="python3", fork_child="compile_worker")
    fakegpu_state.kill(p)  # the child keeps the memory: detached, not listed by NVML
    assert read(fakegpu_state)[0][:2] == [2000, 0]
    r = fakegpu_state.run("nvidia-smi", "--gpu-reset", "-i", "0")
    assert r.returncode == 255 and "in use by another process" in r.stdout


def test_mig_display_and_persistence_modes_are_what_the_state_says(
        fakegpu_state) -> None:  # type: ignore[no-untyped-def]
    fakegpu_state.init(gpus=3)
    fakegpu_state.cli("set", "--gpu", "0", "mig=1")
    fakegpu_state.cli("set", "--gpu", "1", "display=1")
    fakegpu_state.cli("set", "--gpu", "2", "persistence_off=1")
    assert [g[2:] for g in read(fakegpu_state)] == [[1, 0, 1], [0, 1, 1], [0, 0, 0]]
    q = fakegpu_state.run("nvidia-smi", "--query-gpu=mig.mode.current,persistence_mode",
                          "--format=csv,noheader")
    assert q.stdout.splitlines() == ["Enabled, Enabled", "Disabled, Enabled",
                                     "Disabled, Disabled"]
