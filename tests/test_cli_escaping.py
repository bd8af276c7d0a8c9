"""Host text printed by the CLI can neither move the cursor nor reorder what it shows."""

from __future__ import annotations

import io
import json

from support import SelfSteppingClock

from gpudash.cli.act import run_reclaim
from gpudash.cli.args import parse
from gpudash.cli.terminal import Terminal
from gpudash.demo.host import DemoHost
from gpudash.domain.untrusted import json_dumps
from gpudash.render import jsondoc
from gpudash.render.textreport import snapshot_text

ERASE = "\x1b[3A\x1b[J"  # up three lines, erase to the end: the plan above the prompt vanishes
BIDI = "evil\u202eexe.sh"


def hostile_demo() -> DemoHost:
    demo = DemoHost(clock=SelfSteppingClock())
    demo.spawn(ppid=1, user="mallory", name=ERASE, cmdline=f"{ERASE} {BIDI}", unit=None,
               gpu_memory_mib={1: 100})
    return demo


def run(*extra: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    _cmd, args = parse(["reclaim", "--demo", "--unit", "vllm-minimax-m25", "--yes",
                        "--term-timeout", "1", *extra])
    code = run_reclaim(args, hostile_demo(), Terminal(out, err, io.StringIO()))
    return code, out.getvalue(), err.getvalue()


def test_reclaim_plan_progress_and_report_escape_host_text() -> None:
    code, out, err = run()
    assert code == 0, out + err
    assert "\x1b" not in out + err and "\u202e" not in out + err
    # the hostile holder is named in the plan's "Left alone", visibly
    assert "(mallory, \\x1b[3A\\x1b[J)" in err


def test_reclaim_json_escapes_controls_and_bidi() -> None:
    code, out, _err = run("--json")
    assert code == 0
    assert "\x1b" not in out and "\u202e" not in out
    record = json.loads(out)
    assert any(ERASE in line for line in record["plan"])  # the data itself is intact


async def test_snapshot_text_and_json_escape_host_text() -> None:
    snap = await hostile_demo().sample()
    text = snapshot_text(snap)
    assert "\x1b" not in text and "\u202e" not in text and "\\u202e" in text
    doc = json_dumps(jsondoc.document([snap]), indent=2)
    assert "\x1b" not in doc and "\u202e" not in doc
    (host,) = json.loads(doc)["hosts"]
    assert any(p["cmdline"] == f"{ERASE} {BIDI}" for p in host["processes"])


FORGED = "a\n    ✔ ok"  # issue 29 item 9: a process named so forged a line of the report


def test_a_newline_in_a_process_name_cannot_forge_a_line_of_the_report() -> None:
    demo = DemoHost(clock=SelfSteppingClock())
    # stuck in D state in the unit reclaimed: the report names it as what still holds GPU1
    stuck = demo.spawn(ppid=1, user="root", name=FORGED, cmdline=FORGED,
                       unit="vllm-minimax-m25.service", gpu_memory_mib={1: 100})
    stuck.state = "D"
    out, err = io.StringIO(), io.StringIO()
    _cmd, args = parse(["reclaim", "--demo", "--unit", "vllm-minimax-m25", "--yes",
                        "--term-timeout", "1", "--timeout", "3"])
    code = run_reclaim(args, demo, Terminal(out, err, io.StringIO()))
    assert code == 1, out.getvalue() + err.getvalue()  # not freed: the D-state holder
    lines = out.getvalue().split("\n")
    held = [line for line in lines if "still held" in line]
    assert held and held[-1].endswith("a\\x0a    ✔ ok"), lines
    assert not any(line.strip() == "✔ ok" for line in lines), lines
