"""Model servers on the demo host: one start of a vLLM-like server, as gpudash sees it.

A start checks the free memory first, as vLLM's worker does: without the room it logs
vLLM's own line and exits 1 (with Restart=always: a crash loop). With it, its workers'
memory climbs while the checkpoint shards load, the log shows tqdm-like progress, and the
HTTP server answers only once the engine is built. Everything is a function of the
simulated time since the start, so tests replay it exactly.
"""

from __future__ import annotations

from dataclasses import field

from gpudash.record import record

HEALTH_CHECK_DELAY_S = 1.5  # from start to the free-memory check


@record
class SimServer:
    """What a demo unit runs."""

    model: str
    port: int
    tp: int = 8
    gpu_memory_utilization: float = 0.9
    load_s: float = 20.0  # from start to weights loaded
    warmup_s: float = 2.5  # from loaded to the HTTP server answering
    shards: int = 64
    first_gpu: int = 0  # it runs on GPUs first_gpu .. first_gpu + tp - 1

    @property
    def gpus(self) -> range:
        return range(self.first_gpu, self.first_gpu + self.tp)

    def cmdline(self) -> str:
        return (f"python3 -m vllm.entrypoints.openai.api_server --model {self.model} "
                f"--tensor-parallel-size {self.tp} --port {self.port} "
                f"--gpu-memory-utilization {self.gpu_memory_utilization}")

    def need_mib(self, total_mib: int) -> int:
        return int(total_mib * self.gpu_memory_utilization)


@record(frozen=False)
class SimLoad:
    """One start of a server: when it began, and whether its memory check passed."""

    server: SimServer
    began: float  # simulated seconds since boot
    need_mib: int  # per GPU
    free_mib: int  # the least free memory on its GPUs at the check
    log: list[tuple[float, str]] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.free_mib >= self.need_mib

    @property
    def crash_at(self) -> float | None:
        return None if self.fits else self.began + HEALTH_CHECK_DELAY_S + 0.5

    @property
    def ready_at(self) -> float:
        return self.began + self.server.load_s + self.server.warmup_s

    def loaded_fraction(self, now: float) -> float:
        if not self.fits:
            return 0.0
        start = self.began + HEALTH_CHECK_DELAY_S
        return max(0.0, min(1.0, (now - start) / (self.server.load_s - HEALTH_CHECK_DELAY_S)))

    def script(self, total_mib: int) -> None:
        """Every line this start will log, with the time it logs it."""
        s, t0 = self.server, self.began
        gib = 1024
        self.log = [(t0 + 0.2, f"INFO [api_server.py:1024] vLLM API server version 0.11.0; "
                               f"model={s.model}, tensor_parallel_size={s.tp}")]
        if not self.fits:
            self.log += [
                (t0 + HEALTH_CHECK_DELAY_S,
                 f"ValueError: Free memory on device ({self.free_mib / gib:.2f}/"
                 f"{total_mib / gib:.2f} GiB) on startup is less than desired GPU memory "
                 f"utilization ({s.gpu_memory_utilization}, {self.need_mib / gib:.2f} GiB). "
                 "Decrease GPU memory utilization or reduce GPU memory used by other "
                 "processes."),
                (t0 + HEALTH_CHECK_DELAY_S + 0.3,
                 "RuntimeError: Engine core initialization failed. See root cause above. "
                 "Failed core proc(s): {'EngineCore_0': 1}"),
            ]
            return
        span = s.load_s - HEALTH_CHECK_DELAY_S
        for k in range(0, s.shards + 1, 8):
            at = t0 + HEALTH_CHECK_DELAY_S + span * k / s.shards
            pct = 100 * k // s.shards
            self.log.append((at, f"Loading safetensors checkpoint shards: {pct:3d}% Completed | "
                                 f"{k}/{s.shards}"))
        loaded = t0 + s.load_s
        # what the log says it took (the incident's server, as it has served for hours,
        # is simulated with no memory to load: its log says what it did take)
        took = self.need_mib or int(total_mib * s.gpu_memory_utilization)
        self.log += [
            (loaded, f"INFO [gpu_model_runner.py:2041] Model loading took "
                     f"{took * 0.82 / gib:.2f} GiB and {span:.2f} seconds"),
            (loaded + 0.5, f"INFO [gpu_worker.py:276] Available KV cache memory: "
                           f"{took * 0.18 / gib:.2f} GiB"),
            (loaded + 1.0, f"INFO [api_server.py:1880] Starting vLLM API server 0 on "
                           f"http://0.0.0.0:{s.port}"),
            (self.ready_at, "INFO:     Application startup complete."),
        ]

    def lines_until(self, now: float) -> list[tuple[float, str]]:
        return [(t, line) for t, line in self.log if t <= now]
