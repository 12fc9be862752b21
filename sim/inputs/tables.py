"""Length tables: one integer per line, or two columns (input, output), read once.

Every length is a positive integer of ASCII digits that fits int64; a file that is not
UTF-8 is reported at its first bad line.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np

from sim.inputs.textfile import INT64_MAX, beyond_int64, count, reading
from sim.inputs.user_errors import UserError


class LengthTableError(UserError, ValueError):
    """A malformed length table; the message is ``file:line: column N: expected ...``."""


@functools.lru_cache(maxsize=16)
def _cached_table(path: str, mtime_ns: int) -> np.ndarray:
    rows: list[list[int]] = []
    first = True
    with reading(path, LengthTableError), open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            cells = text.replace(",", " ").split()
            if first and not cells[0].lstrip("-").isdigit():
                first = False
                continue  # a header line (only the first line may be one)
            first = False
            rows.append([_table_cell(path, line_no, col, cell) for col, cell in enumerate(cells)])
            if len(rows[-1]) != len(rows[0]):
                raise LengthTableError(
                    f"{path}:{line_no}: expected {len(rows[0])} column(s), got {len(cells)}"
                )
    if not rows:
        raise LengthTableError(f"{path}: no lengths found")
    table = np.asarray(rows, dtype=np.int64)
    table.setflags(write=False)
    return table


def _table_cell(path: str, line_no: int, col: int, cell: str) -> int:
    number = count(cell)
    if number is None or number < 1:
        expected = f"at most {INT64_MAX}" if beyond_int64(cell) else "a positive integer"
        shown = repr(cell) if len(cell) <= 60 else repr(cell[:50]) + f"... ({len(cell)} characters)"
        raise LengthTableError(f"{path}:{line_no}: column {col}: expected {expected}, got {shown}")
    return number


def load_length_table(path: str | Path) -> np.ndarray:
    """The lengths in ``path`` as a read-only (rows, columns) int64 array (cached).
    Raises LengthTableError (one line) on a bad row or an unreadable file."""
    path = str(path)
    with reading(path, LengthTableError):
        mtime_ns = os.stat(path).st_mtime_ns
    return _cached_table(path, mtime_ns)
