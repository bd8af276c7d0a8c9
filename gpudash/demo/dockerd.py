"""The demo host's dockerd: its containers, their restart policies, ``docker VERB`` and
``docker logs`` of the embedding server it runs.

``Dockerd`` keeps the containers and does what dockerd does with them; the processes are
the simulated kernel's (``Kernel``: ``gpudash.demo.sim.HostSimulation``). A container's
main process runs under the shim in the container's scope; when it dies, its PID
namespace ends with it (what escaped to PID 1 lives on) and the policy says what next.
"""

from __future__ import annotations

from typing import Protocol

from gpudash.demo.records import SimContainer, SimProcess, docker_argv
from gpudash.protocol.source import CommandResult

EMBED_MIB = 1000  # the container's model on GPU 7, beside MiniMax's worker there
EMBED_ID = "c0ffee5e" + "9d2b4a71" * 7
EMBED_NAME = "vllm-embed"
EMBED_PORT = 8100  # docker run -p 127.0.0.1:8100:8100
EMBED_IMAGE = "vllm/vllm-openai:v0.11.0"
EMBED_CMD = ("python3 -m vllm.entrypoints.openai.api_server --model BAAI/bge-m3 "
             "--task embed --gpu-memory-utilization 0.011 --port 8100")
SHIM_PID = 4711  # containerd-shim-runc-v2: the container's main's parent on the host
RESTARTS = ("always", "unless-stopped", "on-failure")  # the policies that restart a crash
# What the embedding server logs as it starts (seconds after its start, line).
STARTUP = (
    (0.0, "INFO: vLLM API server version 0.11.0"),
    (0.4, "INFO: non-default args: {'model': 'BAAI/bge-m3', 'task': 'embed', "
     "'gpu_memory_utilization': 0.01, 'port': 8001}"),
    (3.0, "INFO: Loading weights took 2.41 seconds"),
    (5.0, "INFO: Model loading took 1.0 GiB and 4.87 seconds"),
    (6.0, "INFO: Started server process [1]"),
    (6.1, "INFO: Uvicorn running on http://0.0.0.0:8001 (Press CTRL+C to quit)"),
)


class Kernel(Protocol):
    """What dockerd asks of the simulated host."""

    processes: dict[int, SimProcess]

    def now(self) -> float: ...

    def spawn(self, *, ppid: int, user: str, name: str, cmdline: str, unit: str | None,
              gpu_memory_mib: dict[int, int] | None = None, age: float = 0.0,
              cpu_pct: float = 0.0, rss_mib: int = 300) -> SimProcess: ...

    def die(self, p: SimProcess) -> None: ...

    def release_later(self, gpu: int, mib: int, now: float) -> None: ...


