"""Print the directory holding NVIDIA's nvml.h from the nvidia-nvml-dev wheel (empty if absent)."""

import glob
import os

try:
    import nvidia
except ImportError:
    raise SystemExit(0) from None
for base in nvidia.__path__:
    hits = sorted(
        glob.glob(os.path.join(base, "*", "include", "nvml.h"))
        + glob.glob(os.path.join(base, "include", "nvml.h"))
    )
    if hits:
        print(os.path.dirname(hits[-1]))
        break
