"""pagesim against the recorded runs of real engines (validation/recorded/runs/): each
run replayed with its own scenario (same arrivals, lengths, engine limits, model, GPU)
and compared figure by figure, stage by stage.

    .venv/bin/python bench/recorded_runs.py                       # uncalibrated
    .venv/bin/python bench/recorded_runs.py --calibrated loo      # + leave-one-out fits
    .venv/bin/python bench/recorded_runs.py --runs h100-llama-2-7b-general --detail

Per run it prints the relative error (simulated - recorded) / recorded of TTFT, TPOT and
E2E (mean, p50, p90, p99) and of throughput, the run's MAPE over every figure of every
stage, and the figure that is furthest off. It ends with the median and the worst run,
per GPU and over all dense runs. ``--calibrated loo`` fits, for each run, the physical
efficiencies to the other runs of the same GPU (sim.recorded.calibrate) and replays the
run with them. ``--set KEY=VALUE`` overrides a scenario field of every run (a test of one
constant). Nothing here is asserted: it prints figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.config.loader import load_scenario  # noqa: E402
from sim.output.requests import request_table  # noqa: E402
from sim.recorded.stages import (  # noqa: E402
    CLIENT_OVERHEAD_S,
    compare,
    figures,
    from_table,
    read_requests_csv,
    recorded_stages,
    series_means,
    stage_windows,
)
from sim.run.progress import map_with_progress  # noqa: E402
from sim.run.runner import simulate  # noqa: E402

CORPUS = ROOT / "validation" / "recorded" / "runs"
HEADLINE = (
    "ttft_s.mean",
    "ttft_s.p99",
    "tpot_s.mean",
    "tpot_s.p99",
    "e2e_s.mean",
    "e2e_s.p99",
    "throughput_rps",
)


def recorded_figures(run: Path, summary: dict):
    stages = recorded_stages(summary)
    if stages:
        return stages
    return figures(read_requests_csv(run / "requests.csv"), [(-1, -float("inf"), float("inf"))])


def replay(
    run: Path,
    overrides: tuple[str, ...] = (),
    calibration: Path | None = None,
    client_shift: float = CLIENT_OVERHEAD_S,
) -> dict:
    """Simulate one corpus run and compare it with its recording (a picklable result);
    ``calibration``: a calibration file the run's scenario takes."""
    summary = json.loads((run / "summary.json").read_text())
    settings = list(overrides)
    if calibration is not None:
        settings.append(f"calibration={calibration}")
    scenario = load_scenario(str(run / "scenario.yaml"), settings)
    cpu = time.process_time()
    result = simulate(scenario)
    cpu = time.process_time() - cpu
    block = summary.get("recorded") or {}
    shift = client_shift if block.get("clock", "client") == "client" else 0.0
    simulated = figures(
        from_table(request_table(result.outcomes)),
        stage_windows(scenario),
        timeout_s=block.get("request_timeout_s"),
        shift_s=shift,
    )
    if len(simulated) > 1 and not recorded_stages(summary):
        simulated = simulated[:1]
    comparison = compare(recorded_figures(run, summary), simulated)
    series = block.get("series")
    means = series_means(result.steps, series) if series else None
    return {
        "run": run.name,
        "gpu": scenario.hardware.name,
        "model": scenario.model.name,
        "dense": scenario.model.moe is None,
        "tp": scenario.tensor_parallel,
        "cpu_s": cpu,
        "steps": result.num_steps,
        "series": means,
        **comparison,
    }


def _headline(result: dict) -> dict[str, float]:
    """Each headline figure's error, averaged over the run's stages."""
    out = {}
    for name in HEADLINE:
        values = [s["rows"][name][2] for s in result["stages"] if name in s["rows"]]
        if values:
            out[name] = statistics.fmean(values)
    return out


def _worst(result: dict) -> str:
    rows = [
        (abs(r[2]), f"stage {s['index']} {name} {100 * r[2]:+.0f}%")
        for s in result["stages"]
        for name, r in s["rows"].items()
    ]
    return max(rows)[1] if rows else "-"


