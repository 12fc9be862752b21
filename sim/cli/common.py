"""What every ``pagesim`` command shares: one-line usage errors (exit code 2, never a
traceback for a user mistake), the scenario options, signals and closed pipes.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from pathlib import Path

from sim.inputs.user_errors import UserError

USER_ERROR = 2


class UsageError(UserError):
    """A mistake of the user's, reported as one line with exit code 2."""


#: What ``pip install -e '.[extra]'`` brings, for the one-line hint when it is missing.
EXTRAS = {
    "torch": "real",
    "triton": "real",
    "ray": "cluster",
    "aiohttp": "serve",
    "prometheus_client": "serve",
    "hypothesis": "test",
}


def require(module: str, command: str) -> None:
    """Raise UsageError naming the extra to install if ``module`` cannot be imported."""
    try:
        importlib.import_module(module)
    except ImportError:
        extra = EXTRAS.get(module, module)
        raise UsageError(
            f"pagesim {command} needs {module}, which is not installed: "
            f"pip install -e '.[{extra}]' (or make test, which installs every extra)"
        ) from None


def output_file(path: str | Path, option: str) -> Path:
    """``path`` as a file a command will write, checked before any work (not a folder,
    its nearest existing parent a writable folder: sim.run.folders.check_file_target);
    UsageError naming ``option`` and the path otherwise."""
    from sim.run.folders import check_file_target

    try:
        check_file_target(Path(path))
    except ValueError as err:
        raise UsageError(f"{option}: {err}") from None
    return Path(path)


def output_folder(path: str | Path, option: str, *, force: bool) -> Path:
    """``path`` as a folder a command writes files into (created if missing), checked
    like :func:`output_file`; one that holds files already is refused unless ``force``
    (the rule ``pagesim run`` keeps: nothing is replaced unasked)."""
    from sim.run.folders import FolderExists, check_target

    try:
        check_target(Path(path), force=force)
    except (FolderExists, ValueError) as err:  # (FolderExists says to pass --force)
        raise UsageError(f"{option}: {err}") from None
    return Path(path)


def out_folder(args, marker: str, field: str, settings) -> Path:
    """``--out`` of ``pagesim sweep`` / ``capacity``, checked before any run: new or empty;
    an earlier run of the same command with the same ``settings`` (``field`` of its
    ``marker`` file) is resumed, its finished runs kept; one with other settings is
    replaced only with ``--force`` (the rule of every command: nothing replaced unasked)."""
    import shutil

    from sim.sweep.store import check_out, earlier_settings, same_settings

    out = Path(args.out)
    try:
        check_out(out, marker)
    except ValueError as err:
        raise UsageError(f"--out: {err}") from None
    if not (out / marker).is_file():
        return out
    if same_settings(earlier_settings(out, marker, field), settings):
        print(
            f"--out {out}: the same {args.command} as before; its finished runs are kept",
            file=sys.stderr,
        )
        return out
    if not args.force:
        raise UsageError(
            f"--out: {out} holds a {args.command} of other settings; pass --force to "
            "replace it or --out another folder"
        )
    shutil.rmtree(out)
    return out


def executor_for(args):
    """The executor ``--jobs`` / ``--ray`` ask for (``pagesim sweep`` / ``capacity``)."""
    from sim.sweep.executors import make_executor

    return make_executor(args.jobs, args.ray)


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
    parser.add_argument("--seed", type=seed, help="override simulation.seed")


def int_type(low: int, high: int | None = None, *, what: str):
    """An argparse type: an integer in ``low..high`` (no upper bound if None), else
    "expected WHAT, got ..."."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value

    return parse


#: ``--seed``: numpy's generators take no negative seed.
seed = int_type(0, what="a non-negative integer")
positive_int = int_type(1, what="a positive integer")
#: ``--jobs``: worker processes (more than this is a typo, and each costs memory).
jobs = int_type(1, 1024, what="a number of workers 1-1024")
#: ``--seeds``: as many as a sweep may have points (sim.sweep.spec.MAX_POINTS).
seed_count = int_type(1, 100_000, what="a number of seeds 1-100,000")
port = int_type(0, 65535, what="a port number 0-65535")  # 0: any free one


class Terminated(BaseException):
    """SIGTERM, raised where the process is so that clean-up runs (like Ctrl-C)."""


def _terminate(signum, frame):
    raise Terminated


def dispatch(args) -> int:
    """Run the parsed command; a user mistake becomes one line and exit code 2; Ctrl-C
    and SIGTERM one line and 130 / 143 (results are written all at once, so nothing
    half-written is left); a closed pipe (``| head``) ends quietly."""
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        return args.handler(args)
    except UserError as err:  # UsageError, ScenarioError, RecordError, FolderExists, ...
        print(f"pagesim: error: {err}", file=sys.stderr)
        return USER_ERROR
    except KeyboardInterrupt:
        print("pagesim: interrupted; no partial results were written", file=sys.stderr)
        return 130
    except Terminated:
        print("pagesim: terminated; no partial results were written", file=sys.stderr)
        return 143
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, and keep Python's own flush
        # at exit from hitting the closed pipe again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)


def load(path: str, overrides=(), seed=None):
    """The scenario at ``path``; UsageError (one line) if it is not a valid one."""
    from sim.config.errors import ScenarioError
    from sim.config.loader import load_scenario

    try:
        return load_scenario(path, overrides, seed=seed)
    except ScenarioError as err:
        raise UsageError(str(err)) from None


def load_calibration(path: str, scenario):
    """``--calibration``, checked to fit the scenario's model; UsageError if not."""
    from sim.costs.calibrated import CalibrationError, shape_mismatch
    from sim.costs.calibrated import load as load_fitted

    try:
        fitted = load_fitted(path)
    except CalibrationError as err:
        raise UsageError(str(err)) from None
    problem = shape_mismatch(fitted, scenario.model)
    if problem:
        raise UsageError(f"{path}: {problem}")
    return fitted
