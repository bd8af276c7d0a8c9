"""The collector: runs on the GPU host, produces snapshots (see ``hostside``).

``hostside`` is the program sent to the host, and holds the protocol's one definition
(ops, message kinds, keys, limits, version); ``wire`` decodes what it writes, with the
per-field bounds of ``schema``; ``shell`` is the fallback for hosts without ``python3``;
``payload`` builds what is sent.
"""
