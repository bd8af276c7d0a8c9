"""The demo host: a simulated 8-GPU box that replays the incident, faithfully.

``vllm-minimax-m25`` (Restart=always, KillMode=process, enabled) runs a main process
and 8 tensor-parallel workers holding ~96.8 GiB on each GPU. ``kill -9`` of the main
makes systemd respawn it (a second set of workers appears, squeezed into what is left)
and orphans the old workers; ``systemctl stop`` kills only the main and leaves the
workers under PID 1; memory comes back a short delay after its holder dies; one worker
ignores SIGTERM; alice's notebook kernel holds 2 GiB on GPU 0 and must never be touched.

With ``containers`` (the dashboard's ``--demo``) a small embedding model runs as a Docker
container started with ``--restart always`` (1000 MiB on GPU 7): ``kill -9`` of its main
process makes Docker restart it (RestartCount + 1, a new pid), the trap one layer up;
``docker stop`` marks it stopped, ``docker update --restart=no`` turns the policy off.
A reranker unit (``vllm-rerank``, stopped) fits in its place: the container -> unit swap.

It runs on simulated time: ``speed`` simulated seconds pass per real second, so tests
play minutes of incident in a fraction of a second. The world itself (processes, systemd,
dockerd) is ``gpudash.demo.sim``; ``DemoHost`` is its ``HostSource`` and ``HostControl``.
Its samples travel as a real host's do: the simulation writes the collector's JSON
(``HostSimulation.wire``), a stream sends it whole and then as merge patches, and the
wire's ``SnapshotDecoder`` reads it, so the decoder's account of what changed reaches
triage as it does from SSH and local hosts.
"""


from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from urllib.parse import urlsplit

from gpudash.demo.dockerd import EMBED_ID, EMBED_MIB, EMBED_NAME
from gpudash.demo.driver import DemoDriver
from gpudash.demo.incident import (
    DEEPSEEK,
    GPU_TOTAL_MIB,
    KIMI,
    MINIMAX,
    MODEL_MIB,
    NOTEBOOK_MIB,
    RERANK,
)
from gpudash.demo.records import HZ, Json, SimContainer, SimProcess, SimUnit, docker_argv
from gpudash.demo.sim import HostSimulation
from gpudash.demo.unitfiles import reload, unit_file
from gpudash.domain.clock import Clock
from gpudash.domain.dropin import drop_in_path
from gpudash.domain.model import HostSnapshot, unit_name
from gpudash.protocol.shell_listener import shell_listener_refusal
from gpudash.protocol.source import (
    LOOPBACK_HOSTS,
    Capability,
    CommandResult,
    HostControl,
    HttpAnswer,
    ListenerOwner,
    LogLine,
    ModelUnit,
    SignalOutcome,
    SourceError,
)
from gpudash.protocol.wire import K_FULL, SnapshotDecoder, SnapshotStream, message_line

__all__ = [
    "DEEPSEEK", "EMBED_ID", "EMBED_MIB", "EMBED_NAME", "GPU_TOTAL_MIB", "HZ", "KIMI", "MINIMAX",
    "MODEL_MIB", "NOTEBOOK_MIB", "RERANK", "DemoHost", "SimContainer", "SimProcess",
    "SimUnit",
]
READ_ONLY_REASON = "read-only mode"
JOURNAL_POLL_S = 0.5  # simulated seconds between looks at a followed unit's log


