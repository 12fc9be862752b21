"""Simulator speed and memory: CPU time, wall time and peak memory of whole runs.

Each case runs in its own child process (so peak RSS is that run's) and reports:
CPU seconds (process time: what the run cost, whatever else the machine is doing),
wall seconds, steps, steps per CPU second, CPU microseconds per step, the share of
steps fast-forwarded in decode stretches, and peak resident memory. The 1-minute load
average is printed beside each figure: on a loaded machine CPU time is the figure to
trust, wall time is not. ``--modes both`` runs every case fast-forwarded and step by
step (``pagesim run --step-by-step``), interleaved, and prints the ratio.

    .venv/bin/python bench/sim_speed.py                       # the quick cases
    .venv/bin/python bench/sim_speed.py --cases default-100k low-batch swap --modes both
    .venv/bin/python bench/sim_speed.py --cases default-1m    # ~1M requests: minutes
    .venv/bin/python bench/sim_speed.py --root ../old          # another checkout's code

Medians over ``--repeats`` runs. Nothing here asserts on time (tests never do).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: name -> (scenario, --set overrides)
CASES = {
    "default-10k": ("scenarios/default.yaml", ["simulation.num_requests=10000"]),
    "default-100k": ("scenarios/default.yaml", ["simulation.num_requests=100000"]),
    "default-1m": ("scenarios/default.yaml", ["simulation.num_requests=1000000"]),
    # 8 replicas at 40 req/s in total: mean batch ~12, long quiet decode stretches
    "low-batch": (
        "scenarios/default.yaml",
        [
            "simulation.num_requests=20000",
            "routing.replicas=8",
            "workload.arrival.rate_rps=40",
        ],
    ),
    "swap": ("scenarios/policies/preemption-swap.yaml", ["simulation.num_requests=10000"]),
    "swap-100k": ("scenarios/policies/preemption-swap.yaml", ["simulation.num_requests=100000"]),
    "shared-prompt": ("scenarios/shared-prompt.yaml", ["simulation.num_requests=20000"]),
}
QUICK = ["default-10k", "low-batch", "swap", "shared-prompt"]


def one_run(root: Path, case: str, fast_forward: bool) -> dict:
    """Runs in a child process on the checkout ``root``; returns the figures."""
    sys.path.insert(0, str(root))
    from sim.config.loader import load_scenario
    from sim.run.runner import simulate

    path, overrides = CASES[case]
    scenario = load_scenario(root / path, overrides)
    # (a checkout from before fast-forward existed steps one at a time, and says nothing)
    options = {"fast_forward": fast_forward} if fast_forward is False else {}
    cpu, wall = time.process_time(), time.perf_counter()
    result = simulate(scenario, **options)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {
        "cpu_s": cpu,
        "wall_s": wall,
        "steps": result.num_steps,
        "forwarded": getattr(result, "fast_forwarded_steps", 0),
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def child(root: Path, case: str, fast_forward: bool) -> dict:
    mode = "fast-forward" if fast_forward else "step-by-step"
    command = [sys.executable, __file__, "--root", str(root), "--child", case, mode]
    return child_figures(command, f"the {mode} run of {case}")


def child_figures(command: list[str], what: str) -> dict:
    """Run a measuring child process; its figures are the JSON of its last line, with
    the 1-minute load average after it. A failed child ends this script with the
    child's own last line (a bad override, a moved target), not a traceback."""
    out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if out.returncode:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        sys.exit(f"{Path(sys.argv[0]).name}: {what} failed: {last}")
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    figures["load"] = os.getloadavg()[0]
    return figures


def median_of(runs: list[dict]) -> dict:
    row = {key: statistics.median(r[key] for r in runs) for key in ("cpu_s", "wall_s", "load")}
    row.update(steps=runs[0]["steps"], forwarded=runs[0]["forwarded"])
    row["peak_mib"] = max(r["peak_mib"] for r in runs)
    return row


def line(case: str, mode: str, r: dict) -> str:
    return (
        f"{case:<14} {mode:<13} {r['cpu_s']:>8.2f} {r['wall_s']:>8.2f} {r['steps']:>10,} "
        f"{r['steps'] / r['cpu_s']:>10,.0f} {r['cpu_s'] / r['steps'] * 1e6:>8.1f} "
        f"{r['forwarded'] / max(r['steps'], 1):>6.0%} {r['peak_mib']:>9,.0f} {r['load']:>5.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", choices=sorted(CASES), default=QUICK)
    parser.add_argument(
        "--modes", choices=("fast-forward", "step-by-step", "both"), default="fast-forward"
    )
    parser.add_argument("--repeats", type=int, default=1, help="median over this many runs")
    parser.add_argument(
        "--root",
        type=Path,
        default=ROOT,
        help="the checkout to measure (default this one; e.g. a `git worktree` of an older "
        "commit, to measure before and after with the same cases)",
    )
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(
            json.dumps(one_run(args.root.resolve(), args.child[0], args.child[1] == "fast-forward"))
        )
        return
    modes = ["fast-forward", "step-by-step"] if args.modes == "both" else [args.modes]
    print(
        f"pagesim simulator speed: {args.root} ({os.cpu_count()} CPUs; medians of {args.repeats})"
    )
    print(
        f"{'case':<14} {'mode':<13} {'CPU s':>8} {'wall s':>8} {'steps':>10} "
        f"{'steps/CPUs':>10} {'us/step':>8} {'ffwd':>6} {'peak MiB':>9} {'load':>5}"
    )
    for case in args.cases:
        runs: dict[str, list[dict]] = {mode: [] for mode in modes}
        for _ in range(args.repeats):  # interleaved, so load drifts hit both modes alike
            for mode in modes:
                runs[mode].append(child(args.root.resolve(), case, mode == "fast-forward"))
        rows = {mode: median_of(found) for mode, found in runs.items()}
        for mode, row in rows.items():
            print(line(case, mode, row), flush=True)
        if len(rows) == 2:
            ratio = rows["step-by-step"]["cpu_s"] / rows["fast-forward"]["cpu_s"]
            print(f"{case:<14} {'ratio':<13} {ratio:>7.2f}x CPU (step-by-step / fast-forward)")
    print("load: 1-minute load average after each run; ffwd: steps applied in decode stretches")


if __name__ == "__main__":
    main()
