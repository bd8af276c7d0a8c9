"""llama.cpp's ``llama-server`` under a wrapper that starts it in its own process group
(a launcher script, llama-swap before it moved its models into their own groups), as
their sources build it (2026-12):

- The wrapper runs ``llama-server -m M --port P`` as a child in the wrapper's process
  group, no PDEATHSIG: SIGKILL of the wrapper leaves it serving and holding the GPU
  (llama-swap #138). Current llama-swap signals the child's own group
  (proxy/process_stop.go ``syscall.Kill(-pgid, SIGTERM)``): its llama-server leads its
  group, which this stand-in does not model (gpudash cannot tell it from a nohup'd one).
- llama.cpp tools/server/server.cpp: one process, API and GPU; logs
  ``main: server is listening on http://127.0.0.1:PORT - starting the main loop``.

Words: ``llama-swap --port P`` (runs ``llama-server -m M --port P``; MiB in FAKE_MIB).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from standins.base import forever, hold, say


def swap(words: list[str]) -> None:
    port = words[words.index("--port") + 1]
    subprocess.Popen(["llama-server", "-m", "/models/q4.gguf", "--port", port])
    forever()


def server(words: list[str]) -> None:
    hold(0, int(os.environ.get("FAKE_MIB", "1000")))
    port = int(words[words.index("--port") + 1])
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen()
    say(f"main: server is listening on http://127.0.0.1:{port} - starting the main loop")
    forever()


def main(program: str) -> None:
    (swap if program == "llama-swap" else server)(sys.argv[1:])
