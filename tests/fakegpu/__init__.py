"""Stand-in NVIDIA driver for tests (see README.md).

Imported as ``fakegpu`` with tests/ on sys.path.
"""
