"""CPU the dashboard spends per second of wall time, on the demo host, headless.

    python bench/ui_bench.py [--seconds 10]

Prints one row per sample interval (1 s, 0.25 s, 0.1 s = 10 Hz). Not a test: these
machines are noisy; compare figures from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from gpudash.demo.host import DemoHost
from gpudash.ui.app import GpudashApp


async def measure(interval: float, seconds: float) -> tuple[float, int]:
    app = GpudashApp([DemoHost()], interval=interval, read_only=False, theme=None,
                     exec_options=None)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause(1.0)  # warm up: first layout, themes
        samples = len(app.view.history)
        cpu = time.process_time()
        await pilot.pause(seconds)
        used = time.process_time() - cpu
        return used / seconds, len(app.view.history) - samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    print(f"{'interval':>9}  {'samples/s':>9}  {'CPU % of one core':>17}")
    for interval in (1.0, 0.25, 0.1):
        share, samples = asyncio.run(measure(interval, args.seconds))
        print(f"{interval:>8g}s  {samples / args.seconds:>9.1f}  {100 * share:>16.1f}%")


if __name__ == "__main__":
    main()
