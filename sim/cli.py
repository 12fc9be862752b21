"""The `pagesim` command line.

A user mistake (bad scenario, bad file, bad option) ends in one line on stderr and exit
code 2, never a traceback. Internal errors (bugs) still raise loudly.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

USER_ERROR = 2


class UsageError(Exception):
    """A mistake of the user's, reported as one line with exit code 2."""


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own errors already exit 2; keep it one line
        self.exit(USER_ERROR, f"pagesim: error: {message}\n")


def add_scenario_options(parser: argparse.ArgumentParser) -> None:
    """``--set`` and ``--seed``, for every command that loads a scenario."""
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="override a scenario field (repeatable)",
    )
    parser.add_argument("--seed", type=int, help="override simulation.seed")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="pagesim", description="Simulate LLM serving on a paged KV cache.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    run = sub.add_parser("run", help="run a scenario and write CSVs, summary and report")
    run.add_argument("scenario", help="scenario YAML file")
    run.add_argument("--out", help="output directory (default: runs/<scenario name>)")
    add_scenario_options(run)
    run.add_argument("--no-report", action="store_true", help="skip the HTML report")
    run.add_argument("--quiet", action="store_true", help="no progress bar or table")
    run.set_defaults(handler=cmd_run)

    compare = sub.add_parser("compare", help="headline metrics of several runs side by side")
    compare.add_argument("runs", nargs="+", help="run directories (each with summary.json)")
    compare.set_defaults(handler=cmd_compare)

    from sim.cli_validation import add_commands  # here: it imports this module's helpers

    add_commands(sub)
    return parser


def cmd_run(args) -> int:
    from sim.runner import simulate, write_run
    from sim.scenario import ScenarioError, load_scenario

    try:
        scenario = load_scenario(args.scenario, args.overrides, seed=args.seed)
    except ScenarioError as err:
        raise UsageError(str(err)) from None
    out = Path(args.out) if args.out else Path("runs") / scenario.name
    created = prepare_output_dir(out)  # before the run: never lose a finished run to it
    try:
        result = simulate(scenario, progress=not args.quiet)
    except ScenarioError as err:  # problems only visible once the run is built
        if created:
            out.rmdir()
        raise UsageError(str(err)) from None
    write_run(result, scenario, out, html=not args.no_report)
    if not args.quiet:
        from sim.metrics import format_summary_table

        print(format_summary_table(result.summary))
        print(
            f"\n{result.num_steps:,} steps in {result.wall_s:.2f} s wall "
            f"({len(result.requests) / max(result.wall_s, 1e-9):,.0f} requests/s); "
            f"wrote {out}/" + ("report.html" if not args.no_report else "summary.json")
        )
    return 0


def prepare_output_dir(out: Path) -> bool:
    """Create ``out`` if needed and check it is writable; returns whether it was created.
    Raises UsageError (one line) otherwise."""
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"{out}: cannot create the output directory: {err.strerror}") from None
    if not os.access(out, os.W_OK):
        raise UsageError(f"{out}: the output directory is not writable")
    return created


def cmd_compare(args) -> int:
    from sim.metrics import compare_table

    summaries = {}
    for run_dir in args.runs:
        path = Path(run_dir) / "summary.json"
        try:
            summaries[Path(run_dir).name or run_dir] = json.loads(path.read_text())
        except FileNotFoundError:
            raise UsageError(f"{path}: not found (is {run_dir} a pagesim run directory?)") from None
        except json.JSONDecodeError as err:
            raise UsageError(f"{path}: line {err.lineno}: not valid JSON") from None
    print(compare_table(summaries))
    return 0


def main(argv: list[str] | None = None) -> int:
    return dispatch(build_parser().parse_args(argv))


def dispatch(args) -> int:
    """Run the parsed command; a user mistake becomes one line and exit code 2."""
    try:
        return args.handler(args)
    except UsageError as err:
        print(f"pagesim: error: {err}", file=sys.stderr)
        return USER_ERROR
    except KeyboardInterrupt:
        print("pagesim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
