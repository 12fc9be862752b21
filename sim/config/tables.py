"""Length tables: one integer per line, or two columns (input, output), read once."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np


class LengthTableError(ValueError):
    """A malformed length table; the message is ``file:line: column N: expected ...``."""


@functools.lru_cache(maxsize=16)
def _cached_table(path: str, mtime_ns: int) -> np.ndarray:
    rows: list[list[int]] = []
    first = True
    with open(path, encoding="utf-8") as handle:
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
    if not cell.isdigit() or int(cell) < 1:
        raise LengthTableError(
            f"{path}:{line_no}: column {col}: expected a positive integer, got {cell!r}"
        )
    return int(cell)


def load_length_table(path: str | Path) -> np.ndarray:
    """The lengths in ``path`` as a read-only (rows, columns) int64 array (cached).
    Raises LengthTableError on a bad row, OSError if unreadable."""
    path = str(path)
    return _cached_table(path, os.stat(path).st_mtime_ns)
