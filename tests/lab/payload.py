"""Programs that run *inside* a lab container (Debian's /usr/bin/python3, stdlib only).

Copied to /opt/gpulab/py/gpulab_payload.py in the container root; small stub modules
(``vllm.entrypoints.openai.api_server``, ``sglang.launch_server``, ``embed_server``,
``ipykernel_launcher``) call into it so that ``/proc/PID/cmdline`` of each main process
looks like the real thing (``python3 -m vllm.entrypoints.openai.api_server --model ...``).

GPU memory is held by real processes through the stand-in driver: a worker execs
``/opt/gpulab/bin/<NAME>`` (a symlink to ``fakegpu``, so both argv[0] and comm carry the
worker's name) with ``hold --gpu K --mib M``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

BIN = "/opt/gpulab/bin"


def _env_list(name: str, default: str) -> list[str]:
    return [x for x in os.environ.get(name, default).split(",") if x]


def _exec_holder(name: str, gpu: str, mib: str) -> None:
    path = os.path.join(BIN, name)
    if not os.path.exists(path):
        os.symlink("/usr/local/bin/fakegpu", path)
    os.execv(path, [name, "hold", "--gpu", str(gpu), "--mib", str(mib)])


def _spawn_holder(
    name: str, gpu: str, mib: str, *, escape: bool = False, ignore_term: bool = False
) -> int:
    """Fork a holder process; with escape=True it setsid()s and is reparented to PID 1."""
    pid = os.fork()
    if pid:
        if escape:
            os.waitpid(pid, 0)  # the intermediate child exits at once
        return pid
    try:
        if escape:
            if os.fork():
                os._exit(0)
            os.setsid()  # the scheduler leads its own session, parent is PID 1
        if ignore_term:
            # like `trap '' TERM` in a bash wrapper before exec: SIG_IGN survives exec
            os.execv(
                "/bin/bash",
                [
                    "bash",
                    "-c",
                    f"trap '' TERM; exec -a {name} {BIN}/{name} hold --gpu {gpu} --mib {mib}",
                ],
            )
        _exec_holder(name, gpu, mib)
    finally:
        os._exit(127)


def _wait_forever() -> None:
    """Reap children as they die, never exit on our own (like a server's main loop)."""
    while True:
        try:
            os.wait()
        except ChildProcessError:
            signal.pause()
        except InterruptedError:
            pass


def _say(line: str) -> None:
    """One log line on stdout (so in the unit's journal), at once."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _free_mib() -> dict:
    """GPU index -> (free, total) MiB, as the stand-in driver's nvidia-smi reports it."""
    import subprocess

    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,memory.used,memory.total",
         "--format=csv,noheader,nounits"], capture_output=True, text=True, check=True,
    ).stdout
    free = {}
    for line in out.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 3:
            free[parts[0]] = (int(parts[2]) - int(parts[1]), int(parts[2]))
    return free


def _loading_worker(tp: int, gpu: str, mib: int, steps: int, step_s: float) -> int:
    """A TP worker that takes its GPU memory step by step (weights loading), then keeps it."""
    import time

    pid = os.fork()
    if pid:
        return pid
    try:
        name = f"VLLM::Worker_TP{tp}".encode()[:15]
        libc = ctypes.CDLL(None)
        libc.prctl(15, ctypes.c_char_p(name), 0, 0, 0)  # PR_SET_NAME: comm, like setproctitle
        hold = ctypes.CDLL("libnvidia-ml.so.1").fakegpu_hold
        hold.argtypes = [ctypes.c_uint, ctypes.c_ulonglong]
        done = 0
        for i in range(steps):
            take = mib * (i + 1) // steps - done
            if hold(int(gpu), take) != 0:
                os._exit(3)
            done += take
            time.sleep(step_s)
        while True:
            signal.pause()
    finally:
        os._exit(0)


def _serve_health(port: int) -> float:
    """Answer GET /health (and /v1/models) with 200 on 127.0.0.1:``port`` from a thread;
    the time it started answering (bench: ready -> detected)."""
    import http.server
    import threading
    import time

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200 if self.path in ("/health", "/v1/models") else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), Health)
    listening = time.time()
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return listening


