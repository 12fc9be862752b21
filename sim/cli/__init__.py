"""The `pagesim` command line.

A user mistake (bad scenario, bad file, bad option) ends in one line on stderr and exit
code 2, never a traceback. Internal errors (bugs) still raise loudly.
"""

from __future__ import annotations

import argparse
import sys

from sim.cli import info, live, recorded
from sim.cli.check import add_check_command
from sim.cli.common import OneLineParser, add_scenario_options, dispatch
from sim.cli.run import cmd_compare, cmd_run, metric_percentiles, trace_format
from sim.cli.sweep import add_commands as add_sweep_commands
from sim.cli.validation import add_commands

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="pagesim", description="Simulate LLM serving on a paged KV cache.")
    parser.add_argument("--version", action="version", version=f"pagesim {_version()}")
    sub = parser.add_subparsers(dest="command", parser_class=OneLineParser)

    run = sub.add_parser("run", help="run a scenario and write CSVs, summary and report")
    run.add_argument("scenario", help="scenario YAML file")
    run.add_argument(
        "--out", help="output directory (default: runs/<scenario name>-seed<seed>-<hash>)"
    )
    run.add_argument("--force", action="store_true", help="replace the run already in --out")
    add_scenario_options(run)
    run.add_argument(
        "--metric-percentiles",
        type=metric_percentiles,
        default=(50.0, 90.0, 99.0),
        metavar="P,P,...",
        help="percentiles of summary.json's benchmark block (default 50,90,99)",
    )
    run.add_argument("--no-report", action="store_true", help="skip the HTML report")
    run.add_argument(
        "--export-trace",
        nargs="?",
        const="auto",
        type=trace_format,
        metavar="json|gzip",
        help="also write a Chrome/Perfetto trace: trace.json, or trace.json.gz over 200k "
        "events; =json or =gzip forces one",
    )
    run.add_argument("--quiet", action="store_true", help="no progress bar or table")
    run.add_argument(
        "--step-by-step",
        action="store_true",
        help="simulate every step as its own event, no fast-forward over decode stretches "
        "(same outputs, slower; for checking)",
    )
    run.set_defaults(handler=cmd_run)

    compare = sub.add_parser("compare", help="headline metrics of several runs side by side")
    compare.add_argument("runs", nargs="+", help="run directories (each with summary.json)")
    compare.add_argument(
        "--format",
        choices=("table", "csv", "json", "markdown"),
        default="table",
        help="output format (default: an aligned text table)",
    )
    compare.add_argument(
        "--html",
        metavar="FILE",
        help="also write a page with the runs' latency CDFs and time series overlaid "
        "(reads each run's requests.csv and steps.csv)",
    )
    compare.add_argument(
        "--plotly-js",
        metavar="PATH|URL",
        help="where the --html page loads plotly.js from: a file written if missing, "
        "or a URL (default: plotly.min.js beside the page)",
    )
    compare.set_defaults(handler=cmd_compare)

    add_commands(sub)
    info.add_commands(sub)
    add_check_command(sub)
    live.add_commands(sub)
    recorded.add_commands(sub)
    add_sweep_commands(sub)
    return parser


def _version() -> str:
    from sim.run.folders import _version as installed

    return installed("pagesim") or "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # bare `pagesim`: what it can do, not an error line
        parser.print_help()
        return 2
    args.argv = ["pagesim", *(sys.argv[1:] if argv is None else argv)]  # for metadata.json
    return dispatch(args)


if __name__ == "__main__":
    sys.exit(main())
