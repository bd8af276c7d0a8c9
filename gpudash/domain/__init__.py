"""What gpudash knows of a host, as pure values and rules: snapshots (``model``), who owns
a process (``owners``), why memory is held (``triage``), a host's fleet row (``fleet``),
crash loops seen over time (``crashloop``), units of measure (``units``) and host text made
safe to show (``untrusted``). No I/O, no Textual.
"""
