"""Trace replay: the Azure LLM inference CSV layout, the Mooncake JSONL layout and
pagesim's own request JSONL (what ``pagesim import-run`` writes).

Each loader returns a :class:`Trace` of arrival offsets (seconds from the first row),
input and output lengths and, for Mooncake, the ``hash_ids`` of each prompt's 512-token
blocks; for pagesim's own, which rows send the same prompt. A malformed row raises
:class:`TraceError` naming ``file:line: column``: a timestamp that is not finite (or lies
so far from the others that the offset is not), a token count or hash id that is negative
or beyond int64, a file that is not UTF-8.
Rows need not be in time order (requests are sorted by arrival). Parsed traces are
cached by (path, modification time).
"""

from __future__ import annotations

import csv
import functools
import math
import os
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from sim.inputs.textfile import INT64_MAX, beyond_int64, count, parse_json, reading
from sim.inputs.user_errors import UserError


class TraceError(UserError, ValueError):
    """A malformed trace; the message is ``file:line: column: expected ...``."""


#: Tokens behind one Mooncake hash id (the trace's published block size).
MOONCAKE_BLOCK_TOKENS = 512


class Trace(NamedTuple):
    """A parsed trace, rows in file order (read-only arrays)."""

    arrival_s: np.ndarray  # float64, seconds from the earliest row
    input_len: np.ndarray  # int64
    output_len: np.ndarray  # int64
    hash_ids: tuple[np.ndarray, ...] | None  # per row, int64 (Mooncake; requests-jsonl's)
    prompt_id: np.ndarray | None = None  # int64 per row: equal ids, equal prompts; -1 none


def load_trace(path: str | Path, fmt: str) -> Trace:
    """Parse an ``azure-csv`` or ``mooncake-jsonl`` trace (cached by path and mtime).
    Raises TraceError (one line) on a bad row or an unreadable file."""
    path = str(path)
    with reading(path, TraceError):
        mtime_ns = os.stat(path).st_mtime_ns
    return _cached_trace(path, mtime_ns, fmt)


@functools.lru_cache(maxsize=8)
def _cached_trace(path: str, mtime_ns: int, fmt: str) -> Trace:
    parsers = {
        "azure-csv": _parse_azure,
        "mooncake-jsonl": _parse_mooncake,
        "requests-jsonl": _parse_requests,
    }
    if fmt not in parsers:
        raise TraceError(f"{path}: unknown trace format {fmt!r}")
    with reading(path, TraceError):
        times, lines, inputs, outputs, hashes, *prompt_id = parsers[fmt](path)
    if not times:
        raise TraceError(f"{path}: no rows")
    arrival = np.asarray(times, dtype=np.float64)
    with np.errstate(over="ignore"):  # an overflow is reported by _check_offsets
        arrival -= arrival.min()
    column = {"azure-csv": "TIMESTAMP", "mooncake-jsonl": "timestamp"}.get(fmt, "arrival_s")
    _check_offsets(path, arrival, lines, column)
    arrays = [arrival, np.asarray(inputs, np.int64), np.asarray(outputs, np.int64)]
    arrays += [np.asarray(prompt_id[0], np.int64)] if prompt_id else []
    for array in arrays:
        array.setflags(write=False)
    return Trace(*arrays[:3], hashes, *arrays[3:])


def _check_offsets(path: str, arrival: np.ndarray, lines: list[int], column: str) -> None:
    """Every row's offset from the earliest is finite (two finite timestamps near the
    float range's ends are not)."""
    bad = np.flatnonzero(~np.isfinite(arrival))
    if len(bad):
        earliest = lines[int(np.argmin(np.where(np.isfinite(arrival), arrival, np.inf)))]
        raise TraceError(
            f"{path}:{lines[bad[0]]}: {column}: too far from the earliest row "
            f"(line {earliest}) for a time in seconds"
        )


AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def _parse_azure(path: str):
    times: list[float] = []
    lines: list[int] = []
    inputs: list[int] = []
    outputs: list[int] = []
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        try:
            missing = [c for c in AZURE_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise TraceError(f"{path}:1: header: expected columns {', '.join(AZURE_COLUMNS)}")
            for row in reader:
                line = reader.line_num
                times.append(_azure_timestamp(path, line, row["TIMESTAMP"]))
                lines.append(line)
                inputs.append(_count(path, line, "ContextTokens", row["ContextTokens"]))
                outputs.append(_count(path, line, "GeneratedTokens", row["GeneratedTokens"]))
        except csv.Error as err:
            raise TraceError(f"{path}:{reader.line_num + 1}: not CSV: {err}") from None
    return times, lines, inputs, outputs, None


def _azure_timestamp(path: str, line: int, text: str | None) -> float:
    """Seconds since the epoch of ``2023-11-16 18:15:46.6805900`` (the trace's layout:
    7 fractional digits, which ``fromisoformat`` rejects) or of a plain finite number."""
    text = (text or "").strip()
    try:
        seconds = float(text)
    except ValueError:
        seconds = _date_time(path, line, text)
    if not math.isfinite(seconds):
        raise TraceError(f"{path}:{line}: TIMESTAMP: expected a finite time, got {text!r}")
    return seconds


def _date_time(path: str, line: int, text: str) -> float:
    whole, _, fraction = text.partition(".")
    digits = "".join(c for c in fraction if "0" <= c <= "9")
    try:
        stamp = datetime.fromisoformat(whole)
    except ValueError:
        raise TraceError(
            f"{path}:{line}: TIMESTAMP: expected a date-time like "
            f"'2023-11-16 18:15:46.680', got {text[:60]!r}"
        ) from None
    try:
        seconds = stamp.timestamp()
    except (ValueError, OverflowError, OSError):  # before the platform's first local time
        raise TraceError(f"{path}:{line}: TIMESTAMP: date out of range: {text[:60]!r}") from None
    return seconds + (float(f"0.{digits}") if digits else 0.0)


def _count(path: str, line: int, column: str, value: Any) -> int:
    """A non-negative token count (at most int64's largest) from a CSV cell or a JSON
    value."""
    number = count(value)
    if number is None:
        expected = f"at most {INT64_MAX}" if beyond_int64(value) else "a non-negative integer"
        raise TraceError(f"{path}:{line}: {column}: expected {expected}, got {_shown(value)}")
    return number


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:50] + f"... ({len(text)} characters)"


