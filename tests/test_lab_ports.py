"""Where a lab host's services listen (tests/lab/lab.py ``pick_port_offset``): pure, no
host is booted. Seen in CI: the real vLLM's host was given free ports as high as 60333,
and an offset that only moved ports up found none ("no free ports"), so five tests
errored at set-up."""

from __future__ import annotations

import sys

import pytest
from lab.fixtures import labmod  # noqa: F401  (loads tests/lab/lab.py as gpudash_lab)

L = sys.modules["gpudash_lab"]


@pytest.mark.parametrize("ports", [{47047, 49889, 60333}, {8000, 8001, 30000}, {1100}, {60990}])
def test_every_port_set_gets_an_offset_that_fits(ports: set[int]) -> None:
    for _ in range(20):  # random: many tries
        offset = L.pick_port_offset(ports, taken=set())
        moved = {p + offset for p in ports}
        assert abs(offset) >= 1000 and offset % L.PORT_OFFSET_STEP == 0
        assert all(L.PORT_LOW <= p <= L.PORT_HIGH for p in moved), (ports, offset)
        assert not moved & L.PORT_AVOID


def test_ports_other_hosts_took_are_left_to_them() -> None:
    ports = {8000}
    taken = {8000 + L.PORT_OFFSET_STEP * k for k in range(-400, 2700) if abs(k) >= 50}
    taken.discard(8000 + L.PORT_OFFSET_STEP * 777)  # one free place left
    assert L.pick_port_offset(ports, taken) == L.PORT_OFFSET_STEP * 777


def test_no_ports_no_offset() -> None:
    assert L.pick_port_offset(set(), set()) == 0
