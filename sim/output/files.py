"""Writing a run's requests.csv, steps.csv and summary.json, byte-identical for identical
inputs: fixed column order, shortest round-trip float text, sorted JSON keys, nothing
about the machine or the clock.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sim.engine.records import RequestOutcome
from sim.output.requests import _REQUEST_FLOAT_COLUMNS, REQUEST_COLUMNS, request_table
from sim.output.steplog import _STEP_FLOAT_COLUMNS, _STEP_NAMED_COLUMNS, STEP_COLUMNS, StepLog

# Rows per chunk when writing CSVs: bounds the memory of the string lists (each cell is a
# ~50-byte Python string while its chunk is built: 100,000 rows of steps.csv's 18
# columns held ~100 MiB; 16,384 rows hold ~15 MiB and write as fast).
_CSV_CHUNK_ROWS = 16_384


def write_outputs(
    out_dir: str | Path,
    outcomes: Iterable[RequestOutcome],
    steps: StepLog,
    summary: Mapping[str, Any],
) -> dict[str, Path]:
    """Write requests.csv, steps.csv and summary.json into `out_dir` (created if missing,
    files overwritten). Identical inputs give byte-identical files: fixed column order,
    shortest round-trip float text, sorted JSON keys, nothing about the machine or clock.
    Returns the paths by name. Raises ValueError if the summary holds a non-finite float
    that is not None-able (it never does when it comes from `summarize`)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = request_table(outcomes)
    paths = {name: out / name for name in ("requests.csv", "steps.csv", "summary.json")}
    request_columns = [
        _format_column(table[c], c in _REQUEST_FLOAT_COLUMNS) for c in REQUEST_COLUMNS
    ]
    _write_csv(paths["requests.csv"], REQUEST_COLUMNS, request_columns, len(table["req_id"]))
    step_columns = [_step_column(steps, name) for name in STEP_COLUMNS]
    _write_csv(paths["steps.csv"], STEP_COLUMNS, step_columns, len(steps))
    paths["summary.json"].write_text(summary_json(summary), encoding="utf-8")
    return paths


def write_table(path: str | Path, columns: Mapping[str, np.ndarray]) -> Path:
    """A table of numeric columns as CSV at ``path``, the columns in the mapping's order:
    integer columns as integers, the others as shortest round-trip floats (NaN as
    ``nan``), as requests.csv writes them."""
    path = Path(path)
    names = list(columns)
    rows = len(columns[names[0]]) if names else 0
    formatted = [_format_column(columns[n], columns[n].dtype.kind == "f") for n in names]
    _write_csv(path, names, formatted, rows)
    return path


def summary_json(summary: Mapping[str, Any]) -> str:
    """Canonical JSON text of a summary: sorted keys, NaN/inf as null, repr floats."""
    return json.dumps(_json_ready(summary), sort_keys=True, indent=2, allow_nan=False) + "\n"


def _json_ready(value):
    if isinstance(value, Mapping):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def _format_column(values: np.ndarray, is_float: bool):
    """Column as a lazy sequence of strings (sliced per chunk by `_write_csv`)."""
    if values.dtype == object:
        return [_csv_text(str(v)) for v in values]
    if not is_float and np.all(np.floor(values) == values):
        return _Formatted(values.astype(np.int64, copy=False).__getitem__, int.__repr__)
    # float.__repr__ is the shortest text that reads back to the same double.
    return _Formatted(values.astype(np.float64, copy=False).__getitem__, float.__repr__)


def _step_column(steps: StepLog, name: str):
    """A step log column, read and formatted chunk by chunk: integer columns (typed,
    sim.output.steplog.STEP_DTYPES) as integers, ``limit`` codes by name, times as
    shortest round-trip floats."""
    if name in _STEP_NAMED_COLUMNS:
        to_text = _STEP_NAMED_COLUMNS[name].__getitem__
    else:
        to_text = float.__repr__ if name in _STEP_FLOAT_COLUMNS else int.__repr__
    return _Formatted(lambda rows: steps.column(name, rows.start, rows.stop), to_text)


class _Formatted:
    """Formats a numpy column slice by slice (``read(rows)``: the values of a slice of
    rows), so a 10**6-row CSV never holds every cell as a Python string at once."""

    def __init__(self, read, to_text) -> None:
        self._read, self._to_text = read, to_text

    def __getitem__(self, chunk: slice) -> list[str]:
        return list(map(self._to_text, self._read(chunk).tolist()))


def _csv_text(text: str) -> str:
    if any(ch in text for ch in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text


def _write_csv(path: Path, header: Sequence[str], columns: Sequence, num_rows: int) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as f:
        f.write(",".join(header) + "\n")
        for start in range(0, num_rows, _CSV_CHUNK_ROWS):
            chunk = slice(start, start + _CSV_CHUNK_ROWS)
            f.write("\n".join(map(",".join, zip(*(c[chunk] for c in columns)))) + "\n")
