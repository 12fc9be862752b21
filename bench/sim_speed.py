"""Simulator speed: the default scenario at 10,000 and 100,000 requests.

Each size runs in its own process (so peak memory is that run's) and prints wall
seconds, simulated requests / output tokens / steps per wall second, microseconds per
step and peak resident memory. Microseconds per step that stay flat from 10k to 100k
requests show a step's cost does not grow with the requests already finished.

    .venv/bin/python bench/sim_speed.py [--sizes 10000 100000] [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "default.yaml"


def one_run(num_requests: int) -> dict:
    """Runs in a child process; prints one JSON line."""
    sys.path.insert(0, str(ROOT))
    from sim.config.loader import load_scenario
    from sim.run.build import build_executor
    from sim.run.runner import simulate

    scenario = load_scenario(SCENARIO, [f"simulation.num_requests={num_requests}"])
    clock: list[float] = []

    class Timed:
        """Delegates to the real executor and notes the wall clock at every step."""

        def __init__(self, inner):
            self.inner = inner

        def execute(self, batch):
            clock.append(time.perf_counter())
            return self.inner.execute(batch)

    result = simulate(scenario, executor_factory=lambda s, a: Timed(build_executor(s, a)))
    tokens = sum(r.output_tokens for r in result.outcomes)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "requests": num_requests,
        "wall_s": result.wall_s,
        "steps": result.num_steps,
        "output_tokens": tokens,
        "simulated_s": result.summary["duration_s"],
        "peak_mib": peak_kib / 1024,
        # wall us per step over the 2nd and the 9th tenth of the run's steps: flat if a
        # step's cost does not grow with the requests already finished
        "us_step_early": _window_us(clock, 0.1),
        "us_step_late": _window_us(clock, 0.8),
    }


def _window_us(clock: list[float], start: float) -> float:
    first, last = int(len(clock) * start), int(len(clock) * (start + 0.1))
    return (clock[last] - clock[first]) / max(last - first, 1) * 1e6


def measure(num_requests: int, repeats: int) -> dict:
    runs = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(num_requests)],
            check=True,
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    median = statistics.median(r["wall_s"] for r in runs)
    row = dict(runs[0])
    row["wall_s"] = median
    row["peak_mib"] = max(r["peak_mib"] for r in runs)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--repeats", type=int, default=1, help="median over this many runs")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_run(args.child)))
        return
    header = (
        f"{'requests':>9} {'wall s':>8} {'req/s':>9} {'out tok/s':>11} "
        f"{'steps/s':>9} {'us/step':>8} {'early':>6} {'late':>6} {'peak MiB':>9}"
    )
    print(f"pagesim simulator speed: {SCENARIO.relative_to(ROOT)} (analytic cost model)")
    print(header)
    for size in args.sizes:
        r = measure(size, args.repeats)
        wall = r["wall_s"]
        print(
            f"{r['requests']:>9,} {wall:>8.2f} {r['requests'] / wall:>9,.0f} "
            f"{r['output_tokens'] / wall:>11,.0f} {r['steps'] / wall:>9,.0f} "
            f"{wall / r['steps'] * 1e6:>8.1f} {r['us_step_early']:>6.0f} "
            f"{r['us_step_late']:>6.0f} {r['peak_mib']:>9,.0f}"
        )
    print("early/late: us per step over the 2nd and 9th tenth of the steps (flat = a step")
    print("does not get dearer as requests finish)")
    print("targets: 100,000 requests < 30 s wall, > 1e6 output tok/s, < 2048 MiB peak")


if __name__ == "__main__":
    main()
