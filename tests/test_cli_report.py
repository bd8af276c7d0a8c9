"""``gpudash report``: the actions beside each GPU's memory, as text or a picture (issue 21
item 5)."""

from __future__ import annotations

import json
import os
import re
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from test_cli import audit_records, gpudash
from test_cli_history import rec, write_audit

from gpudash.engine.series import MAX_POINTS, MemorySeries, from_json
from gpudash.ui.plot import gpu_colour

SVG = "{http://www.w3.org/2000/svg}"


def svg_lines(path: Path) -> tuple[list[str], dict[str, str], list[tuple[str, str]]]:
    """The picture's text rows, its style classes' fill colours, and each text element
    with its class."""
    root = ET.parse(path).getroot()
    style = "".join(s.text or "" for s in root.iter(f"{SVG}style"))
    fills = dict(re.findall(r"\.([\w-]+) \{ fill: (#[0-9a-f]{6})", style))
    texts = [(t.get("class") or "", "".join(t.itertext()).replace("\xa0", " "))
             for t in root.iter(f"{SVG}text")]
    rows = "".join(text for _c, text in texts).split("\n")
    return rows, fills, texts


def braille(text: str) -> bool:
    return any(0x2800 <= ord(ch) <= 0x28FF for ch in text)


def test_a_reclaim_and_a_swap_on_the_demo_are_drawn_beside_each_gpus_memory(
        tmp_path: Path) -> None:
    assert gpudash("reclaim", "--demo", "--unit", "vllm-minimax-m25", "--yes").returncode == 0
    assert gpudash("swap", "--demo", "--from", "vllm-minimax-m25", "--to", "vllm-kimi-k25",
                   "--yes").returncode == 0
    outcomes = [r for r in audit_records() if r["record"] == "outcome"]
    for r in outcomes:  # the series is in the record, and small
        assert 2 <= len(r["memory"]["t"]) <= MAX_POINTS
        assert len(json.dumps(r["memory"])) < 400 * len(r["memory"]["mib"])

    picture = tmp_path / "report.svg"
    r = gpudash("report", "--demo", "--svg", str(picture))
    assert r.returncode == 0, r.stderr
    assert "written to" in r.stderr and r.stdout == ""
    rows, fills, texts = svg_lines(picture)
    page = "\n".join(rows)
    assert "reclaim vllm-minimax-m25.service" in page
    assert "swap vllm-minimax-m25.service ->" in page and "vllm-kimi-k25.service" in page
    assert page.count("✔ confirmed") == 2
    assert "phase reclaim 0–" in page and "phase start " in page
    assert "GiB back" in page
    # the curves: braille drawn in the GPUs' colours, each GPU in the legend
    curve_colours = {fills.get(c) for c, text in texts if braille(text)}
    gpus = outcomes[0]["memory"]["mib"]
    assert curve_colours and curve_colours <= {gpu_colour(int(g)) for g in gpus}
    legend_colours = {fills.get(c) for c, text in texts if text.startswith("━━")}
    assert {gpu_colour(int(g)) for g in gpus} <= legend_colours
    assert sum(braille(row) for row in rows) >= 2 * 8  # two plots, several rows each
    # issue 33, item 8: it loaded Fira Code from a CDN, and offline the braille fell back
    # to a font of another width: nothing is fetched, system monospace fonts are named
    svg = picture.read_text()
    assert "cdnjs" not in svg and "@font-face" not in svg
    assert not re.findall(r"https?://(?!www\.w3\.org|www\.textualize\.io)", svg)
    assert "'DejaVu Sans Mono'" in svg

    text = gpudash("report", "--demo")
    assert text.returncode == 0 and "reclaim vllm-minimax-m25.service" in text.stdout
    assert braille(text.stdout) and "\x1b" not in text.stdout  # a pipe gets no colours
    html = tmp_path / "report.html"
    assert gpudash("report", "--demo", "--html", str(html)).returncode == 0
    assert "reclaim vllm-minimax-m25.service" in html.read_text()
    doc = json.loads(gpudash("report", "--demo", "--json").stdout)
    assert [a["action"] for a in doc["actions"]] == ["reclaim", "swap"]
    assert all(a["memory"] and a["memory"][0]["t"] == 0.0 for a in doc["actions"])
    assert gpudash("report", "--demo", "--svg", "a", "--html", "b").returncode == 2


def test_the_series_stays_bounded_however_long_the_action_runs() -> None:
    series = MemorySeries()
    for i in range(20_000):  # five and a half hours at one sample a second
        series.add(1000.0 + i, {0: 90_000 if i < 15_000 else 1024, 1: None})
        assert len(series.times) <= MAX_POINTS
    doc = series.to_json()
    assert doc is not None and len(json.dumps(doc)) < 1200
    assert doc["t"][0] == 0.0 and doc["t"][-1] == 19_999.0  # the end is where it ended
    assert doc["mib"]["0"][0] == 90_000 and doc["mib"]["0"][-1] == 1024
    assert doc["mib"]["1"] == [None] * len(doc["t"])
    gaps = [b - a for a, b in zip(doc["t"], doc["t"][1:], strict=False)]
    assert max(gaps[:-1]) < 4 * min(gaps[:-1])  # evenly thinned, not just the first minutes
    assert from_json(doc)[-1] == (19_999.0, {0: 1024, 1: None})
    assert MemorySeries().to_json() is None


