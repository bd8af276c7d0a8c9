"""OpenSSL loaded when it is used, not because a module that might use it was imported.

Three imports load OpenSSL (libssl, libcrypto, and its initialisation) into a dashboard
that uses none of it: asyncio imports :mod:`ssl`, and its TLS protocol module, which reads
``ssl`` at import, for TLS transports it may never make; plotext imports :mod:`hashlib`
for a helper the plot never calls. Together about 4.5 MB of the local dashboard's resident
memory at rest (docs/BENCHMARKS.md). What does use them still gets them: a Prometheus read
over https (gpudash.fleetprom.client), the exporter's TLS, asyncio's socket checks (SSH's
connect).

:func:`defer` puts a placeholder for each in ``sys.modules``: a module with the real
one's ``__spec__`` whose first attribute read (PEP 562 ``__getattr__``) imports the real
module and takes on its namespace, so every use behaves as before. (The stdlib's
``LazyLoader`` does not serve: the next ``import ssl`` statement reads the module's
``__spec__`` and so loads it at once.) It must run before asyncio is imported: the CLI
calls it first thing; a module already imported is left as it is. Code that walks
``sys.modules`` reading attributes (``inspect.getmodule``) loads them as it goes, so it
must walk a copy, as the stdlib's does.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from importlib.machinery import ModuleSpec, PathFinder

DEFERRED = ("ssl", "asyncio.sslproto", "hashlib")
_lock = threading.RLock()


def _spec(name: str) -> ModuleSpec | None:
    """The spec of ``name``, found without importing its package (importing asyncio is
    what would import ssl)."""
    package, _, leaf = name.rpartition(".")
    if not package:
        return importlib.util.find_spec(name)
    parent = importlib.util.find_spec(package)
    if parent is None or not parent.submodule_search_locations:
        return None
    return PathFinder.find_spec(leaf, list(parent.submodule_search_locations))


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # ValueError: in sys.modules as None (blocked)
        return False


def _placeholder(name: str, spec: ModuleSpec) -> types.ModuleType:
    """A module named ``name`` that becomes the real one on its first attribute read."""
    stub = types.ModuleType(name)

    def load(attr: str) -> object:
        with _lock:  # one thread imports; the others find it done
            if sys.modules.get(name) is stub:
                del sys.modules[name]  # so that the import below finds and runs the file
                try:
                    real = importlib.import_module(name)
                except BaseException:
                    sys.modules[name] = stub
                    raise
            else:
                real = sys.modules.get(name) or importlib.import_module(name)
            stub.__dict__.update(real.__dict__)  # who holds the stub sees the module
        try:
            return stub.__dict__[attr]
        except KeyError:
            raise AttributeError(f"module {name!r} has no attribute {attr!r}") from None

    stub.__getattr__ = load  # type: ignore[method-assign]
    stub.__spec__ = spec
    stub.__loader__ = spec.loader
    return stub


def defer() -> list[str]:
    """Make the modules that load OpenSSL load on first use; the names deferred. One
    already imported, or whose package is, is left alone."""
    done = []
    tls = _importable("_ssl")  # a Python built without OpenSSL: its asyncio must see
    for name in DEFERRED:  # ``ssl = None``, as the failed import leaves it
        package = name.rpartition(".")[0]
        if name in sys.modules or (package and package in sys.modules):
            continue
        if name != "hashlib" and not tls:
            continue
        spec = _spec(name)
        if spec is not None:
            sys.modules[name] = _placeholder(name, spec)
            done.append(name)
    return done
