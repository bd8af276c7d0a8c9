"""The collector: runs on the GPU host, produces snapshots (see ``hostside``).

``hostside`` is the program sent to the host; ``wire`` decodes what it writes;
``shell`` is the fallback for hosts without ``python3``; ``payload`` builds what is sent.
"""
