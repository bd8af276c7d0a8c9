"""gpudash: who holds the GPU memory on this host, and getting it back with proof."""

__version__ = "0.1.0"
