"""The collector: the program gpudash runs on the GPU host.

``host`` is that program, a package sent to the host as one payload (stdlib only, Python
3.7+; see ``gpudash.protocol.payload``). Its ``host.protocol`` holds the protocol's one
definition (ops, message kinds, keys, limits, version); the operator side decodes what it
writes in ``gpudash.protocol``.
"""
