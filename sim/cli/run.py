"""``pagesim run``, and the entry to ``pagesim compare`` (in sim.cli.compare)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sim.cli.common import UsageError, load


def cmd_run(args) -> int:
    from sim.config.errors import ScenarioError
    from sim.engine.policy_guard import PolicyFailure, StuckRun
    from sim.run.folders import FolderExists, check_target, default_run_dir

    scenario = load(args.scenario, args.overrides, seed=args.seed)
    out = Path(args.out) if args.out else default_run_dir(scenario)
    try:  # before the run: never lose a finished run, nor a simulation, to the folder
        check_target(out, force=args.force)
    except (FolderExists, ValueError) as err:
        raise UsageError(str(err)) from None
    from sim.run.runner import simulate, write_run  # the simulator, once the input is good

    try:
        result = simulate(
            scenario,
            progress=not args.quiet,
            metric_percentiles=args.metric_percentiles,
            fast_forward=not args.step_by_step,
        )
    except ScenarioError as err:  # problems only visible once the run is built
        raise UsageError(str(err)) from None
    except (PolicyFailure, StuckRun) as err:  # a plug-in broke its contract: no results
        raise UsageError(f"{args.scenario}: {err}; nothing was written") from None
    write_run(
        result,
        scenario,
        out,
        html=not args.no_report,
        trace=args.export_trace,
        force=args.force,
        argv=args.argv,
        progress=not args.quiet,
    )
    for warning in result.summary["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    if not args.quiet:
        from sim.output.tables import format_summary_table

        print(format_summary_table(result.summary))
        print(
            f"\n{result.num_steps:,} steps in {result.wall_s:.2f} s wall "
            f"({len(result.outcomes) / max(result.wall_s, 1e-9):,.0f} requests/s)"
        )
    print(f"wrote {out}/" + ("report.html" if not args.no_report else "summary.json"))
    if args.export_trace:
        print(f"wrote {next(out.glob('trace.json*'))}")
    return 0


def metric_percentiles(text: str) -> tuple[float, ...]:
    """``--metric-percentiles 50,90,99`` (each in [0, 100])."""
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 50,90,99, got {text!r}") from None
    if not values or any(not 0 <= v <= 100 for v in values):
        raise argparse.ArgumentTypeError(f"percentiles must be in [0, 100], got {text!r}")
    return values


def trace_format(text: str) -> str:
    """``--export-trace[=auto|json|gzip]``."""
    if text not in ("auto", "json", "gzip"):
        raise argparse.ArgumentTypeError(
            f"expected json, gzip or auto, got {text!r} "
            "(write --export-trace after the scenario, or --export-trace=json)"
        )
    return text


def cmd_compare(args) -> int:
    """``pagesim compare`` (sim.cli.compare)."""
    from sim.cli.compare import cmd_compare as compare

    return compare(args)