class Dockerd:
    """The containers of one simulated host (docker only: no podman here)."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.containers: dict[str, SimContainer] = {}

    def add(self, c: SimContainer, *, age: float = 0.0) -> None:
        """``docker run``: the container, running for ``age`` seconds already."""
        self.containers[c.id] = c
        self.run(c, age=age)

    def run(self, c: SimContainer, *, age: float = 0.0) -> None:
        """dockerd (re)starts the container: its main process under the shim."""
        k = self.kernel
        main = k.spawn(ppid=SHIM_PID, user="root", name="python3", cmdline=EMBED_CMD,
                       unit=c.scope, gpu_memory_mib={7: EMBED_MIB}, age=age, cpu_pct=1.5,
                       rss_mib=3 * 1024)
        c.main_pid, c.state = main.pid, "running"
        c.runs.append([k.now() - age, None])

    def advance(self, now: float) -> None:
        """The restarts that are due."""
        for c in self.containers.values():
            if c.restart_at is not None and now >= c.restart_at:
                c.restart_at = None
                c.restart_count += 1
                self.run(c)

    def died(self, pid: int, now: float) -> None:
        """Process ``pid`` is gone: if it was a container's init, the container's end."""
        for c in self.containers.values():
            if c.main_pid == pid:
                self._init_died(c, now)

    def _init_died(self, c: SimContainer, now: float) -> None:
        """The PID namespace ends with its init; dockerd restarts it as its policy says."""
        k = self.kernel
        c.main_pid = None
        if c.runs and c.runs[-1][1] is None:
            c.runs[-1][1] = now
        # (what escaped it to PID 1 is not in its PID namespace: it lives on)
        for q in [q for q in k.processes.values() if q.unit == c.scope and q.ppid != 1]:
            k.processes.pop(q.pid, None)
            for gpu, mib in q.gpu_memory_mib.items():
                k.release_later(gpu, mib, now)
        if not c.manually_stopped and c.restart_policy in RESTARTS:
            c.state, c.restart_at = "restarting", now + 0.1
        else:
            c.state = "exited"

    def _kill_main(self, c: SimContainer) -> None:
        main = self.kernel.processes.get(c.main_pid) if c.main_pid else None
        if main is not None:
            self.kernel.die(main)

    def command(
        self, runtime: str, verb: str, container: str, stop_timeout: int = 10,
        policy: str | None = None,
    ) -> CommandResult:
        """``docker VERB CONTAINER`` as dockerd does it."""
        argv = docker_argv(runtime, verb, container, stop_timeout, policy)
        c = self.containers.get(container)
        if c is None or c.state == "removed" or runtime != "docker":
            return CommandResult(argv, 1, f"Error response from daemon: No such container: "
                                 f"{container}")
        done = CommandResult(argv, 0, container + "\n")
        if verb == "stop":
            c.manually_stopped, c.restart_at = True, None
            self._kill_main(c)
            c.state = "exited"
            return done
        if verb == "no-restart":
            c.restart_policy = "no"
            return done
        if verb == "rm":
            if c.state != "exited":
                return CommandResult(argv, 1, "Error response from daemon: cannot remove a "
                                     "running container: stop the container before removing")
            c.state = "removed"
            return done
        if verb == "restart-policy" and policy:
            c.restart_policy = policy
            return done
        if verb in ("start", "restart"):
            if verb == "restart" and c.state == "running":
                c.manually_stopped = True  # docker restart's stop is not a crash
                self._kill_main(c)
            c.manually_stopped, c.restart_at = False, None
            if c.state != "running":
                self.run(c)
            return done
        return CommandResult(argv, 1, f"unsupported verb {verb}")

    def answers(self, port: int | None) -> bool:
        """Whether a running container publishes ``port``."""
        return any(c.port == port and c.state == "running" and c.restart_at is None
                   and c.main_pid is not None for c in self.containers.values())

    def find(self, ref: str) -> SimContainer | None:
        """The container ``ref`` names (its id or its name), removed ones too."""
        return self.containers.get(ref) or next(
            (c for c in self.containers.values() if c.name == ref), None)

    def logged(self, ref: str, now: float) -> list[tuple[float, str]] | None:
        """What ``docker logs --timestamps`` of the container shows by ``now`` (simulated
        seconds, line): each run's start-up, its requests, its shutdown; None: no such
        container."""
        c = self.find(ref)
        if c is None or c.state == "removed":
            return None
        lines: list[tuple[float, str]] = []
        for began, ended in c.runs:
            assert began is not None
            end = now if ended is None else min(ended, now)
            lines += [(began + dt, text) for dt, text in STARTUP if began + dt <= end]
            t = began + 15.0
            n = 0
            while t <= end:
                n += 1
                lines.append((t, f'INFO: 172.17.0.1:{40000 + n % 9000} - "POST /v1/embeddings '
                              'HTTP/1.1" 200 OK'))
                t += 9.0
            if ended is not None and ended <= now:
                lines.append((ended, "INFO: Shutting down"))
        lines.sort(key=lambda e: e[0])
        return lines
