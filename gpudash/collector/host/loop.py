"""The collector's main loop: ``stream`` writes a snapshot then merge patches every interval,
``serve`` answers requests (samples, signals, probes) on stdin; JSON lines on stdout."""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from .collector import HostCollector
from .hoststats import HostStats
from .protocol import (
    CONTAINER_ID,
    K_ERROR,
    K_FULL,
    K_HTTP,
    K_PONG,
    K_READY,
    K_SIGNAL,
    MAX_CONTAINERS,
    OP_HTTP,
    OP_PING,
    OP_REFRESH,
    OP_SAMPLE,
    OP_SIGNAL,
    OP_WATCH,
    PROTOCOL,
    SnapshotStream,
    message_line,
)
from .ready import container_get, http_get, unit_get
from .signals import send_signal

if TYPE_CHECKING:
    from .protocol import Json


MAX_PROBES = 4  # GETs in flight at once; more are answered "busy" at once


class Emitter:
    """Writes messages as JSON lines to one binary stream (stdout, or the pipe of a
    collector gpudash runs in a thread of its own process). A probe's answer is written
    from its own thread, so each line is written whole under a lock."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.lock = threading.Lock()

    def __call__(self, message: Json) -> None:
        data = message_line(message)
        with self.lock:
            self.out.write(data)
            self.out.flush()


_probes = threading.BoundedSemaphore(MAX_PROBES)


def probe_later(emit: Emitter, url: str, timeout_s: float, request_id: Any,
                unit: str | None = None, collector: HostCollector | None = None,
                container: tuple[str, str] | None = None) -> Json | None:
    """Answer OP_HTTP from a thread of its own, by an absolute deadline: a server that
    sends one byte a second holds neither the answer past ``timeout_s`` nor the request
    loop (samples and signals go on meanwhile). None: answered later; else the reply.
    Given ``unit`` (or ``container``: its id and runtime), the answer counts only from
    its own process, seen at the other end of the probe's own connection before the
    request is finished: another process is refused without being asked."""
    if not _probes.acquire(blocking=False):
        return {"k": K_HTTP, "status": None, "error": "busy: too many probes in flight",
                "id": request_id}
    deadline = max(0.1, min(float(timeout_s), 30.0))
    got: list[tuple[int | None, str | None]] = []

    def get() -> None:
        if collector is not None and unit is not None:
            got.append(unit_get(url, deadline, unit, collector))
        elif collector is not None and container is not None:
            got.append(container_get(url, deadline, container[0], container[1], collector))
        else:
            got.append(http_get(url, deadline))

    def answer() -> None:
        try:
            worker = threading.Thread(target=get, daemon=True)
            worker.start()
            worker.join(deadline)  # the GET itself may go on: nobody waits for it
            status, error = got[0] if got else (None, f"no answer within {deadline:g} s")
            emit({"k": K_HTTP, "status": status, "error": error, "id": request_id})
        except (BrokenPipeError, OSError):
            pass  # gpudash went away
        finally:
            _probes.release()

    threading.Thread(target=answer, daemon=True).start()
    return None


def _stdin_lines(inp: Any, lines: queue.Queue[bytes | None]) -> None:
    try:
        for line in inp:
            lines.put(line)
    except (OSError, ValueError):
        pass  # the pipe went away: the same as its end
    finally:
        lines.put(None)
        try:
            inp.close()
        except (OSError, ValueError):
            pass


def _command(line: bytes, collector: HostCollector, emit: Emitter) -> Json | None:
    """Apply one request from gpudash; return the reply for requests that have one.
    A request it cannot read gets an error reply (with its id, where it has one)."""
    request: Any = None
    try:
        request = json.loads(line)
        op = request["op"]
        if op == OP_WATCH:
            if "container" in request:
                cid, runtime = str(request["container"]), str(request.get("runtime"))
                if CONTAINER_ID.fullmatch(cid) and runtime in ("docker", "podman"):
                    if len(collector.watched_containers) < MAX_CONTAINERS:
                        collector.watched_containers[cid] = runtime
                return None
            collector.watched.add(str(request["unit"]))
            return None
        if op == OP_REFRESH:
            return None
        if op == OP_PING:  # gpudash measures its request round trip
            return {"k": K_PONG, "id": request.get("id")}
        if op == OP_SAMPLE:
            return {"k": K_FULL, "s": collector.sample(force_units=True), "id": request.get("id")}
        if op == OP_HTTP:
            unit, owner = request.get("unit"), None
            if "container" in request:
                cid, runtime = str(request["container"]), str(request.get("runtime"))
                if not (CONTAINER_ID.fullmatch(cid) and runtime in ("docker", "podman")):
                    return {"k": K_HTTP, "status": None, "id": request.get("id"),
                            "error": "not a container to probe for"}
                owner = (cid, runtime)
            return probe_later(emit, str(request["url"]), float(request.get("timeout", 3)),
                               request.get("id"), None if unit is None else str(unit),
                               collector, owner)
        if op == OP_SIGNAL:
            pid, start, boot = int(request["pid"]), request.get("start"), request.get("boot")
            if start is not None:
                start = int(start)
            boot = None if boot is None else str(boot)
            outcome = send_signal(pid, start, int(request["sig"]), boot_id=boot)
            collector.proc.watch(pid)  # its state may change: re-read it a while
            if outcome == "sent" and start is not None:
                collector.signalled[pid] = start  # listed until it is gone
            return {"k": K_SIGNAL, "outcome": outcome, "id": request.get("id")}
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
        reply: Json = {"k": K_ERROR, "msg": "bad request"}
    else:
        reply = {"k": K_ERROR, "msg": "unknown op"}
    if isinstance(request, dict) and request.get("id") is not None:
        reply["id"] = request["id"]
    return reply


def main(argv: list[str], nvml_source: str | None = None, inp: Any = None, out: Any = None
         ) -> int:
    """``stream INTERVAL [--sudo]`` or ``serve [--sudo]``: requests read from ``inp``
    (stdin), JSON lines written to ``out`` (stdout); both binary streams."""
    mode = argv[0] if argv else "stream"
    sudo = "--sudo" in argv
    emit = Emitter(sys.stdout.buffer if out is None else out)
    # In a thread of gpudash (``inprocess``): its own CPU is its thread's, and /proc gives
    # the host's figures (psutil would be imported into the dashboard for nothing).
    in_thread = inp is not None
    stats = HostStats(None, own_thread=True) if in_thread else None
    collector = HostCollector(sudo=sudo, nvml_source=nvml_source, stats=stats)
    lines: queue.Queue[bytes | None] = queue.Queue()
    source = sys.stdin.buffer if inp is None else inp
    threading.Thread(target=_stdin_lines, args=(source, lines), daemon=True).start()
    try:
        if mode == "serve":
            emit({"k": K_READY, "v": PROTOCOL})
            while True:
                line = lines.get()
                if line is None:
                    return 0
                reply = _command(line, collector, emit)
                if reply is not None:
                    emit(reply)
        interval = max(0.05, float(argv[1]) if len(argv) > 1 else 1.0)
        written = SnapshotStream()
        force = False
        next_at = time.monotonic()
        while True:
            emit(written.message(collector.sample(force_units=force)))
            force = False
            next_at += interval
            while True:
                wait = next_at - time.monotonic()
                if wait <= 0:
                    next_at = max(next_at, time.monotonic() - interval)
                    break
                try:
                    line = lines.get(timeout=wait)
                except queue.Empty:
                    break
                if line is None:  # gpudash went away
                    return 0
                reply = _command(line, collector, emit)
                if reply is not None and reply.get("k") == K_PONG:
                    emit(reply)  # answered at once; a ping asks for no fresh sample
                    continue
                force = True
    except (BrokenPipeError, KeyboardInterrupt):
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