def print_table(results: list[dict], label: str) -> None:
    print(f"\n{label}")
    head = "".join(
        f"{name.replace('_s', '').replace('throughput_rps', 'req/s'):>11}" for name in HEADLINE
    )
    print(f"{'run':<32}{'gpu':<20}{'tp':>3}{'MAPE':>8}{head}   furthest off")
    for r in results:
        line = _headline(r)
        cells = "".join(
            f"{'-' if name not in line else f'{100 * line[name]:+.1f}%':>11}" for name in HEADLINE
        )
        mape = "-" if r["mape"] is None else f"{100 * r['mape']:.1f}%"
        print(f"{r['run']:<32}{r['gpu']:<20}{r['tp']:>3}{mape:>8}{cells}   {_worst(r)}")
        if r.get("note"):
            print(f"{'':<4}{r['note']}")
    scored = [r for r in results if r["mape"] is not None]
    for gpu in sorted({r["gpu"] for r in scored}) + ["all"]:
        _median_line(gpu, [r for r in scored if gpu in ("all", r["gpu"])])
    for gpu in sorted({r["gpu"] for r in scored}) + ["all"]:  # models without experts
        group = [r for r in scored if gpu in ("all", r["gpu"])]
        dense = [r for r in group if r["dense"]]
        if dense and len(dense) < len(group):  # (a line only where it differs from above)
            _median_line(f"dense {gpu}", dense)


def _median_line(label: str, group: list[dict]) -> None:
    worst = max(group, key=lambda r: r["mape"])
    median = statistics.median(r["mape"] for r in group)
    print(
        f"  {label:<26} runs {len(group):>2}  median MAPE {100 * median:5.1f}%  "
        f"worst {100 * worst['mape']:5.1f}% ({worst['run']})"
    )


def print_series(results: list[dict]) -> None:
    """Step level, where the engine logged a time series: time-averaged running and
    waiting requests and generated tokens a second, recorded against simulated."""
    rows = [r for r in results if r.get("series")]
    if not rows:
        return
    print("\nstep level (the engine's own time series, time-averaged): recorded / simulated")
    for r in rows:
        cells = "  ".join(f"{name} {a:,.1f} / {b:,.1f}" for name, (a, b) in r["series"].items())
        print(f"  {r['run']:<32}{cells}")


def print_detail(result: dict) -> None:
    print(
        f"\n{result['run']} ({result['gpu']}, {result['model']}, tp {result['tp']}): "
        f"{result['steps']:,} steps in {result['cpu_s']:.1f} s CPU"
    )
    for stage in result["stages"]:
        print(f"  stage {stage['index']}")
        for name, (real, model, error) in stage["rows"].items():
            unit = 1.0 if name == "throughput_rps" else 1e3
            print(f"    {name:<16}{real * unit:>12.2f}{model * unit:>12.2f}{100 * error:>+9.1f}%")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="*", help="run ids (default: every run)")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--calibrated", choices=("loo",), help="also leave-one-out calibrated")
    parser.add_argument("--detail", action="store_true", help="every figure of every stage")
    parser.add_argument(
        "--fit-evaluations",
        type=int,
        default=16,
        help="--calibrated: simulations each fit may spend (default 16)",
    )
    parser.add_argument(
        "--fit-stage-s",
        type=float,
        default=60.0,
        help="--calibrated: seconds of each stage simulated while fitting",
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    runs = sorted(p for p in CORPUS.iterdir() if (p / "scenario.yaml").is_file())
    if args.runs:
        runs = [p for p in runs if p.name in set(args.runs)]
    load = os.getloadavg()[0]
    wall = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        overrides = [tuple(args.overrides)] * len(runs)
        results = map_with_progress(pool, replay, runs, overrides, label="replaying", unit="run")
    simulated_cpu = sum(r["cpu_s"] for r in results)
    print(
        f"{len(runs)} recorded runs replayed: simulate CPU {simulated_cpu:.0f} s, wall "
        f"{time.perf_counter() - wall:.0f} s, load average {load:.2f} at the start"
    )
    print_table(results, "uncalibrated (datasheets and published measurements only)")
    print_series(results)
    if args.detail:
        for result in results:
            print_detail(result)
    if args.calibrated == "loo":
        from sim.recorded.calibrate import leave_one_out

        calibrated = leave_one_out(
            runs,
            replay,
            jobs=args.jobs,
            max_evaluations=args.fit_evaluations,
            stage_s=args.fit_stage_s,
        )
        print_table(calibrated, "leave-one-out calibrated (fitted on the other runs of the GPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
