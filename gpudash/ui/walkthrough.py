"""The demo's walkthrough of the incident, offered when ``gpudash --demo`` starts."""

from __future__ import annotations

DEMO_WALKTHROUGH = (
    "This is a simulated 8-GPU host replaying the incident: vllm-minimax-m25 holds "
    "~96.8 GiB on every GPU.\n"
    "1. Select the vLLM server (down arrow) and press k: systemd respawns it.\n"
    "2. Back on the unit row, press D (stop + disable): the TP workers stay, ORPHAN.\n"
    "3. Press o to reap them and watch the memory come back, per GPU.\n"
    "Or press r on a fresh start: the whole incident in one action. ? shows every key."
)