def test_old_records_without_a_series_and_garbage_still_report(tmp_path: Path) -> None:
    now = time.time()
    write_audit([
        rec("intent", "old", now - 90),
        rec("outcome", "old", now - 80, verdict="confirmed",  # before the series existed
            gpus=[{"index": 0, "before_mib": 9000, "after_mib": 1000}]),
        rec("intent", "bad", now - 70, host="gpu02"),
        rec("outcome", "bad", now - 60, host="gpu02", verdict="failed", summary="still held",
            memory={"t": [0, "soon", 2], "mib": {"0": [1, 2, 3]}}),
        rec("outcome", "odd", now - 50, host="gpu03", verdict="confirmed",
            memory={"t": [0, 1], "mib": {"0": [5], "x": [1, 2], "1": [2048, None]}}),
        rec("outcome", "back", now - 40, host="gpu03", verdict="confirmed",
            memory={"t": [5, 1], "mib": {"0": [1, 2]}}),  # time running backwards
        rec("outcome", "str", now - 30, host="gpu03", verdict="confirmed", memory="lots"),
        '{"record": "outcome", "id": "cut", "memory": {"t": [0, ',  # cut short by a crash
        "[1, 2, 3]",
    ])
    picture = tmp_path / "r.svg"
    r = gpudash("report", "--svg", str(picture))
    assert r.returncode == 0, r.stderr
    assert "2 line(s) of the audit file are not records: skipped" in r.stderr
    page = "\n".join(svg_lines(picture)[0])
    assert page.count("no memory series in this record") == 4  # old, bad, back, str
    assert "✘ failed" in page and "still held" in page
    doc = json.loads(gpudash("report", "--json").stdout)
    odd = next(a for a in doc["actions"] if a["id"] == "odd")
    assert odd["memory"] == [{"t": 0, "mib": {"1": 2048}}, {"t": 1, "mib": {"1": None}}]
    assert gpudash("report", "gpu02").stdout.count("reclaim v.service") == 1
    nowhere = gpudash("report", "--svg", str(tmp_path / "no" / "such" / "dir.svg"))
    assert nowhere.returncode == 2 and "cannot write" in nowhere.stderr


def test_host_text_is_shown_literally() -> None:
    now = time.time()
    write_audit([rec("outcome", "h", now - 10, host="[red]gpu\x1b[2J01", verdict="confirmed",
                     summary="x")])
    r = gpudash("report")
    assert r.returncode == 0, r.stderr
    assert "[red]gpu\\x1b[2J01" in r.stdout and "\x1b" not in r.stdout


def test_an_action_of_one_sample_is_drawn_from_its_first_second_on() -> None:
    # Seen: a fix (a drop-in written, no memory moved) recorded one sample, and its chart's
    # axis, seconds from the action's first sample, ran from -1.00 to 0.00.
    from gpudash.ui.plot import render_history, render_series

    series = render_series([(0.0, {0: 4000, 1: 8000})], [0, 1], width=60, height=10,
                           ymax_gib=10).plain.splitlines()
    assert braille("".join(series)) and "-" not in series[-1], series[-1]
    assert series[-1].split()[0] == "0" and series[-1].split()[-1] == "1s"
    history = render_history([(100.0, {0: 4000})], [0], width=60, height=10,
                             ymax=10).plain.splitlines()
    assert history[-1].split()[-1] == "now" and history[-1].split()[0].startswith("-")


def test_an_action_whose_memory_never_moved_is_one_line_not_a_chart(tmp_path: Path) -> None:
    # issue 33, item 8: a 0.0 s action got a full 16-line flat chart
    from gpudash.cli.report import memory
    from gpudash.session.history import Action

    flat = Action("a" * 32, memory=[(0.0, {0: 4096, 1: 8192}), (0.0, {0: 4096, 1: 8192})])
    shown = memory(flat, 80)
    assert str(shown) == "GPU memory unchanged over 0.0 s: GPU0 4.0 GiB, GPU1 8.0 GiB"
    moved = Action("b" * 32, memory=[(0.0, {0: 4096}), (2.0, {0: 0})])
    assert not str(memory(moved, 80)).startswith("GPU memory unchanged")


def test_a_report_file_that_is_a_symbolic_link_is_refused_not_followed(tmp_path: Path) -> None:
    """Issue 29 item 11: ``report --svg FILE`` wrote through a link, as root."""
    write_audit([rec("outcome", "a", time.time() - 10, verdict="confirmed")])
    precious = tmp_path / "precious"
    precious.write_text("root's own data\n")
    nowhere = tmp_path / "not-yet"  # a dangling link: following it would create the file
    for flag in ("--svg", "--html"):
        for target in (precious, nowhere):
            link = tmp_path / f"report{flag}"
            link.unlink(missing_ok=True)
            link.symlink_to(target)
            r = gpudash("report", flag, str(link))
            assert r.returncode == 2, (flag, r.returncode, r.stderr)
            assert "symbolic link" in r.stderr and str(link) in r.stderr, r.stderr
            assert "Traceback" not in r.stderr and "written to" not in r.stderr
            assert link.is_symlink() and os.readlink(link) == str(target)
    assert precious.read_text() == "root's own data\n" and not nowhere.exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left
    # a directory given as the file is refused too; a plain file is written (and replaced)
    r = gpudash("report", "--svg", str(tmp_path))
    assert r.returncode == 2 and "not a regular file" in r.stderr, r.stderr
    plain = tmp_path / "r.svg"
    plain.write_text("old")
    assert gpudash("report", "--svg", str(plain)).returncode == 0
    ET.parse(plain)