class DemoHost(HostControl):
    """A simulated host. Implements both ``HostSource`` and ``HostControl``."""

    capabilities = frozenset(Capability)

    def __init__(
        self,
        name: str = "demo-gpu01",
        *,
        speed: float = 1.0,
        release_delay: float = 2.0,
        seed: int = 7,
        read_only: bool = False,
        containers: bool = False,
        clock: Clock | None = None,
    ) -> None:
        self.name = name
        self.read_only = read_only
        self.sim = HostSimulation(name, speed=speed, release_delay=release_delay, seed=seed,
                                  containers=containers, clock=clock)
        # the simulation's state, as tests and scenarios arrange it
        self.processes = self.sim.processes
        self.units = self.sim.units
        self.containers = self.sim.containers
        self.spawn = self.sim.spawn
        self.now = self.sim.now
        self.leave_orphans = self.sim.leave_orphans
        self.driver = DemoDriver()  # a leak no process holds, GPU modes, the reset

    @property
    def sim_clock(self) -> Clock:
        """The one clock of this host's world, its stream and its followers."""
        return self.sim.clock

    @property
    def release_delay(self) -> float:
        return self.sim.release_delay

    @property
    def boot_id(self) -> str:
        return self.sim.boot_id

    @boot_id.setter
    def boot_id(self, value: str) -> None:  # a test reboots the host
        self.sim.boot_id = value

    async def sleep(self, seconds: float) -> None:
        await self.sim.clock.sleep(seconds)

    def clock(self) -> float:
        return self.sim.now()  # simulated seconds: what sleep waits on

    # --- HostSource -------------------------------------------------------------------

    @property
    def control(self) -> HostControl:
        return self

    @property
    def route(self) -> str:
        return f"the source {self.name}"

    @property
    def round_trip_s(self) -> float | None:
        return None  # no link to measure

    async def stream(self, interval: float) -> AsyncIterator[HostSnapshot]:
        """What a real host's collector streams (its first snapshot whole, then the merge
        patch from each to the next), read by the decoder SSH and local hosts have."""
        written = SnapshotStream()
        decoder = SnapshotDecoder(self.name)
        while True:
            yield decoder.feed(self.line(written.message(self.wire())))
            await self.sim.clock.pace(interval)

    async def close(self) -> None:
        return None

    def wire(self) -> Json:
        """The host now, as its collector writes a snapshot: what every sample of this
        host is decoded from."""
        return self.driver.dress(self.sim.wire(READ_ONLY_REASON if self.read_only else None),
                                 self.sim)

    def line(self, message: Json) -> bytes:
        """One message as it goes down the wire: the collector's line (a test host may
        write what a hostile one would)."""
        return message_line(message)

    def snapshot(self) -> HostSnapshot:
        """A fresh snapshot, as a collector answers a sample request: written whole,
        decoded as any host's is."""
        return SnapshotDecoder(self.name).feed(self.line({"k": K_FULL, "s": self.wire()}))

    # --- HostControl ------------------------------------------------------------------

    async def sample(self) -> HostSnapshot:
        return self.snapshot()

    async def container(
        self, runtime: str, verb: str, container: str, stop_timeout: int = 10,
        policy: str | None = None,
    ) -> CommandResult:
        if self.read_only:
            argv = docker_argv(runtime, verb, container, stop_timeout, policy)
            return CommandResult(argv, 1, READ_ONLY_REASON)
        return self.sim.container(runtime, verb, container, stop_timeout, policy)

    async def systemctl(self, verb: str, unit: str) -> CommandResult:
        if self.read_only:
            return CommandResult(("systemctl", verb, unit), 1, READ_ONLY_REASON)
        return self.sim.systemctl(verb, unit)

    async def owner_command(self, kind: str, verb: str, key: str) -> CommandResult:
        """A Slurm job cancelled as slurmd would: its processes ended (``demo.slurm``)."""
        from gpudash.demo import slurm

        return slurm.command(self, kind, verb, key, READ_ONLY_REASON if self.read_only else None)

    async def node_state(self, verb: str, node: str, reason: str | None) -> CommandResult:
        """The demo's Slurm node drained or resumed (``demo.slurm``)."""
        from gpudash.demo import slurm

        return slurm.node_state(self, verb, node, reason,
                                READ_ONLY_REASON if self.read_only else None)

    async def gpu_reset(self, gpu: int) -> CommandResult:
        """The driver's reset (``demo.driver``): refused while anything holds the GPU."""
        return self.driver.reset(self.sim, gpu, READ_ONLY_REASON if self.read_only else None)

    async def unit_text(self, unit: str) -> str:
        u = self.sim.units.get(unit_name(unit))
        if u is None:
            raise SourceError(f"{self.name}: No files found for {unit}.")
        return unit_file(u)

    async def drop_in(self, unit: str, text: str | None) -> CommandResult:
        path = drop_in_path(unit_name(unit))
        argv = ("tee", "--", path) if text is not None else ("rm", "-f", "--", path)
        if self.read_only:
            return CommandResult(argv, 1, READ_ONLY_REASON)
        u = self.sim.units.get(unit_name(unit))
        if u is None:
            return CommandResult(argv, 1, f"{unit}: no such unit")
        u.drop_in = text
        return CommandResult(argv, 0, "")

    async def daemon_reload(self, unit: str) -> CommandResult:
        argv = ("systemctl", "daemon-reload")
        if self.read_only:
            return CommandResult(argv, 1, READ_ONLY_REASON)
        for u in self.sim.units.values():
            reload(u)
        return CommandResult(argv, 0, "")

    async def signal(
        self, pid: int, start_ticks: int | None, sig: int, *, boot_id: str | None = None
    ) -> SignalOutcome:
        if self.read_only:
            return SignalOutcome.DENIED
        if boot_id is not None and boot_id != self.sim.boot_id:
            return SignalOutcome.MISMATCH  # planned before a reboot: the pid is someone else
        return self.sim.signal(pid, start_ticks, sig)

    def watch_unit(self, unit: str | None) -> None:
        return None  # every unit is in every sample here

    async def model_units(self, patterns: Sequence[str] = ()) -> tuple[ModelUnit, ...]:
        """Every unit here that runs a model server, running or not."""
        return self.sim.model_units()

    async def probe_http(self, url: str, timeout_s: float,
                         owner: ListenerOwner | None = None) -> HttpAnswer:
        """A GET on the host's loopback: a server answers once its engine is built; a
        port someone else's process listens on (``sim.squatters``) is refused for
        ``owner`` by the shell fallback's own rule."""
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname not in LOOPBACK_HOSTS:
            raise ValueError(f"not a loopback http URL: {url!r}")
        squat = self.sim.squatters.get(parts.port or 80)
        if owner is not None and squat is not None:
            refused = shell_listener_refusal(parts.port or 80, owner, squat)
            if refused:
                return HttpAnswer(url, None, refused)
        if squat is not None or self.sim.answers(parts.port):
            return HttpAnswer(url, 200, None)
        return HttpAnswer(url, None, "connection refused")

    async def find_container(self, ref: str) -> tuple[str, str] | None:
        c = self.sim.dockerd.find(ref)
        return None if c is None or c.state == "removed" else ("docker", c.id)

    async def container_logs(self, runtime: str, container: str, *, lines: int = 200,
                             follow: bool = True) -> AsyncIterator[LogLine]:
        """``docker logs --follow --tail N --timestamps`` of a demo container."""
        shown, first = 0, True
        origin = f"{runtime}:{container[:12]}"
        while True:
            logged = self.sim.container_logged(container)
            if logged is None:
                if first:
                    yield LogLine(f"Error response from daemon: No such container: "
                                  f"{container}", None, origin, origin=origin)
                return
            fresh = logged[shown:]
            if first:
                fresh, first = fresh[-lines:] if lines else [], False
            for t, line in fresh:
                yield LogLine(line, t, origin, origin=origin)
            shown = len(logged)
            if not follow:
                return
            await self.sleep(JOURNAL_POLL_S)

    async def journal(
        self, unit: str, *, lines: int = 200, follow: bool = True, after: str | None = None
    ) -> AsyncIterator[LogLine]:
        """The unit's log: the last ``lines``, then (``follow``) each new one as it comes.
        The demo's lines carry no cursors, so there is nothing to resume ``after``."""
        if after is not None:
            raise ValueError(f"the demo's journal has no cursor {after!r}")
        shown = 0
        first = True
        while True:
            logged = self.sim.logged(unit)
            if logged is None:
                return
            fresh = logged[shown:]
            if first:
                fresh, first = fresh[-lines:], False
            for t, line, origin in fresh:
                yield LogLine(line, t, unit_name(unit), origin=origin)
            shown = len(logged)
            if not follow:
                return
            await self.sleep(JOURNAL_POLL_S)
