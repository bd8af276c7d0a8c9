"""One series of an instant vector, as the client parses it and the rows read it (a module
of its own: what reads samples does not import the HTTP client)."""

from __future__ import annotations

from typing import NamedTuple


class Sample(NamedTuple):
    """One series of an instant vector: its labels (``__name__`` kept where the query kept
    it), its value and the time it was evaluated at (epoch seconds). (A named tuple: tens of
    thousands are made per refresh at 5,000 hosts, at a third of a frozen dataclass' cost.)"""

    labels: dict[str, str]
    value: float
    at: float
