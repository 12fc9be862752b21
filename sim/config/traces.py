"""Trace replay: the Azure LLM inference CSV layout and the Mooncake JSONL layout.

Each loader returns a :class:`Trace` of arrival offsets (seconds from the first row),
input and output lengths and, for Mooncake, the ``hash_ids`` of each prompt's 512-token
blocks. A malformed row raises :class:`TraceError` naming ``file:line: column``. Parsed
traces are cached by (path, modification time).
"""

from __future__ import annotations

import csv
import functools
import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np


class TraceError(ValueError):
    """A malformed trace; the message is ``file:line: column: expected ...``."""


class Trace(NamedTuple):
    """A parsed trace, rows in file order (read-only arrays)."""

    arrival_s: np.ndarray  # float64, seconds from the earliest row
    input_len: np.ndarray  # int64
    output_len: np.ndarray  # int64
    hash_ids: tuple[np.ndarray, ...] | None  # per row, int64 (Mooncake only)


def load_trace(path: str | Path, fmt: str) -> Trace:
    """Parse an ``azure-csv`` or ``mooncake-jsonl`` trace (cached by path and mtime).
    Raises TraceError on a bad row, OSError if unreadable."""
    path = str(path)
    return _cached_trace(path, os.stat(path).st_mtime_ns, fmt)


@functools.lru_cache(maxsize=8)
def _cached_trace(path: str, mtime_ns: int, fmt: str) -> Trace:
    if fmt == "azure-csv":
        times, inputs, outputs, hashes = _parse_azure(path)
    elif fmt == "mooncake-jsonl":
        times, inputs, outputs, hashes = _parse_mooncake(path)
    else:
        raise TraceError(f"{path}: unknown trace format {fmt!r}")
    if not times:
        raise TraceError(f"{path}: no rows")
    arrival = np.asarray(times, dtype=np.float64)
    arrival -= arrival.min()
    arrays = [arrival, np.asarray(inputs, np.int64), np.asarray(outputs, np.int64)]
    for array in arrays:
        array.setflags(write=False)
    return Trace(*arrays, hashes)


AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def _parse_azure(path: str):
    times: list[float] = []
    inputs: list[int] = []
    outputs: list[int] = []
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in AZURE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(f"{path}:1: header: expected columns {', '.join(AZURE_COLUMNS)}")
        for row in reader:
            line = reader.line_num
            times.append(_azure_timestamp(path, line, row["TIMESTAMP"]))
            inputs.append(_count(path, line, "ContextTokens", row["ContextTokens"]))
            outputs.append(_count(path, line, "GeneratedTokens", row["GeneratedTokens"]))
    return times, inputs, outputs, None


def _azure_timestamp(path: str, line: int, text: str | None) -> float:
    """Seconds since the epoch of ``2023-11-16 18:15:46.6805900`` (the trace's layout:
    7 fractional digits, which ``fromisoformat`` rejects) or of a plain number."""
    text = (text or "").strip()
    try:
        return float(text)
    except ValueError:
        pass
    whole, _, fraction = text.partition(".")
    digits = "".join(c for c in fraction if c.isdigit())
    try:
        stamp = datetime.fromisoformat(whole)
    except ValueError:
        raise TraceError(
            f"{path}:{line}: TIMESTAMP: expected a date-time like "
            f"'2023-11-16 18:15:46.680', got {text!r}"
        ) from None
    return stamp.timestamp() + (float(f"0.{digits}") if digits else 0.0)


def _count(path: str, line: int, column: str, value: Any) -> int:
    """A non-negative token count from a CSV cell or a JSON value."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise TraceError(f"{path}:{line}: {column}: expected a non-negative integer, got {value!r}")


def _parse_mooncake(path: str):
    times: list[float] = []
    inputs: list[int] = []
    outputs: list[int] = []
    hashes: list[np.ndarray] = []
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            row = _json_object(path, line_no, line)
            times.append(_count(path, line_no, "timestamp", row.get("timestamp")) / 1000.0)
            inputs.append(_count(path, line_no, "input_length", row.get("input_length")))
            outputs.append(_count(path, line_no, "output_length", row.get("output_length")))
            hashes.append(_hash_ids(path, line_no, row.get("hash_ids", [])))
    return times, inputs, outputs, tuple(hashes)


def _json_object(path: str, line_no: int, line: str) -> dict:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise TraceError(f"{path}:{line_no}: expected a JSON object ({err.msg})") from None
    if not isinstance(row, dict):
        raise TraceError(f"{path}:{line_no}: expected a JSON object, got {type(row).__name__}")
    return row


def _hash_ids(path: str, line_no: int, value: Any) -> np.ndarray:
    ok = isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    )
    if not ok:
        raise TraceError(
            f"{path}:{line_no}: hash_ids: expected a list of non-negative integers, got {value!r}"
        )
    ids = np.asarray(value, dtype=np.int64)
    ids.setflags(write=False)
    return ids
