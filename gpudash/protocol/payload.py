"""What gpudash sends to a host to run the collector there, with nothing installed.

The command line carries only a tiny, fixed bootstrap; the collector's package (every
module's source, as a JSON list of ``[name, source]``, each module after those it
imports) and the pure-Python ``pynvml`` module follow on stdin, zlib-compressed, after a
header line with their lengths: one round trip. The bootstrap makes each module in
``sys.modules`` under the package ``gpudash_hostside`` (the package's ``__path__`` is
empty: nothing of it is ever looked for on the host's disk), runs them in that order, and
calls ``loop.main``. stdin then stays open for requests; closing it ends the collector.

The interpreter runs isolated (``-I``): not the login's working directory (a ``queue.py``
there would be imported), not ``PYTHON*`` variables, not user site-packages; under
``sudo -n`` that would be root importing code from the login's ``$HOME``.
"""

from __future__ import annotations

import functools
import graphlib
import importlib.util
import json
import re
import zlib
from pathlib import Path

HOST = Path(__file__).resolve().parent.parent / "collector" / "host"
PACKAGE = "gpudash_hostside"  # the package's name on the host (collector processes show it)
# how the package's modules import each other (tests/test_hostside_portable.py holds every
# import of theirs to this form, and the order it gives to what their syntax trees say)
RELATIVE_IMPORT = re.compile(r"^ *from \.(\w+) import ", re.M)
LEVEL = 6  # 9 takes 2.5x as long (about 40 ms for both parts) for 1-2% less

BOOTSTRAP = (
    "import sys,zlib,json,types\n"
    "r=sys.stdin.buffer\n"
    "h=[int(x) for x in r.readline().split()]\n"
    "a=json.loads(zlib.decompress(r.read(h[0])).decode())\n"
    "b=zlib.decompress(r.read(h[1])).decode() if h[1] else None\n"
    "for n,s in a:\n"
    " m=sys.modules[n]=types.ModuleType(n)\n"
    f" m.__package__='{PACKAGE}'\n"
    f" if n=='{PACKAGE}':m.__path__=[]\n"
    " exec(compile(s,n+'.py','exec'),m.__dict__)\n"
    f"sys.exit(sys.modules['{PACKAGE}.loop'].main(sys.argv[1:],b))\n"
)


def _pynvml_path() -> Path | None:
    spec = importlib.util.find_spec("pynvml")
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def modules() -> list[tuple[str, str]]:
    """(name on the host, source) of the package and each of its modules, every module
    after the modules it imports (``from .name import ...``), the package first."""
    sources = {path.stem: path.read_text() for path in sorted(HOST.glob("*.py"))}
    graph = {stem: sorted(set(RELATIVE_IMPORT.findall(source)))
             for stem, source in sources.items() if stem != "__init__"}
    order = ["__init__", *graphlib.TopologicalSorter(graph).static_order()]
    return [(PACKAGE if stem == "__init__" else f"{PACKAGE}.{stem}", sources[stem])
            for stem in order]


@functools.cache
def payload(*, with_pynvml: bool) -> bytes:
    """The bytes to write to the bootstrap's stdin (built once per process: the first
    call compresses ~0.4 MB; call it off the event loop, e.g. ``asyncio.to_thread``, to
    keep that from the first connect)."""
    package = json.dumps(modules(), ensure_ascii=False, separators=(",", ":"))
    collector = zlib.compress(package.encode(), LEVEL)
    nvml_path = _pynvml_path() if with_pynvml else None
    nvml = zlib.compress(nvml_path.read_bytes(), LEVEL) if nvml_path is not None else b""
    return f"{len(collector)} {len(nvml)}\n".encode() + collector + nvml


def collector_args(mode: str, *, interval: float | None, sudo: bool) -> list[str]:
    """The arguments of ``loop.main`` for ``mode`` (``stream`` or ``serve``)."""
    args = [mode]
    if interval is not None:
        args.append(f"{interval:g}")
    if sudo:
        args.append("--sudo")
    return args


def collector_argv(python: str, mode: str, *, interval: float | None, sudo: bool) -> list[str]:
    """argv that runs the collector in ``mode`` (``stream`` or ``serve``), isolated."""
    return [python, "-I", "-u", "-c", BOOTSTRAP,
            *collector_args(mode, interval=interval, sudo=sudo)]
