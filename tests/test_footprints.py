"""A model's footprint is learned where it served and read back for the next swap."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpudash.domain.lint import Learned
from gpudash.state.footprints import learn, load, lookup


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


def test_each_bad_entry_is_skipped_and_reported_the_rest_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    # before: 1e999 raised OverflowError; negative and huge MiB and GPU 1000000 were
    # taken as they were; one host that was no object ended the lookup with an exception
    path = tmp_path / "fp.json"
    good = '{"mib_per_gpu": {"0": 90000}, "ready_s": 18.5, "seen_at": 1}'
    path.write_text(
        '{"h": {"good": ' + good + ','
        ' "inf": {"mib_per_gpu": {"0": 1e999}, "seen_at": 1},'
        ' "negative": {"mib_per_gpu": {"0": -5}, "seen_at": 1},'
        ' "huge": {"mib_per_gpu": {"0": 99999999999}, "seen_at": 1},'
        ' "gpu": {"mib_per_gpu": {"1000000": 1}, "seen_at": 1},'
        ' "ready": {"mib_per_gpu": {"0": 1}, "ready_s": NaN, "seen_at": 1},'
        ' "bool": {"mib_per_gpu": {"0": true}, "seen_at": 1}},'
        ' "list-host": [], "other": {"u": ' + good + '}}')
    with caplog.at_level(logging.WARNING, logger="gpudash.state.footprints"):
        for unit in ("inf", "negative", "huge", "gpu", "ready", "bool"):
            assert lookup("h", unit, path) is None, unit
        assert lookup("list-host", "u", path) is None
        fp = lookup("h", "good", path)
        assert fp is not None and fp.mib_per_gpu == {0: 90000}
        assert lookup("other", "u", path) is not None
    logged = caplog.text
    for why in ("'inf'", "'negative'", "'huge'", "GPU '1000000'", "'ready'", "'list-host'"):
        assert why in logged, why
    learn("h", "new", {0: 1}, None, path)  # a rewrite keeps the good, drops the bad
    store, problems = load(path)
    assert set(store["h"]) == {"good", "new"} and problems == []


def test_a_host_that_is_no_object_in_the_store_does_not_end_a_start() -> None:
    # before: {"demo-gpu01": []} made `gpudash start` and `swap` exit 70 (AttributeError)
    state = Path(os.environ["XDG_STATE_HOME"]) / "gpudash"
    state.mkdir(mode=0o700)
    (state / "footprints-demo.json").write_text('{"demo-gpu01": []}')
    cp = subprocess.run([sys.executable, "-m", "gpudash", "swap", "--demo", "--from",
                         "vllm-minimax-m25", "--to", "vllm-kimi-k25", "--yes"],
                        capture_output=True, text=True, timeout=180)
    assert cp.returncode == 0, cp.stderr
    assert "internal error" not in cp.stderr


def test_a_learned_stop_time_is_kept_beside_the_footprint_and_old_files_still_read(
        tmp_path: Path) -> None:
    from gpudash.state.footprints import learn_stop, learned

    def stop_times(host: str, path: Path) -> dict[str, float | None]:
        return {u: a.stop_s for u, a in learned(host, path).items()}

    path = tmp_path / "fp.json"
    # a file an older gpudash wrote: no stop_s anywhere
    path.write_text('{"gpu01": {"a.service": {"mib_per_gpu": {"0": 5}, "ready_s": 3, '
                    '"seen_at": 1}}}')
    assert stop_times("gpu01", path) == {}
    learn_stop("gpu01", "a.service", 47.26, path)
    learn_stop("gpu01", "b.service", 12.0, path)  # stopped, never seen serving
    assert stop_times("gpu01", path) == {"a.service": 47.3, "b.service": 12.0}
    a = lookup("gpu01", "a.service", path)
    assert a is not None and a.mib_per_gpu == {0: 5} and a.ready_s == 3  # footprint kept
    assert lookup("gpu01", "b.service", path) is None  # no footprint to check a fit with
    learn("gpu01", "a.service", {0: 6}, 4.0, path)  # serving again: the stop time stays
    assert stop_times("gpu01", path)["a.service"] == 47.3
    for bad in ("-1", '"long"', "1e999", "true"):
        path.write_text('{"h": {"u": {"mib_per_gpu": {}, "seen_at": 1, "stop_s": ' + bad + "}}}")
        store, problems = load(path)
        assert store == {} and "stop_s" in problems[0]
    path.write_text('{"h": {"u": {"mib_per_gpu": {}, "seen_at": 1}}}')  # neither: no entry
    assert load(path)[0] == {}


def test_stop_times_look_at_the_file_once_a_second_and_see_a_new_stop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Asked at every sample of every host: one stat per host per sample was the review's
    # finding (64 hosts at 1 Hz). Now: at most one look per second, answers kept meanwhile.
    from gpudash.state import footprints

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    now = [100.0]
    times = footprints.LearnedUnits(recheck_s=1.0, clock=lambda: now[0])
    path = footprints.store_path()
    footprints.learn_stop("gpu01", "vllm-a.service", 12.5, path)
    looks = []
    real_stat = Path.stat

    def counting_stat(self: Path, *a, **k):  # type: ignore[no-untyped-def]
        if self == path:
            looks.append(now[0])
        return real_stat(self, *a, **k)

    monkeypatch.setattr(Path, "stat", counting_stat)
    for host in ("gpu01", "gpu02") * 50:  # 100 samples within the same second
        times(host)
    assert len(looks) == 1
    assert times("gpu01") == {"vllm-a.service": Learned(12.5)} and times("gpu02") == {}
    footprints.learn_stop("gpu01", "vllm-a.service", 30.0, path)
    assert times("gpu01") == {"vllm-a.service": Learned(12.5)}  # within the second: as it was
    now[0] += 1.0
    assert times("gpu01") == {"vllm-a.service": Learned(30.0)}  # looked again, read again
    assert len(looks) == 2


def test_processes_that_ignored_sigterm_are_kept_checked_and_survive_other_learning(
        tmp_path: Path) -> None:
    from gpudash.state.footprints import learn_stop, learn_term_ignored, learned

    path = tmp_path / "fp.json"
    learn_term_ignored("gpu01", "a.service", 2, path)  # nothing else known of it yet
    [(unit, seen)] = learned("gpu01", path).items()
    assert unit == "a.service" and seen.term_ignored == 2 and seen.term_ignored_at
    assert seen.stop_s is None and lookup("gpu01", "a.service", path) is None
    learn_stop("gpu01", "a.service", 30.0, path)
    learn("gpu01", "a.service", {0: 6}, 4.0, path)
    kept = learned("gpu01", path)["a.service"]
    assert (kept.stop_s, kept.term_ignored, kept.term_ignored_at) == (
        30.0, 2, seen.term_ignored_at)
    for bad in ('"term_ignored_at": -5', '"term_ignored_at": 1e999',
                '"term_ignored_at": 5, "term_ignored": -1',
                '"term_ignored_at": 5, "term_ignored": true',
                '"term_ignored_at": 5, "term_ignored": 99999999999'):
        path.write_text('{"h": {"u": {"mib_per_gpu": {}, "seen_at": 1, ' + bad + "}}}")
        store, problems = load(path)
        assert store == {} and "term_ignored" in problems[0], (bad, problems)