def _parse_mooncake(path: str):
    times: list[float] = []
    lines: list[int] = []
    inputs: list[int] = []
    outputs: list[int] = []
    hashes: list[np.ndarray] = []
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            row = _json_object(path, line_no, line)
            times.append(_count(path, line_no, "timestamp", row.get("timestamp")) / 1000.0)
            lines.append(line_no)
            inputs.append(_count(path, line_no, "input_length", row.get("input_length")))
            outputs.append(_count(path, line_no, "output_length", row.get("output_length")))
            hashes.append(_hash_ids(path, line_no, row.get("hash_ids", [])))
    return times, lines, inputs, outputs, tuple(hashes)


def _parse_requests(path: str):
    """pagesim's own request trace (what ``pagesim import-run`` writes): one JSON object a
    line, ``arrival_s`` (seconds, any origin), ``input_tokens``, ``output_tokens`` and an
    optional ``prompt`` (a string or integer): rows with the same ``prompt`` send the same
    prompt, token for token, and so must have the same ``input_tokens``. Or, for prompts
    that share a prefix and not the rest, ``hash_ids`` as Mooncake's: the ids of the
    prompt's leading blocks of ``arrival.hash_block_tokens`` tokens, equal where two
    prompts agree from their start to that block's end (a row has one or the other)."""
    times: list[float] = []
    lines: list[int] = []
    inputs: list[int] = []
    outputs: list[int] = []
    ids: list[int] = []
    hashes: list[np.ndarray] = []
    empty = np.zeros(0, dtype=np.int64)
    known: dict[Any, tuple[int, int, int]] = {}  # prompt -> (id, input tokens, first line)
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            row = _json_object(path, line_no, line)
            times.append(_seconds(path, line_no, row.get("arrival_s")))
            lines.append(line_no)
            inputs.append(_count(path, line_no, "input_tokens", row.get("input_tokens")))
            outputs.append(_count(path, line_no, "output_tokens", row.get("output_tokens")))
            ids.append(_prompt_id(path, line_no, row.get("prompt"), inputs[-1], known))
            if "hash_ids" in row:
                if ids[-1] >= 0:
                    raise TraceError(
                        f"{path}:{line_no}: hash_ids: a row gives a prompt key "
                        "or hash_ids, not both"
                    )
                hashes.append(_hash_ids(path, line_no, row["hash_ids"]))
            else:
                hashes.append(empty)
    has_hashes = any(h.size for h in hashes)
    if has_hashes and any(i >= 0 for i in ids):
        first = next(line for line, i in zip(lines, ids) if i >= 0)
        raise TraceError(f"{path}:{first}: prompt: a trace gives prompt keys or hash_ids, not both")
    return times, lines, inputs, outputs, tuple(hashes) if has_hashes else None, ids


def _seconds(path: str, line_no: int, value: Any) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value):
        raise TraceError(
            f"{path}:{line_no}: arrival_s: expected a finite number of seconds, got {_shown(value)}"
        )
    return float(value)


def _prompt_id(path: str, line_no: int, value: Any, tokens: int, known: dict) -> int:
    if value is None:
        return -1
    if isinstance(value, bool) or not isinstance(value, str | int) or len(str(value)) > 200:
        raise TraceError(
            f"{path}:{line_no}: prompt: expected a string or integer key of at "
            f"most 200 characters, got {_shown(value)}"
        )
    key = (type(value).__name__, value)
    if key not in known:
        known[key] = (len(known), tokens, line_no)
    number, first_tokens, first_line = known[key]
    if first_tokens != tokens:
        raise TraceError(
            f"{path}:{line_no}: input_tokens: prompt {_shown(value)} has {tokens} tokens here "
            f"and {first_tokens} on line {first_line}; equal prompts have equal lengths"
        )
    return number


def _json_object(path: str, line_no: int, line: str) -> dict:
    try:
        row = parse_json(line, finite=False)  # a NaN timestamp is named by _count
    except ValueError as err:  # JSONDecodeError included
        reason = getattr(err, "msg", None) or str(err)
        raise TraceError(f"{path}:{line_no}: expected a JSON object ({reason})") from None
    if not isinstance(row, dict):
        raise TraceError(f"{path}:{line_no}: expected a JSON object, got {type(row).__name__}")
    return row


def _hash_ids(path: str, line_no: int, value: Any) -> np.ndarray:
    ok = isinstance(value, list) and all(isinstance(v, int) and count(v) is not None for v in value)
    if not ok:
        raise TraceError(
            f"{path}:{line_no}: hash_ids: expected a list of non-negative integers of at "
            f"most {INT64_MAX}, got {_shown(value)}"
        )
    ids = np.asarray(value, dtype=np.int64)
    ids.setflags(write=False)
    return ids
