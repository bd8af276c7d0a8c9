"""The collector: the program gpudash runs on the GPU host (``hostside``).

``hostside`` is the program sent to the host (stdlib only, Python 3.7+), and holds the
protocol's one definition (ops, message kinds, keys, limits, version); the operator side
decodes what it writes in ``gpudash.protocol``.
"""
