"""The demo's walkthrough of the incident: the next step, from the demo host's state, with
the keys as the user's keymap has them. Shown by widgets/guide.py on one line above the
footer: the welcome toast it replaces hid the unit panel and the log for half a minute,
said "press k" after k was rebound, and "~96.8 GiB" where the table showed 94.5 GiB."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text

from gpudash.demo import MINIMAX
from gpudash.triage import Flag, HostTriage

KeyOf = Callable[[str], str]  # action name -> the key the user presses for it


def demo_step(result: HostTriage | None) -> int:
    """0 before the first sample; 1 kill the server; 2 stop + disable; 3 reap; 4 done."""
    if result is None:
        return 0
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
    if step == 4:
        out.append("Demo done ", style="bold")
        out.append(f"· the memory is back. {key('help')} shows every key, {key('quit')} quits.")
        return out
    out.append(f"Demo {step}/3: ", style="bold")
    if step == 1:
        out.append("select the vLLM server (↓) and press ")
        out.append(key("kill"), style="bold reverse")
        out.append("; systemd respawns it. Or ")
        out.append(key("reclaim"), style="bold reverse")
        out.append(" on the unit: all in one.")
    elif step == 2:
        out.append("on the unit row press ")
        out.append(key("stop_disable"), style="bold reverse")
        out.append(" (stop + disable); its TP workers stay, ORPHAN.")
    else:
        out.append("on the unit row press ")
        out.append(key("reap"), style="bold reverse")
        out.append(" to reap the orphans; watch each GPU's memory come back.")
    return out
