"""What gpudash sends to a host to run the collector there, with nothing installed.

The command line carries only a tiny, fixed bootstrap; the collector's source (and the
pure-Python ``pynvml`` module) follow on stdin, zlib-compressed, after a header line with
their lengths. stdin then stays open for requests; closing it ends the collector.

The interpreter runs isolated (``-I``): not the login's working directory (a ``queue.py``
there would be imported), not ``PYTHON*`` variables, not user site-packages; under
``sudo -n`` that would be root importing code from the login's ``$HOME``.
"""

from __future__ import annotations

import functools
import importlib.util
import zlib
from pathlib import Path

HOSTSIDE = Path(__file__).resolve().parent.parent / "collector" / "hostside.py"
LEVEL = 6  # 9 takes 2.5x as long (about 40 ms for both files) for 1-2% less

BOOTSTRAP = (
    "import sys,zlib\n"
    "r=sys.stdin.buffer\n"
    "h=[int(x) for x in r.readline().split()]\n"
    "a=zlib.decompress(r.read(h[0])).decode()\n"
    "b=zlib.decompress(r.read(h[1])).decode() if h[1] else None\n"
    "g={'__name__':'gpudash_hostside'}\n"
    "exec(compile(a,'gpudash_hostside.py','exec'),g)\n"
    "sys.exit(g['main'](sys.argv[1:],b))\n"
)


def _pynvml_path() -> Path | None:
    spec = importlib.util.find_spec("pynvml")
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


@functools.cache
def payload(*, with_pynvml: bool) -> bytes:
    """The bytes to write to the bootstrap's stdin (built once per process: the first
    call compresses ~0.4 MB; call it off the event loop, e.g. ``asyncio.to_thread``, to
    keep that from the first connect)."""
    collector = zlib.compress(HOSTSIDE.read_bytes(), LEVEL)
    nvml_path = _pynvml_path() if with_pynvml else None
    nvml = zlib.compress(nvml_path.read_bytes(), LEVEL) if nvml_path is not None else b""
    return f"{len(collector)} {len(nvml)}\n".encode() + collector + nvml


def collector_argv(python: str, mode: str, *, interval: float | None, sudo: bool) -> list[str]:
    """argv that runs the collector in ``mode`` (``stream`` or ``serve``), isolated."""
    argv = [python, "-I", "-u", "-c", BOOTSTRAP, mode]
    if interval is not None:
        argv.append(f"{interval:g}")
    if sudo:
        argv.append("--sudo")
    return argv
