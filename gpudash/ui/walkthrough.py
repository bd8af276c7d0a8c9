"""The demo's walkthrough of the incident: the next step, from the demo host's state, with
the keys as the user's keymap has them. Shown by widgets/guide.py on one line above the
footer: the welcome toast it replaces hid the unit panel and the log for half a minute,
said "press k" after k was rebound, and "~96.8 GiB" where the table showed 94.5 GiB."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text

from gpudash.demo.incident import KIMI, MINIMAX
from gpudash.domain.triage import Flag, HostTriage

KeyOf = Callable[[str], str]  # action name -> the key the user presses for it


def demo_step(result: HostTriage | None) -> int:
    """0 before the first sample; 1 kill the server; 2 stop + disable; 3 reap; 4 start the
    next model; 5 done (Kimi serves)."""
    if result is None:
        return 0
    kimi = result.snapshot.unit(KIMI)
    if kimi is not None and not kimi.is_down:
        return 5
    group = result.group(MINIMAX)
    unit = result.snapshot.unit(MINIMAX)
    if group is None or unit is None or not group.total_gpu_memory_mib:
        return 4
    if unit.is_down:
        return 3 if any(p.unit == MINIMAX for p in result.orphans()) else 4
    if unit.n_restarts or Flag.RESPAWNED in group.flags:
        return 2
    return 1


def guide_text(result: HostTriage | None, key: KeyOf, running: bool = False) -> Text:
    step = demo_step(result)
    out = Text()
    if running:
        out.append("Demo: ", style="bold")
        out.append("the action runs; the Action panel follows each GPU's memory until it "
                   "is back, or says what holds it.")
        return out
    if step == 0:
        out.append("Demo: waiting for the first sample…", style="dim")
        return out
    if step == 5:
        out.append("Demo done ", style="bold")
        out.append(f"· the next model came up. {key('journal')} shows a unit's journal, "
                   f"{key('help')} every key, {key('quit')} quits.")
        return out
    if step == 4:
        out.append("Demo 4/4: ", style="bold")
        out.append("the memory is back: select vllm-kimi-k25 and press ")
        out.append(key("start_unit"), style="bold reverse")
        out.append(" to start the next model and watch it load until it serves.")
        return out
    out.append(f"Demo {step}/4: ", style="bold")
    if step == 1:
        out.append("select the vLLM server (↓) and press ")
        out.append(key("kill"), style="bold reverse")
        out.append("; systemd respawns it. Or ")
        out.append(key("reclaim"), style="bold reverse")
        out.append(" on the unit: all in one, or ")
        out.append(key("swap"), style="bold reverse")
        out.append(" to swap to the next model.")
    elif step == 2:
        out.append("on the unit row press ")
        out.append(key("stop_disable"), style="bold reverse")
        out.append(" (stop + disable); its TP workers stay, ORPHAN.")
    else:
        out.append("on the unit row press ")
        out.append(key("reap"), style="bold reverse")
        out.append(" to reap the orphans; watch each GPU's memory come back.")
    return out
