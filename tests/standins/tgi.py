"""Text Generation Inference as its launcher builds it (huggingface/text-generation-
inference, launcher/src/main.rs, 2026-12):

- ``download_convert_model``: ``Command::new("text-generation-server")`` with
  ``download-weights <model> --extension .safetensors --logger-level INFO --json-output``,
  ``.process_group(0)``; waited for (``Successfully downloaded weights for <model>``).
- ``shard_manager``: per rank ``Command::new("text-generation-server")`` with ``serve
  <model> --uds-path <path> --logger-level INFO --json-output`` (+ ``--sharded`` when
  world_size > 1), ``.process_group(0)``: every shard leads its own process group, no
  PDEATHSIG; the rank comes in the environment (``RANK``), the socket is
  ``<path>-<rank>``. The launcher logs ``Starting shard``, ``Waiting for shard to be
  ready...``, ``Shard ready in …`` once the socket exists, then ``Starting Webserver``.

Words: ``text-generation-launcher --model-id M --num-shard N --mib MIB --uds-path P``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from standins.base import forever, hold, say


def launcher(words: list[str]) -> None:
    model = words[words.index("--model-id") + 1]
    shards = int(words[words.index("--num-shard") + 1])
    mib = words[words.index("--mib") + 1]
    uds = words[words.index("--uds-path") + 1]
    say(f"Starting check and download process for {model}")
    subprocess.run(["text-generation-server", "download-weights", model, "--extension",
                    ".safetensors", "--logger-level", "INFO", "--json-output"],
                   process_group=0, check=True)
    say(f"Successfully downloaded weights for {model}")
    for rank in range(shards):
        say("Starting shard")
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(shards),
               "FAKE_MIB": mib}
        argv = ["text-generation-server", "serve", model, "--uds-path", uds,
                "--logger-level", "INFO", "--json-output"] + (
                    ["--sharded"] if shards > 1 else [])
        subprocess.Popen(argv, env=env, process_group=0)
    start = time.monotonic()
    for rank in range(shards):
        while not os.path.exists(f"{uds}-{rank}"):
            time.sleep(0.05)
        say(f"Shard ready in {time.monotonic() - start:.1f}s")
    say("Starting Webserver")
    forever()


def server(words: list[str]) -> None:
    if words and words[0] == "download-weights":
        return  # nothing to fetch: the weights are "there"
    rank = int(os.environ.get("RANK", "0"))
    hold(rank, int(os.environ.get("FAKE_MIB", "1000")))
    uds = words[words.index("--uds-path") + 1]
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(f"{uds}-{rank}")  # the launcher's readiness check
    sock.listen()
    say("Server started at unix://" + f"{uds}-{rank}")
    forever()


def main(program: str) -> None:
    words = sys.argv[1:]
    if program == "text-generation-launcher":
        launcher(words)
    else:
        server(words)
