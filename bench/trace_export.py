"""Size and write time of a run's Chrome/Perfetto trace (sim.output.trace).

Simulates the default scenario at each size, then writes its trace as plain JSON and as
gzip (under runs/, removed after) and prints, per size: events, bytes of each, wall and
CPU seconds of each write, and how much resident memory grew while writing (sampled
every 10 ms; the trace is written as it is made, so this stays small however long the
run). The load average is printed before and after: wall seconds are only comparable on
an idle machine.

    .venv/bin/python bench/trace_export.py [--sizes 12000 100000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "default.yaml"


def rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def timed_write(result, folder: Path, fmt: str) -> dict:
    from sim.output.trace import write_trace

    base, peak, done = rss_mib(), [0.0], threading.Event()

    def sample() -> None:
        while not done.wait(0.01):
            peak[0] = max(peak[0], rss_mib())

    sampler = threading.Thread(target=sample)
    sampler.start()
    wall, cpu = time.perf_counter(), time.process_time()
    path = write_trace(folder, result.outcomes, result.steps, result.summary["num_blocks"], fmt=fmt)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    done.set()
    sampler.join()
    return {
        "bytes": path.stat().st_size,
        "wall_s": wall,
        "cpu_s": cpu,
        "rss_growth_mib": max(peak[0] - base, 0.0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[12_000, 100_000])
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from sim.config.loader import load_scenario
    from sim.output.trace import trace_event_count
    from sim.run.runner import simulate

    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    print(
        f"{'requests':>9} {'steps':>8} {'events':>10} {'json MB':>8} {'wall s':>7} "
        f"{'cpu s':>6} {'gzip MB':>8} {'wall s':>7} {'cpu s':>6} {'+RSS MiB':>8}"
    )
    for size in args.sizes:
        scenario = load_scenario(SCENARIO, [f"simulation.num_requests={size}"])
        result = simulate(scenario)
        events = trace_event_count(result.outcomes, result.steps)
        (ROOT / "runs").mkdir(exist_ok=True)
        with tempfile.TemporaryDirectory(dir=ROOT / "runs") as tmp:
            plain = timed_write(result, Path(tmp), "json")
            packed = timed_write(result, Path(tmp), "gzip")
        print(
            f"{size:>9,} {len(result.steps):>8,} {events:>10,} {plain['bytes'] / 1e6:>8.1f} "
            f"{plain['wall_s']:>7.2f} {plain['cpu_s']:>6.2f} {packed['bytes'] / 1e6:>8.1f} "
            f"{packed['wall_s']:>7.2f} {packed['cpu_s']:>6.2f} "
            f"{max(plain['rss_growth_mib'], packed['rss_growth_mib']):>8.1f}"
        )
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
