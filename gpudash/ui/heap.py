"""The Python heap of a dashboard that runs for hours: full collections that stay cheap.

CPython's cyclic collector scans every object it tracks on a full (generation 2)
collection. With 256 hosts (``bench/peer_bench.py --hosts 256``) the dashboard ran one
every 2-3 s, 150-270 ms each: each pass rescanned the ~170,000 objects of start-up
(modules, classes, styles) that never die. A key pressed meanwhile waited for it (the help
key: 90 ms median, 290 ms at worst). ``gc.freeze()`` once everything is imported moves
start-up's objects out of the collector's sight for the run; it is undone when the run
ends (tests and the CLI go on in the same process).

The young generation keeps CPython's threshold. A wider one (10,000 allocations) was
tried beside the freeze: at 256 hosts the help key was no faster (median 56 ms against
49 ms at 700 and 50 ms at 2,000, 12 presses each), and the garbage Textual's strips leave
in cycles (their crop caches refer to themselves) lived longer: about 1 MB more RSS.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def steady_heap() -> Iterator[None]:
    """Within: start-up's objects frozen out of the cyclic collector's passes."""
    gc.collect()  # start-up's garbage is not frozen with it
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
