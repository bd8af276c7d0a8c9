"""The unit panel when the unattributed row is selected: per GPU, the memory no process
holds, what was checked on the host to say so, who holds the GPU all the same, and
whether a GPU reset may give it back (its key) or why not."""

from __future__ import annotations

from rich.text import Text

from gpudash.domain.triage import HostTriage
from gpudash.domain.unheld import reset_candidate, unheld_memory
from gpudash.domain.units import gib
from gpudash.ui.palette import Palette
from gpudash.ui.text import literal
from gpudash.ui.widgets.holder_view import HolderView
from gpudash.ui.widgets.holders import UNATTRIBUTED_KEY


def selected_gpu(result: HostTriage | None, key: str | None, view: HolderView) -> int | None:
    """The GPU a reset is for, where the unattributed row is selected: the GPU filter's
    (Enter on a GPU row), else the one with the most memory no process holds."""
    if key != UNATTRIBUTED_KEY or result is None:
        return None
    return view.gpu if view.gpu is not None else reset_candidate(result.snapshot)


def unheld_text(result: HostTriage | None, key: str | None, view: HolderView, pal: Palette,
                reset_key: str | None) -> Text | None:
    """The panel's content for the unattributed row (None: another row is selected).
    ``reset_key``: the reset's key, where it is offered for the selected GPU."""
    if key != UNATTRIBUTED_KEY or result is None:
        return None
    unheld = unheld_memory(result.snapshot)
    gpus = [g for g in sorted(unheld) if view.gpu is None or g == view.gpu]
    picked = selected_gpu(result, key, view)
    out = Text("Memory no process holds\n", style="bold")
    out.append("used on the GPU by no process the driver lists: a driver-level leak, a "
               "context torn down mid-kernel, or a holder this login cannot see\n",
               style="italic")
    for gpu in gpus:
        u = unheld[gpu]
        out.append(f"\nGPU {gpu}: {gib(u.mib)}", style=f"bold {pal.warning}")
        out.append("  (selected for a reset)\n" if gpu == picked and len(gpus) > 1 else "\n")
        for line in u.checks:
            out.append("  ✓ " if "not " not in line else "  ? ", style="dim")
            out.append_text(literal(line))
            out.append("\n")
        if u.resettable:
            out.append("  nothing holds it", style=pal.success)
            if reset_key and gpu == picked:
                out.append("  ")
                out.append(f" {reset_key} ", style="bold reverse")
                out.append(" reset the GPU (nvidia-smi --gpu-reset), planned first")
            out.append("\n")
        else:
            out.append("  no reset: ", style=pal.notice)
            out.append_text(literal(u.blockers[0], style=pal.notice))
            out.append("\n")
            for more in u.blockers[1:]:
                out.append_text(literal(f"    {more}", style="dim"))
                out.append("\n")
    out.rstrip()
    return out
