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
    next model; 5 enable it (a reboot must bring a model up); 6 fix the cause in its
    configuration; 7 done."""
    if result is None:
        return 0
    kimi = result.snapshot.unit(KIMI)
    if kimi is not None and not kimi.is_down:
        if not (kimi.unit_file_state or "").startswith("enabled"):
            return 5
        group = result.group(KIMI)
        return 6 if group is not None and group.lint else 7
    group = result.group(MINIMAX)
    unit = result.snapshot.unit(MINIMAX)
    if group is None or unit is None or not group.total_gpu_memory_mib:
        return 4
    if unit.is_down:
        return 3 if any(p.unit == MINIMAX for p in result.orphans()) else 4
    if unit.n_restarts or Flag.RESPAWNED in group.flags:
        return 2
    return 1


STEPS = 6  # what the operator does; 7 is the end


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
    if step == 7:
        out.append("Demo done ", style="bold")
        out.append(f"· the next model serves, starts at boot, and its unit no longer sets "
                   f"the trap. {key('journal')} shows a unit's journal, {key('help')} every "
                   f"key, {key('quit')} quits.")
        return out
    out.append(f"Demo {step}/{STEPS}: ", style="bold")
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
    elif step == 3:
        out.append("on the unit row press ")
        out.append(key("reap"), style="bold reverse")
        out.append(" to reap the orphans; watch each GPU's memory come back.")
    elif step == 4:
        out.append("the memory is back: on “idle units” press → (the models not started), "
                   "select vllm-kimi-k25 and press ")
        out.append(key("start_unit"), style="bold reverse")
        out.append(" to start the next model and watch it load until it serves.")
    elif step == 5:
        out.append("vllm-kimi-k25 serves, but it is disabled: a reboot brings up no model. "
                   "On its row press ")
        out.append(key("enable_unit"), style="bold reverse")
        out.append(" to start it at boot.")
    else:
        out.append("its configuration sets the same trap (the unit panel's Configuration): "
                   "on its row press ")
        out.append(key("fix_unit"), style="bold reverse")
        out.append(" to fix the cause with gpudash's drop-in, previewed and reversible.")
    return out
