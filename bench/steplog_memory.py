"""The step log alone: its peak memory for a long run's rows and its cost per record.

Each measure runs in its own child process on a checkout (``--root``, repeatable, so an
old one is measured beside this one, interleaved) and reports:

* ``held MiB``: what the log holds once every row is recorded (traced numpy memory);
* ``record peak MiB``: the most traced memory while recording (a log that grows by
  copying holds its old and new storage at once);
* ``read peak MiB``: the most traced memory while its rows are put in order and every
  column is read once, one at a time (what summary.json and steps.csv need);
* ``us/record``: CPU microseconds per ``record(step, end_s)`` call;
* ``us/record_rows``: CPU microseconds per ``record_rows`` call of a 48-step stretch.

The rows mimic a default run's: steps of three replicas, recorded one at a time and in
stretches of 48 whose ends fall before rows already recorded (so reading sorts them).
CPU time (process time) with the 1-minute load average beside; medians over
``--repeats``. Nothing here asserts on time.

    .venv/bin/python bench/steplog_memory.py                          # this checkout
    .venv/bin/python bench/steplog_memory.py --root /work/main --root .  # A/B
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STRETCH = 48  # rows per record_rows call
SINGLES = 16  # record calls between two stretches


def _step(i: int):
    from sim.engine.records import Limit, StepRecord

    return StepRecord(
        0.02 * i,
        i % 3,
        0.02,
        64,
        512,
        60,
        1000 + i % 7,
        20,
        3000,
        15000,
        200,
        300,
        100,
        48000,
        0,
        12,
        0,
        Limit.TOKEN_BUDGET,
    )


def _stretch(first: int):
    import numpy as np

    rows = np.tile(np.array(_step(first), dtype=float), (STRETCH, 1))
    rows[:, 0] = 0.02 * (first + np.arange(STRETCH)) - 0.5  # ended before earlier rows
    return rows, rows[:, 0] + rows[:, 2]


def fill(log, num_rows: int) -> None:
    """``num_rows`` rows: SINGLES records, then a stretch, and again."""
    step, (rows, ends) = _step(0), _stretch(0)
    i = 0
    while i < num_rows:
        for _ in range(min(SINGLES, num_rows - i)):
            log.record(step, step[0] + step[2] + 1e-9 * i)
            i += 1
        take = min(STRETCH, num_rows - i)
        if take:
            log.record_rows(rows[:take], ends[:take] + 1e-9 * i)
            i += take


def memory(num_rows: int) -> dict:
    from sim.output.steplog import STEP_COLUMNS, StepLog

    tracemalloc.start()
    log = StepLog()
    fill(log, num_rows)
    held, record_peak = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    for name in STEP_COLUMNS:
        log.column(name)
    _, read_peak = tracemalloc.get_traced_memory()
    mib = 1024 * 1024
    return {
        "held_mib": held / mib,
        "record_peak_mib": record_peak / mib,
        "read_peak_mib": read_peak / mib,
    }


def speed(num_calls: int) -> dict:
    from sim.output.steplog import StepLog

    log, step = StepLog(), _step(0)
    end = step[0] + step[2]
    cpu = time.process_time()
    for _ in range(num_calls):
        log.record(step, end)
    record_us = (time.process_time() - cpu) / num_calls * 1e6
    rows, ends = _stretch(0)
    calls = max(num_calls // STRETCH, 1)
    log = StepLog()
    cpu = time.process_time()
    for _ in range(calls):
        log.record_rows(rows, ends)
    return {"record_us": record_us, "record_rows_us": (time.process_time() - cpu) / calls * 1e6}


def child(root: Path, what: str, n: int) -> dict:
    command = [sys.executable, __file__, "--child", what, str(root), str(n)]
    out = subprocess.run(command, check=True, capture_output=True, text=True, cwd=root)
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    figures["load"] = os.getloadavg()[0]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", action="append", type=Path, help="checkout (repeatable)")
    parser.add_argument("--rows", type=int, default=2_100_000, help="rows of the memory case")
    parser.add_argument("--calls", type=int, default=1_000_000, help="record calls timed")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        what, root, n = args.child
        sys.path.insert(0, root)
        print(json.dumps(memory(int(n)) if what == "memory" else speed(int(n))))
        return
    roots = [r.resolve() for r in (args.root or [ROOT])]
    runs: dict[Path, list[dict]] = {root: [] for root in roots}
    for _ in range(args.repeats):
        for root in roots:  # interleaved: each repeat measures every checkout
            runs[root].append(child(root, "memory", args.rows) | child(root, "speed", args.calls))
    keys = ("held_mib", "record_peak_mib", "read_peak_mib", "record_us", "record_rows_us")
    print(f"{args.rows:,} rows; {args.calls:,} record calls; medians of {args.repeats}")
    print(f"{'checkout':<28}" + "".join(f"{k:>17}" for k in keys) + f"{'load':>7}")
    for root, figures in runs.items():
        medians = [statistics.median(f[k] for f in figures) for k in keys]
        load = statistics.median(f["load"] for f in figures)
        print(f"{str(root)[-28:]:<28}" + "".join(f"{m:>17.2f}" for m in medians) + f"{load:>7.2f}")


if __name__ == "__main__":
    main()
