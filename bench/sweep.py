"""How long a small sweep takes on one worker, on N workers, and on a fresh local Ray.

Runs ``pagesim sweep`` (this checkout's code) into a fresh folder each time and prints,
per executor, the median over ``--repeats`` of: wall time; CPU time of the command and
the processes it waited for (the driver, Ray's start-up; pool and Ray workers are not
its waited-for children); CPU time inside the points (measured in each worker, printed
by the command); and the 1-minute load average at the end. Figures, not asserts.

    .venv/bin/python bench/sweep.py                      # 8 points of tiny.yaml, 3 repeats
    .venv/bin/python bench/sweep.py --jobs 2 --requests 2000 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_once(args: list[str], out: Path) -> tuple[float, float, float, float]:
    shutil.rmtree(out, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "sim.cli", *args, "--out", str(out), "--quiet"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"pagesim {' '.join(args)} failed: {done.stderr.strip()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    points = float(re.search(r"([0-9.]+) CPU s in workers", done.stdout)[1])
    return wall, cpu, points, os.getloadavg()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()
    sweep = [
        "sweep",
        str(ROOT / "scenarios" / "tiny.yaml"),
        "--grid",
        "cache.block_size=8,16,32,64",
        "--seeds",
        "2",
        "--set",
        f"simulation.num_requests={args.requests}",
        "--no-report",
    ]
    executors = [("--jobs 1", ["--jobs", "1"]), (f"--jobs {args.jobs}", ["--jobs", str(args.jobs)])]
    if not args.no_ray:
        executors.append(
            (f"--ray (fresh local, {args.jobs} CPUs)", ["--ray", "--jobs", str(args.jobs)])
        )
    print(
        f"pagesim sweep: tiny.yaml, 8 points of {args.requests} requests, "
        f"{os.cpu_count()} cores; median of {args.repeats}"
    )
    print(f"{'executor':<30} {'wall s':>8} {'CPU s':>8} {'points':>8} {'load 1m':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for label, extra in executors:
            runs = [run_once([*sweep, *extra], Path(tmp) / "out") for _ in range(args.repeats)]
            wall, cpu, points, load = (statistics.median(col) for col in zip(*runs))
            print(f"{label:<30} {wall:8.2f} {cpu:8.2f} {points:8.2f} {load:8.2f}")
    print("command: " + " ".join(["pagesim", *sweep, "--out", "DIR", "--quiet", "[executor]"]))


if __name__ == "__main__":
    main()
