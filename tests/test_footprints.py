"""A model's footprint is learned where it served and read back for the next swap."""

from __future__ import annotations

from pathlib import Path

from gpudash.state.footprints import learn, lookup


def test_learned_footprint_is_read_back_per_host_and_unit(tmp_path: Path) -> None:
    path = tmp_path / "fp.json"
    assert lookup("gpu01", "vllm-kimi-k25.service", path) is None
    learn("gpu01", "vllm-kimi-k25.service", {0: 90000, 1: 91000}, 18.5, path)
    learn("gpu02", "vllm-kimi-k25.service", {0: 1}, None, path)
    fp = lookup("gpu01", "vllm-kimi-k25.service", path)
    assert fp is not None and fp.mib_per_gpu == {0: 90000, 1: 91000} and fp.ready_s == 18.5
    assert fp.total_mib == 181000
    assert lookup("gpu02", "vllm-kimi-k25.service", path).ready_s is None  # type: ignore[union-attr]


def test_a_damaged_store_is_no_footprint_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "fp.json"
    for text in ("{", "[]", '{"h": {"u": {"mib_per_gpu": "x", "seen_at": 1}}}',
                 '{"h": {"u": {"mib_per_gpu": {"a": 1}, "seen_at": 1}}}'):
        path.write_text(text)
        assert lookup("h", "u", path) is None
