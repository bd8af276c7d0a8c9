"""A simulated fleet for ``gpudash --demo --demo-hosts N``: the fleet view with no SSH.

Each host is a ``DemoHost`` (the incident's 8-GPU box) brought, before its first sample,
to one moment of the incident, so the fleet table has something to say in every column:

- ``incident``: ``kill -9`` of the vLLM main process: systemd respawned it, the old TP
  workers are orphans holding ~96.8 GiB per GPU;
- ``healthy``: the model serves, nothing to reclaim;
- ``unreachable``: every connect fails (as an unreachable host's would);
- ``stopped``: ``systemctl stop`` + ``disable`` done, the workers left under PID 1;
- ``crash-loop``: the old model reclaimed, the next one (too big) restarting forever;
- ``slurm`` (the seventh): a Slurm node where an ended job's escaped SGLang schedulers hold
  the GPUs Slurm gave to the next job (``gpudash.demo.slurm``).

Scenarios repeat in that order (healthy twice as often) for more hosts.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Sequence

from gpudash.demo import slurm
from gpudash.demo.driver import LEAKS
from gpudash.demo.host import DEEPSEEK, MINIMAX, DemoHost
from gpudash.demo.incident import MAX_DEMO_HOSTS
from gpudash.domain.clock import Clock, WallClock
from gpudash.domain.model import HostSnapshot
from gpudash.protocol.source import (
    CommandResult,
    ConnectError,
    HostControl,
    HostSource,
    HttpAnswer,
    ListenerOwner,
    LogLine,
    ModelUnit,
    SignalOutcome,
)

SLURM_NODE = "demo-gpu07"  # the fleet's Slurm node, as `gpudash drain --demo` acts on it
SCENARIOS = ("incident", "healthy", "unreachable", "stopped", "crash-loop", "healthy",
             "slurm")


class ScenarioHost(DemoHost):
    """The demo host, played to ``scenario`` before it is first read."""

    def __init__(self, name: str, scenario: str, *, speed: float = 1.0,
                 read_only: bool = False, seed: int = 7, clock: Clock | None = None) -> None:
        super().__init__(name, speed=speed, read_only=False, seed=seed, clock=clock)
        self.scenario = scenario
        self._arranged = False
        self._keep_read_only = read_only

    async def _arrange(self) -> None:
        if self._arranged:
            return
        self._arranged = True
        unit = self.units[MINIMAX]
        main = self.processes.get(unit.main_pid or -1)
        if self.scenario == "incident" and main is not None:
            await self.signal(main.pid, main.start_ticks, signal.SIGKILL, boot_id=self.boot_id)
        elif self.scenario == "stopped":
            await self.systemctl("stop", MINIMAX)
            await self.systemctl("disable", MINIMAX)
        elif self.scenario == "crash-loop":
            await self.systemctl("stop", MINIMAX)
            await self.systemctl("disable", MINIMAX)
            for p in [p for p in self.processes.values() if p.unit == MINIMAX]:
                await self.signal(p.pid, p.start_ticks, signal.SIGKILL, boot_id=self.boot_id)
            await self.systemctl("start", DEEPSEEK)
        elif self.scenario == "slurm":
            await slurm.play(self)
        elif self.scenario == "leak":  # not in SCENARIOS (the fleet cycles them): asked by name
            # the model gone, and memory left that no process holds: on GPU 3 (nothing else
            # there: a reset gives it back), on GPU 0 (alice's kernel: a reset is refused)
            await self.systemctl("stop", MINIMAX)
            await self.systemctl("disable", MINIMAX)
            for p in [p for p in self.processes.values() if p.unit == MINIMAX]:
                await self.signal(p.pid, p.start_ticks, signal.SIGKILL, boot_id=self.boot_id)
            self.driver.leaks.update(LEAKS)
        self.read_only = self._keep_read_only

    async def stream(self, interval: float) -> AsyncIterator[HostSnapshot]:
        await self._arrange()
        async for snap in super().stream(interval):
            yield snap

    async def sample(self) -> HostSnapshot:
        await self._arrange()
        return await super().sample()


class UnreachableHost(HostControl):
    """A host no connect reaches: every read fails as a timed-out SSH connect does, after
    ``delay`` seconds of ``clock`` (real ones by default)."""

    def __init__(self, name: str, *, delay: float = 0.3, clock: Clock | None = None) -> None:
        self.name = name
        self.delay = delay
        self._clock: Clock = clock if clock is not None else WallClock()

    def _error(self) -> ConnectError:
        return ConnectError(f"{self.name}: no answer within 10 s (simulated: this demo "
                            "host is unreachable)")

    @property
    def control(self) -> HostControl:
        return self

    @property
    def route(self) -> str:
        return f"the source {self.name}"

    @property
    def round_trip_s(self) -> float | None:
        return None

    async def stream(self, interval: float) -> AsyncIterator[HostSnapshot]:
        await self._clock.sleep(self.delay)
        raise self._error()
        yield  # pragma: no cover - makes this an async generator

    async def close(self) -> None:
        return None

    async def sample(self) -> HostSnapshot:
        await self._clock.sleep(self.delay)
        raise self._error()

    async def systemctl(self, verb: str, unit: str) -> CommandResult:
        raise self._error()

    async def owner_command(self, kind: str, verb: str, key: str) -> CommandResult:
        raise self._error()

    async def gpu_reset(self, gpu: int) -> CommandResult:
        raise self._error()

    async def node_state(self, verb: str, node: str, reason: str | None) -> CommandResult:
        raise self._error()

    async def container(
        self, runtime: str, verb: str, container: str, stop_timeout: int = 10,
        policy: str | None = None,
    ) -> CommandResult:
        raise self._error()

    async def signal(self, pid: int, start_ticks: int | None, sig: int, *,
                     boot_id: str | None = None) -> SignalOutcome:
        raise self._error()

    async def unit_text(self, unit: str) -> str:
        raise self._error()

    async def drop_in(self, unit: str, text: str | None) -> CommandResult:
        raise self._error()

    async def daemon_reload(self, unit: str) -> CommandResult:
        raise self._error()

    async def sleep(self, seconds: float) -> None:
        await self._clock.sleep(seconds)

    def watch_unit(self, unit: str | None) -> None:
        return None

    def journal(self, unit: str, *, lines: int = 200, follow: bool = True,
                after: str | None = None) -> AsyncIterator[LogLine]:
        raise self._error()

    async def find_container(self, ref: str) -> tuple[str, str] | None:
        raise self._error()

    def container_logs(self, runtime: str, container: str, *, lines: int = 200,
                       follow: bool = True) -> AsyncIterator[LogLine]:
        raise self._error()

    async def model_units(self, patterns: Sequence[str] = ()) -> tuple[ModelUnit, ...]:
        raise self._error()

    async def probe_http(self, url: str, timeout_s: float,
                         owner: ListenerOwner | None = None) -> HttpAnswer:
        raise self._error()


def demo_fleet(count: int, *, speed: float = 1.0, read_only: bool = False,
               clock: Clock | None = None) -> list[HostSource]:
    """``count`` simulated hosts named demo-gpu01, demo-gpu02, …; on one ``clock`` where
    given (a test steps it), else each on its own at ``speed``."""
    if not 1 <= count <= MAX_DEMO_HOSTS:
        raise ValueError(f"demo hosts: 1 to {MAX_DEMO_HOSTS}, not {count}")
    width = max(2, len(str(count)))
    hosts: list[HostSource] = []
    for i in range(count):
        name = f"demo-gpu{i + 1:0{width}d}"
        scenario = SCENARIOS[i % len(SCENARIOS)]
        if scenario == "unreachable":
            hosts.append(UnreachableHost(name, clock=clock))
        else:
            hosts.append(ScenarioHost(name, scenario, speed=speed, read_only=read_only,
                                      seed=7 + i, clock=clock))
    return hosts
