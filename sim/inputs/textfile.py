"""Reading the text files pagesim is given (scenarios, traces, length tables, calibration
files, profiles, a run's outputs) so that a bad one is one line naming it, never an
exception from deep inside a decoder.

:func:`read_text` reads a whole file as UTF-8; :func:`reading` wraps a reader that streams
one (csv, line by line); both turn an unreadable file into ``error("<file>: cannot read:
...")`` and bytes that are not UTF-8 into ``error("<file>:<line>: not UTF-8 text ...")``.
:func:`parse_json` is ``json.loads`` with NaN, infinities, numbers too long for Python and
nesting too deep for its recursion as one-line ValueErrors. :func:`count` reads a non-negative
integer that fits int64 (ASCII digits only: ``str.isdigit`` also accepts superscripts,
which ``int`` then rejects).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

#: The largest integer an int64 array holds; token counts and ids beyond it are rejected.
INT64_MAX = 2**63 - 1

_DIGITS = re.compile(r"[0-9]+")

ErrorType = Callable[[str], Exception]


def non_utf8_line(path: str | Path) -> tuple[int, int] | None:
    """(line number, offending byte) of the first line of ``path`` that is not UTF-8,
    or None if every line decodes (or the file cannot be read again)."""
    try:
        with open(path, "rb") as handle:
            for line_no, raw in enumerate(handle, start=1):
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    return line_no, raw[err.start]
    except OSError:
        return None
    return None


def _not_utf8(path: str | Path, error: ErrorType) -> Exception:
    where = non_utf8_line(path)
    if where is None:
        return error(f"{path}: not UTF-8 text")
    line_no, byte = where
    return error(f"{path}:{line_no}: not UTF-8 text (byte 0x{byte:02x}); save it as UTF-8")


def check_regular_file(path: str | Path, error: ErrorType) -> None:
    """Raise ``error`` (one line) unless ``path`` is a regular file (after links): a
    FIFO would block the open until a writer came, and ``/dev/zero`` never ends."""
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        raise error(f"{path}: cannot read: {err.strerror or err}") from None
    if stat.S_ISDIR(mode):
        raise error(f"{path}: is a folder, expected a file")
    if not stat.S_ISREG(mode):
        raise error(f"{path}: not a regular file (a pipe, a device or a socket)")


#: A file read whole larger than this is refused before it is read (a recorded run of a
#: million requests with every token's time is ~200 MB of JSON).
MAX_TEXT_BYTES = 2 << 30


def check_size(path: str | Path, error: ErrorType, limit: int = MAX_TEXT_BYTES) -> None:
    """Raise ``error`` (one line) if ``path`` holds more than ``limit`` bytes."""
    size = os.stat(path).st_size
    if size > limit:
        raise error(f"{path}: {size:,} bytes, more than the {limit:,} read")


@contextlib.contextmanager
def reading(path: str | Path, error: ErrorType) -> Iterator[None]:
    """Around code that opens and reads ``path``: a path that is not a regular file, an
    OSError (missing, a folder, no permission) or bytes that are not UTF-8 raise
    ``error`` with one line naming the file (and the line of the first bad byte).
    ``error`` itself passes through."""
    check_regular_file(path, error)
    try:
        yield
    except UnicodeDecodeError:
        raise _not_utf8(path, error) from None
    except IsADirectoryError:
        raise error(f"{path}: is a folder, expected a file") from None
    except OSError as err:
        raise error(f"{path}: cannot read: {err.strerror or err}") from None


def read_text(path: str | Path, error: ErrorType) -> str:
    """The whole of ``path`` as UTF-8 text; ``error`` (one line) if it cannot be read
    or is not UTF-8 or larger than :data:`MAX_TEXT_BYTES`. A leading byte-order mark is
    dropped."""
    with reading(path, error), open(path, encoding="utf-8-sig") as handle:
        check_size(path, error)
        return handle.read()


def parse_json(text: str, *, finite: bool = True) -> Any:
    """``json.loads`` with every failure a ValueError of one short line: the
    JSONDecodeError (with ``lineno``) for a syntax error, a plain ValueError for a
    number of more than :data:`MAX_DIGITS` digits or nesting too deep for the parser.
    With ``finite`` (the default) NaN, Infinity and numbers that overflow a float are
    refused too (pagesim never writes them where ``finite`` is used)."""
    hooks: dict[str, Any] = {"parse_int": _int}
    if finite:
        hooks.update(parse_constant=_no_constant, parse_float=_finite_float)
    try:
        return json.loads(text, **hooks)
    except RecursionError:
        raise ValueError("nested too deeply") from None


#: Longest integer :func:`parse_json` reads (Python's own limit is 4300 digits).
MAX_DIGITS = 100


def _int(text: str) -> int:
    if len(text) > MAX_DIGITS:
        raise ValueError(f"a number of {len(text)} digits")
    return int(text)


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a finite number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:20]} is too large for a float")
    return value


def count(value: Any) -> int | None:
    """``value`` as a non-negative integer that fits int64: an int (not a bool), or a
    string of ASCII digits (spaces around allowed); None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value <= INT64_MAX else None
    if isinstance(value, str):
        text = value.strip()
        if not _DIGITS.fullmatch(text):
            return None
        text = text.lstrip("0") or "0"
        if len(text) <= 19 and int(text) <= INT64_MAX:
            return int(text)
    return None


def beyond_int64(value: Any) -> bool:
    """Whether ``value`` is a non-negative integer (an int, or ASCII digits) too large
    for int64: what :func:`count` refuses for its size rather than its form."""
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        return len(value.strip().lstrip("0")) > 19 or int(value) > INT64_MAX
    return isinstance(value, int) and not isinstance(value, bool) and value > INT64_MAX
