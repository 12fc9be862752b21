"""``pagesim compare RUN...``: reads each run folder's summary.json and scenario.json
(and, for ``--html``, its requests.csv and steps.csv) and prints the side by side of
sim.output.compare in the chosen format."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np

from sim.cli.common import UsageError

#: requests.csv columns the compare page plots.
_REQUEST_COLUMNS = (
    "arrival_s",
    "first_scheduled_s",
    "finish_s",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "output_tokens",
)


def cmd_compare(args) -> int:
    from sim.output.compare import format_compare, run_labels
    from sim.output.yardstick import hit_rate_vs_belady

    labels = run_labels(args.runs)
    paths = dict(zip(labels, args.runs))
    summaries, scenarios = {}, {}
    for label, run_dir in paths.items():
        summaries[label] = read_json(Path(run_dir) / "summary.json", run_dir)
        scenario = Path(run_dir) / "scenario.json"
        scenarios[label] = read_json(scenario, run_dir) if scenario.is_file() else None
    known = {label: s for label, s in scenarios.items() if s is not None}
    belady = hit_rate_vs_belady(summaries, known)
    fmt = getattr(args, "format", "table")
    text = format_compare(summaries, scenarios, belady=belady, paths=paths, fmt=fmt)
    if getattr(args, "html", None):  # first: a reader that stops early (| head) keeps it
        page = _write_page(args.html, paths, summaries, scenarios, belady, args.plotly_js)
        print(f"wrote {page}", file=sys.stderr)
    print(text)
    return 0


def _write_page(target, paths, summaries, scenarios, belady, plotly_js) -> Path:
    from sim.output.compare_page import RunSeries, write_compare_page

    runs = [
        RunSeries(
            label,
            summaries[label],
            read_csv_columns(Path(run_dir) / "requests.csv", _REQUEST_COLUMNS, run_dir),
            read_steps(Path(run_dir) / "steps.csv", run_dir),
        )
        for label, run_dir in paths.items()
    ]
    path = Path(target)
    if path.is_dir():
        raise UsageError(f"{path}: is a folder; --html wants a file name (e.g. compare.html)")
    try:
        return write_compare_page(path, runs, scenarios, belady=belady, plotly_js=plotly_js)
    except OSError as err:
        raise UsageError(f"{path}: cannot write the page: {err.strerror}") from None


def read_json(path: Path, run_dir: str):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"{path}: not found (is {run_dir} a pagesim run directory?)") from None
    except json.JSONDecodeError as err:
        raise UsageError(f"{path}: line {err.lineno}: not valid JSON") from None


def read_csv_columns(path: Path, columns, run_dir: str) -> dict[str, np.ndarray]:
    """The named columns of one of a run's CSV files as float arrays."""
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            header = next(reader, [])
            missing = [c for c in columns if c not in header]
            if missing:
                raise UsageError(f"{path}: no column {missing[0]!r} (not a pagesim run file?)")
            index = [header.index(c) for c in columns]
            cells = [[row[i] for i in index] for row in reader]
    except FileNotFoundError:
        raise UsageError(f"{path}: not found (--html needs {run_dir}'s CSV files)") from None
    try:
        values = np.array(cells, dtype=np.float64).reshape(-1, len(columns))
    except ValueError:
        raise UsageError(f"{path}: a value is not a number") from None
    return {name: values[:, j] for j, name in enumerate(columns)}


def read_steps(path: Path, run_dir: str) -> np.ndarray:
    """steps.csv as the step log's rows (sim.output.steplog.STEP_COLUMNS order; the
    named ``limit`` column, which the page does not plot, as 0)."""
    from sim.output.steplog import STEP_COLUMNS

    numeric = [c for c in STEP_COLUMNS if c != "limit"]
    columns = read_csv_columns(path, numeric, run_dir)
    rows = np.zeros((len(columns[numeric[0]]), len(STEP_COLUMNS)))
    for j, name in enumerate(STEP_COLUMNS):
        if name in columns:
            rows[:, j] = columns[name]
    return rows
