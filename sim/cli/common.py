"""What every ``pagesim`` command shares: one-line usage errors (exit code 2, never a
traceback for a user mistake), the scenario options, output folders.
"""

from __future__ import annotations

import argparse
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
