"""``pagesim sweep`` and ``pagesim capacity`` (sim.sweep): many runs of one scenario, on
a local process pool (``--jobs``) or a Ray cluster (``--ray``)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import yaml

from sim.cli.common import (
    UsageError,
    add_scenario_options,
    executor_for,
    jobs,
    out_folder,
    seed_count,
)

__all__ = ["add_commands"]


def _axis(option: str):
    def parse(text: str):
        from sim.sweep.spec import parse_axis

        try:
            return parse_axis(text, option)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return parse


def _add_executor_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        required=True,
        help="output folder (one holding the same command's earlier run resumes it)",
    )
    parser.add_argument(
        "--force", action="store_true", help="replace an --out that holds other settings' run"
    )
    parser.add_argument(
        "--jobs",
        type=jobs,
        default=None,
        metavar="N",
        help=f"worker processes of the local pool (default: the cores, {os.cpu_count()})",
    )
    parser.add_argument(
        "--ray",
        nargs="?",
        const="local",
        default=None,
        metavar="ADDRESS",
        help="run the points as Ray tasks: on a fresh local Ray (no ADDRESS), or on an "
        "existing cluster (auto, HOST:PORT or ray://HOST:PORT); needs the cluster extra",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress or table")


def add_commands(sub) -> None:
    sweep = sub.add_parser(
        "sweep", help="run a scenario over a grid of settings and seeds (resumable)"
    )
    sweep.add_argument("file", help="a sweep file (YAML with a base:), or a base scenario")
    sweep.add_argument(
        "--grid",
        action="append",
        default=[],
        type=_axis("--grid"),
        metavar="KEY=V1,V2",
        help="an axis: every value with every other axis's",
    )
    sweep.add_argument(
        "--zip",
        action="append",
        default=[],
        type=_axis("--zip"),
        metavar="KEY=V1,V2",
        help="axes that vary together (equal lengths)",
    )
    sweep.add_argument("--seeds", type=seed_count, metavar="N", help="seeds per configuration")
    sweep.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="set a field on every point (repeatable)",
    )
    sweep.add_argument(
        "--no-report",
        action="store_true",
        help="no report.html in each run folder (sweep.html is still written)",
    )
    _add_executor_options(sweep)
    sweep.set_defaults(handler=cmd_sweep)

    capacity = sub.add_parser(
        "capacity", help="the highest arrival rate that meets an SLO, per configuration"
    )
    capacity.add_argument("scenario", help="scenario YAML file")
    capacity.add_argument(
        "--slo",
        action="append",
        default=[],
        metavar="METRIC=LIMIT",
        help="e.g. ttft.p99=2s, tpot.p99=100ms, goodput=90%% (default: the scenario's slo: "
        "TTFT p99 <= slo.ttft_s and TPOT p99 <= slo.tpot_s)",
    )
    capacity.add_argument(
        "--vary",
        action="append",
        default=[],
        type=_axis("--vary"),
        metavar="KEY=V1,V2",
        help="configurations: every combination",
    )
    capacity.add_argument(
        "--tolerance",
        type=_fraction,
        default=0.02,
        metavar="F",
        help="stop when the bracket is within this share of the rate (default 0.02)",
    )
    capacity.add_argument(
        "--price",
        action="append",
        default=[],
        metavar="HARDWARE=USD",
        help="USD per GPU-hour for a hardware name (adds or replaces a list price)",
    )
    capacity.add_argument(
        "--reports", action="store_true", help="also write report.html in each probe's run folder"
    )
    add_scenario_options(capacity)
    _add_executor_options(capacity)
    capacity.set_defaults(handler=cmd_capacity)


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {value:g}")
    return value


def _set_values(assignments) -> dict:
    values = {}
    for text in assignments:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set {text}: expected KEY.PATH=VALUE")
        try:
            values[key.strip()] = yaml.safe_load(value) if value.strip() else None
        except yaml.YAMLError:
            raise UsageError(f"--set {key}: cannot parse value {value!r}") from None
    return values


def cmd_sweep(args) -> int:
    from sim.config.errors import ScenarioError
    from sim.sweep.driver import SWEEP_JSON, resolve_points, run_sweep
    from sim.sweep.executors import ExecutorError
    from sim.sweep.spec import is_sweep_file, read_sweep_file, sweep_from_scenario

    extra = {
        "grid": dict(args.grid),
        "zip": dict(args.zip),
        "seeds": args.seeds,
        "set": _set_values(args.overrides),
    }
    path = Path(args.file)
    try:
        if is_sweep_file(path):
            sweep = read_sweep_file(path, extra)
        else:
            sweep = sweep_from_scenario(path, extra)
        points = resolve_points(sweep)
    except ScenarioError as err:
        raise UsageError(str(err)) from None
    out = out_folder(args, SWEEP_JSON, "sweep", sweep.resolved())
    try:
        with executor_for(args) as executor:
            done = run_sweep(
                sweep,
                points,
                out,
                executor,
                html=not args.no_report,
                progress=not args.quiet,
                argv=args.argv,
            )
    except ExecutorError as err:
        raise UsageError(str(err)) from None
    if not args.quiet:
        from sim.sweep.tables import sweep_table

        print(sweep_table(out))
    print(
        f"{done.points} points ({done.ok} ok, {done.failed} failed, {done.runs} runs, "
        f"{done.cpu_s:.2f} CPU s in workers): wrote {out}/points.csv and {out}/sweep.html"
    )
    return 1 if done.failed else 0


def cmd_capacity(args) -> int:
    from sim.cli.capacity import run_capacity_command

    return run_capacity_command(args)