def model_main() -> None:
    """A vLLM lookalike that really loads: checks free memory as vLLM does (and exits 1
    with vLLM's line when a GPU lacks room), grows its workers' memory step by step while
    logging checkpoint-shard progress, and answers GET /health on its --port only once
    loaded (before that the port is closed, like vLLM's)."""
    import threading
    import time

    gpus = _env_list("GPULAB_GPUS", "0")
    mib = int(os.environ.get("GPULAB_MIB", "1024"))
    steps = int(os.environ.get("GPULAB_STEPS", "8"))
    step_s = float(os.environ.get("GPULAB_STEP_S", "0.5"))
    argv = sys.argv[1:]
    port = int(argv[argv.index("--port") + 1]) if "--port" in argv else 8000
    model = argv[argv.index("--model") + 1] if "--model" in argv else "model"
    _say("INFO 12-01 07:00:00 [api_server.py:1805] vLLM API server version 0.11.0")
    _say(f"INFO 12-01 07:00:00 [api_server.py:1806] args: model={model!r} port={port} "
         f"tp={len(gpus)}")
    free = _free_mib()
    want = mib  # the stand-in asks exactly its footprint
    for gpu in gpus:
        have, total = free.get(gpu, (0, 0))
        if have < want:
            _say(f"(EngineCore_DP0 pid={os.getpid()}) ERROR 12-01 07:00:01 [core.py:708] "
                 f"ValueError: Free memory on device cuda:{gpu} ({have / 1024:.2f}/"
                 f"{total / 1024:.2f} GiB) on startup is less than desired GPU memory "
                 f"utilization (0.90, {want / 1024:.2f} GiB). Decrease GPU memory "
                 "utilization or reduce GPU memory used by other processes.")
            _say("RuntimeError: Engine core initialization failed. See root cause above. "
                 "Failed core proc(s): {}")
            sys.exit(1)
    for tp, gpu in enumerate(gpus):
        _loading_worker(tp, gpu, mib, steps, step_s)
    total_shards = 64
    t0 = time.monotonic()
    for i in range(steps + 1):
        done = total_shards * i // steps
        took = int(time.monotonic() - t0)
        _say(f"Loading safetensors checkpoint shards: {100 * done // total_shards:3d}% "
             f"Completed | {done}/{total_shards} [00:{took:02d}<00:00]")
        if i < steps:
            time.sleep(step_s)
    _say(f"INFO 12-01 07:00:09 [gpu_model_runner.py:2653] Model loading took "
         f"{mib / 1024:.4f} GiB and {time.monotonic() - t0:.6f} seconds")

    time.sleep(float(os.environ.get("GPULAB_READY_DELAY_S", "0")))  # graph capture, warmup
    listening = _serve_health(port)
    _say(f"INFO:     Started server process [{os.getpid()}]")
    _say(f"INFO:     Uvicorn running on http://127.0.0.1:{port} (listening at {listening:.6f})")
    _say("INFO:     Application startup complete.")
    chatter = float(os.environ.get("GPULAB_CHATTER_S", "0"))
    if chatter > 0:  # vLLM's periodic metrics lines, as often as asked (bench: journal cost)
        threading.Thread(target=_chatter, args=(chatter,), daemon=True).start()
    _wait_forever()


def _chatter(every_s: float) -> None:
    import time

    n = 0
    while True:
        time.sleep(every_s)
        n += 1
        _say(f"INFO 12-01 07:01:{n % 60:02d} [loggers.py:123] Engine 000: Avg prompt "
             f"throughput: {n % 97}.0 tokens/s, Avg generation throughput: {n % 89}.0 "
             "tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.1%")


def vllm_main() -> None:
    if os.environ.get("GPULAB_PROGRAM") == "model":
        model_main()
        return
    gpus = _env_list("GPULAB_GPUS", "0,1,2,3,4,5,6,7")
    mib = os.environ.get("GPULAB_MIB", "96801")
    for tp, gpu in enumerate(gpus):
        _spawn_holder(f"VLLM::Worker_TP{tp}", gpu, mib)
    argv = sys.argv[1:]  # a running vLLM answers /health: a swap's rollback proves it by that
    try:
        _serve_health(int(argv[argv.index("--port") + 1]) if "--port" in argv else 8000)
    except OSError:
        pass  # lab hosts share the network: another host's stand-in has the port
    _wait_forever()


def sglang_main() -> None:
    gpus = _env_list("GPULAB_GPUS", "6,7")
    mib = os.environ.get("GPULAB_MIB", "512")
    for tp, gpu in enumerate(gpus):
        # schedulers start their own session and leave the main's process tree,
        # but stay in the unit's cgroup
        _spawn_holder(f"sglang::scheduler_DP0_TP{tp}_EP{tp}", gpu, mib, escape=True)
    _wait_forever()


def embed_main() -> None:
    gpu = os.environ.get("GPULAB_GPUS", "5").split(",")[0]
    mib = os.environ.get("GPULAB_MIB", "512")
    _spawn_holder("embed-worker", gpu, mib, ignore_term=True)
    _wait_forever()


def kernel_main() -> None:
    """A Jupyter-kernel lookalike that holds GPU memory in its own process."""
    gpu = int(os.environ.get("GPULAB_GPUS", "0").split(",")[0])
    mib = int(os.environ.get("GPULAB_MIB", "1024"))
    held = False
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        fn = lib.fakegpu_hold
        fn.argtypes = [ctypes.c_uint, ctypes.c_ulonglong]
        held = fn(gpu, mib) == 0
    except (OSError, AttributeError):
        held = False
    if not held:  # fall back to a child holder named like the kernel
        _spawn_holder("ipykernel-cuda", str(gpu), str(mib))
    _wait_forever()


MAINS = {
    "model": model_main, "vllm": vllm_main, "sglang": sglang_main, "embed": embed_main,
    "kernel": kernel_main,
}

if __name__ == "__main__":
    MAINS[sys.argv[1]]()
