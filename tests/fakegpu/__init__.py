"""Stand-in NVIDIA driver for tests (see README.md). Import as ``fakegpu`` with tests/ on sys.path."""
