"""``pagesim compare RUN...``: reads each run folder's summary.json and scenario.json
(and, for ``--html``, its requests.csv and steps.csv) and prints the side by side of
sim.output.compare in the chosen format. Every file it reads is checked (a folder, not
UTF-8, not JSON or CSV, a field of the wrong type: one line naming the file and field or
line), and the --html page's targets before anything is read."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np

from sim.cli.common import UsageError, output_file

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

    html = getattr(args, "html", None)
    if html:  # before reading anything: a page that cannot be written fails first
        output_file(html, "--html")
        js = plotly_target(html, args.plotly_js)
        if js is not None:
            output_file(js, "--plotly-js")
    labels = run_labels(args.runs)
    paths = dict(zip(labels, args.runs))
    summaries, scenarios = {}, {}
    for label, run_dir in paths.items():
        summaries[label] = read_summary(Path(run_dir) / "summary.json", run_dir)
        scenario = Path(run_dir) / "scenario.json"
        scenarios[label] = read_scenario(scenario, run_dir) if scenario.exists() else None
    known = {label: s for label, s in scenarios.items() if s is not None}
    belady = hit_rate_vs_belady(summaries, known)
    fmt = getattr(args, "format", "table")
    text = format_compare(summaries, scenarios, belady=belady, paths=paths, fmt=fmt)
    if html:  # first: a reader that stops early (| head) keeps it
        page = _write_page(html, paths, summaries, scenarios, belady, args.plotly_js)
        print(f"wrote {page}", file=sys.stderr)
    print(text)
    return 0


def plotly_target(page: str, plotly_js: str | None) -> Path | None:
    """The file plotly.js goes to for a page at ``page`` (sim.output.page's rule: a
    folder gets plotly.min.js in it; None for a URL)."""
    from sim.output.page import PLOTLY_JS

    if plotly_js and "://" in plotly_js:
        return None
    target = Path(plotly_js) if plotly_js else Path(page).parent / PLOTLY_JS
    return target / PLOTLY_JS if target.is_dir() else target


def _write_page(target, paths, summaries, scenarios, belady, plotly_js) -> Path:
    from sim.output.compare_page import RunSeries, write_compare_page
    from sim.run.folders import atomic_file

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
    try:
        with atomic_file(path) as partial:
            write_compare_page(partial, runs, scenarios, belady=belady, plotly_js=plotly_js)
    except (OSError, ValueError) as err:
        reason = err.strerror if isinstance(err, OSError) else str(err)
        raise UsageError(f"{path}: cannot write the page: {reason}") from None
    return path


def read_json(path: Path, run_dir: str, *, finite: bool = True):
    """A run's JSON file; UsageError (one line naming it) if it is missing, unreadable,
    not UTF-8 or not JSON (NaN and infinities too, with ``finite``)."""
    from sim.inputs.textfile import parse_json, read_text

    run = Path(run_dir)
    if run.exists() and not run.is_dir():
        raise UsageError(f"{run_dir}: not a folder (compare reads run folders)")
    if not path.exists() and not path.is_symlink():
        raise UsageError(f"{path}: not found (is {run_dir} a pagesim run directory?)")
    text = read_text(path, UsageError)
    try:
        return parse_json(text, finite=finite)
    except json.JSONDecodeError as err:
        raise UsageError(f"{path}: line {err.lineno}: not valid JSON") from None
    except ValueError as err:
        raise UsageError(f"{path}: not readable JSON: {err}") from None


def read_summary(path: Path, run_dir: str) -> dict:
    """summary.json, checked field by field for what compare shows."""
    from sim.output.compare import summary_problem

    summary = read_json(path, run_dir)
    problem = summary_problem(summary)
    if problem:
        raise UsageError(f"{path}: {problem}")
    return summary


def read_scenario(path: Path, run_dir: str) -> dict:
    """scenario.json (a scenario may hold .inf, which json writes as Infinity)."""
    from sim.output.compare import scenario_problem

    scenario = read_json(path, run_dir, finite=False)
    problem = scenario_problem(scenario)
    if problem:
        raise UsageError(f"{path}: {problem}")
    return scenario


def read_csv_columns(path: Path, columns, run_dir: str, optional=()) -> dict[str, np.ndarray]:
    """The named columns of one of a run's CSV files as float arrays; UsageError (one
    line naming the file, and the line) if it is missing, unreadable, not UTF-8, not
    CSV, lacks a column (one of ``optional`` absent is all zeros), has a short row or a
    cell that is not a number."""
    from sim.inputs.textfile import reading

    if not path.exists() and not path.is_symlink():
        raise UsageError(f"{path}: not found (--html needs {run_dir}'s CSV files)")
    with reading(path, UsageError), path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        try:
            header = next(reader, [])
            absent = [c for c in optional if c not in header]
            columns = [c for c in columns if c not in absent]
            missing = [c for c in columns if c not in header]
            if missing:
                raise UsageError(f"{path}: no column {missing[0]!r} (not a pagesim run file?)")
            index = [header.index(c) for c in columns]
            cells, lines = [], []
            for row in reader:
                if len(row) < len(header):
                    raise UsageError(
                        f"{path}:{reader.line_num}: {len(row)} fields, expected {len(header)}"
                    )
                cells.append([row[i] for i in index])
                lines.append(reader.line_num)
        except csv.Error as err:
            raise UsageError(f"{path}:{reader.line_num + 1}: not CSV: {err}") from None
    try:
        values = np.array(cells, dtype=np.float64).reshape(-1, len(columns))
    except ValueError:
        raise UsageError(_first_non_number(path, cells, lines, columns)) from None
    found = {name: values[:, j] for j, name in enumerate(columns)}
    return found | {name: np.zeros(values.shape[0]) for name in absent}


def _first_non_number(path: Path, cells, lines, columns) -> str:
    for row, line in zip(cells, lines):
        for value, column in zip(row, columns):
            try:
                float(value)
            except ValueError:
                return f"{path}:{line}: {column}: expected a number, got {value[:40]!r}"
    return f"{path}: a value is not a number"


#: steps.csv columns added after run folders were first written: read as 0 when absent.
_ADDED_STEP_COLUMNS = ("evicted_blocks",)


def read_steps(path: Path, run_dir: str) -> np.ndarray:
    """steps.csv as the step log's rows (sim.output.steplog.STEP_COLUMNS order; the
    named ``limit`` column, which the page does not plot, as 0)."""
    from sim.output.steplog import STEP_COLUMNS

    numeric = [c for c in STEP_COLUMNS if c != "limit"]
    columns = read_csv_columns(path, numeric, run_dir, optional=_ADDED_STEP_COLUMNS)
    rows = np.zeros((len(columns[numeric[0]]), len(STEP_COLUMNS)))
    for j, name in enumerate(STEP_COLUMNS):
        if name in columns:
            rows[:, j] = columns[name]
    return rows
