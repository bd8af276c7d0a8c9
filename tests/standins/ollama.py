"""Ollama as its source builds it (ollama/ollama, 2026-12):

- llm/server.go ``StartRunner`` (until 2026-05): ``exec.Command(exe, "runner",
  ["--ollama-engine",] "--model", <blob>, "--port", <free port>)`` where exe is ``ollama``
  itself; since then llm/llama_server.go ``startLlamaServer`` runs ``<lib>/ollama/
  llama-server --model <blob> --port N --host 127.0.0.1 ...``. Either way
  ``cmd.SysProcAttr`` is empty on Linux (llm/llm_linux.go): same process group as
  ``ollama serve``, no PDEATHSIG: SIGKILL of ``ollama serve`` leaves the runner (#5642,
  #7927).
- The runner logs ``llama runner started in N seconds`` once it serves.

Words: ``ollama serve`` (model blob in OLLAMA_FAKE_MODEL, MiB in FAKE_MIB).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from standins.base import forever, hold, say


def serve(words: list[str]) -> None:
    say("Listening on 127.0.0.1:11434 (version 0.12.0)")
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    blob = os.environ.get("OLLAMA_FAKE_MODEL", "/tmp/blobs/sha256-0")
    runner = ["ollama", "runner", "--ollama-engine", "--model", blob, "--port", str(port)]
    say(f"starting runner cmd=\"{' '.join(runner)}\"")
    subprocess.Popen(runner)
    forever()


def runner(words: list[str]) -> None:
    start = time.monotonic()
    hold(0, int(os.environ.get("FAKE_MIB", "1000")))
    port = int(words[words.index("--port") + 1])
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen()
    say(f"llama runner started in {time.monotonic() - start:.2f} seconds")
    forever()


def main(program: str) -> None:
    words = sys.argv[2:]
    {"serve": serve, "runner": runner}[sys.argv[1]](words)
