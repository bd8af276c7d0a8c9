"""The Python heap of a dashboard that runs for hours: fewer, cheaper full collections.

CPython's cyclic collector scans every object it tracks on a full (generation 2)
collection. With 256 hosts (``bench/peer_bench.py --hosts 256``) the dashboard ran one
every 2-3 s, 150-270 ms each: the samples that replace each other every second live long
enough to be promoted, and each full pass also rescans the ~170,000 objects of start-up
(modules, classes, styles) that never die. A key pressed meanwhile waited for it (the help
key: 90 ms median, 290 ms at worst). Two standard remedies, for the run only:

- ``gc.freeze()`` once everything is imported: start-up's objects are never scanned again;
- a young generation of ``YOUNG`` allocations instead of 700: a second's samples mostly
  die before they are promoted, so full collections come far less often.

Both are undone when the run ends (tests and the CLI go on in the same process).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG = 10_000  # allocations (net) between young collections; CPython's default is 700


@contextmanager
def steady_heap() -> Iterator[None]:
    """Within: start-up's objects frozen out of collections, a larger young generation."""
    before = gc.get_threshold()
    gc.collect()  # start-up's garbage is not frozen with it
    gc.freeze()
    gc.set_threshold(YOUNG, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
