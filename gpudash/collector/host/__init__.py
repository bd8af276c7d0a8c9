"""The collector that runs on the GPU host and writes snapshots as JSON lines.

This package is what gpudash sends to a remote host and runs with the host's ``python3``
(3.7 or later), isolated (``-I``): ``gpudash.protocol.payload`` ships every module's source
in one round trip and the bootstrap makes them the package ``gpudash_hostside`` there
(its entry point is ``loop.main``). It imports only the standard library, plus ``pynvml``
(sent along with it) and the host's own ``psutil`` when present (for the host's CPU and
RAM only; ``/proc`` serves the same numbers without it). It must never import gpudash, and
its modules import each other relatively only. Locally the same program runs as a
subprocess, or (the dashboard's stream) its ``loop.main`` in a thread of gpudash's
process over two pipes (``gpudash.transport.inprocess``): one code path everywhere. CI
checks it with ``vermin -t=3.7-`` and runs it on a real Python 3.7.

A snapshot on the wire is a dict with ``None`` values left out (so a JSON merge patch,
RFC 7386, can describe every change: ``null`` means "now unknown"); a process's GPU
memory of unknown size is written ``-1`` for the same reason. Lines are UTF-8 as is.
Every text from the host is cut to a limit and counts are capped (see "Limits" in
``protocol``), so no process a GPU user starts can make a snapshot larger than
``text.snapshot_bound()``.

What a snapshot promises about processes (stream mode; see ``procs.ProcReader``): GPU
memory per process is read from the driver every sample. With pidfds (Python >= 3.9,
Linux >= 5.3) a process that exited (gone or a zombie) or whose parent exited (new
``ppid``) is shown so in the very next sample; ``state`` and ``name`` of any other process
are at most ``STAT_EVERY - 1`` samples old, and processes last seen in D/Z/T/t/X or
signalled in the last ``SIGNAL_WATCH`` samples are re-read every sample; ``cmdline``/
``cgroup``/``unit`` are at most ``CMDLINE_TTL_S`` seconds old (and re-read when comm
changes). Any request from gpudash makes the next sample re-read everything. Without
pidfds, or beyond the fd budget, every process is re-read every sample.
"""
