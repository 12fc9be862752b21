"""Reading a recorded run's files: JSON, JSON lines and YAML into plain values, with a
one-line :class:`~sim.recorded.run.RecordError` (``file:line: field: expected ...``) for
anything malformed, and each file's sha256 so a run names exactly what it was read from.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from sim.config.textfile import check_regular_file, parse_json, read_text
from sim.recorded.run import RecordError

#: A recorded file larger than this is refused before it is read (a run of a million
#: requests with every token's time is ~200 MB of JSON).
MAX_FILE_BYTES = 2 << 30


def sha256_of(path: Path) -> str:
    """The file's sha256 (hex); RecordError (one line) if it cannot be read."""
    digest = hashlib.sha256()
    try:
        with _checked(path).open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    except OSError as err:
        raise RecordError(f"{path}: cannot read: {err.strerror or err}") from None
    return digest.hexdigest()


def _checked(path: Path) -> Path:
    check_regular_file(path, RecordError)  # a FIFO or /dev/zero would hang the read
    if path.stat().st_size > MAX_FILE_BYTES:
        size = path.stat().st_size
        raise RecordError(f"{path}: {size:,} bytes, more than the {MAX_FILE_BYTES:,} read")
    return path


def _text(path: Path) -> str:
    return read_text(_checked(path), RecordError)


def read_json(path: Path) -> Any:
    """The JSON value in ``path`` (sim.config.textfile.parse_json: no NaN, no 10^400)."""
    try:
        return parse_json(_text(path))
    except ValueError as err:
        line = getattr(err, "lineno", None)
        where = f"{path}:{line}" if line else str(path)
        raise RecordError(f"{where}: not JSON: {getattr(err, 'msg', err)}") from None


def read_json_lines(path: Path, *, finite: bool = True) -> Iterator[tuple[int, Any]]:
    """(line number, value) of every non-blank line of a JSON-lines file; ``finite``
    False lets NaN and Infinity through (SGLang's client writes them)."""
    for number, line in enumerate(_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield number, parse_json(line, finite=finite)
        except ValueError as err:
            raise RecordError(f"{path}:{number}: not JSON: {getattr(err, 'msg', err)}") from None


def read_yaml(path: Path) -> Any:
    """The YAML (or JSON) value in ``path``."""
    text = _text(path)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = mark.line + 1 if mark is not None else "?"
        problem = getattr(err, "problem", None) or "malformed"
        raise RecordError(f"{path}:{line}: not YAML: {problem}") from None


def field_of(value: Any, path: str, where: str) -> Any:
    """``value[a][b]...`` for ``path`` ``"a.b"``; RecordError naming the field if a key
    is missing or a level is not a mapping."""
    current = value
    for key in path.split("."):
        if not isinstance(current, dict) or key not in current:
            raise RecordError(f"{where}: {path}: missing")
        current = current[key]
    return current


def mapping(value: Any, where: str, field: str) -> dict:
    """An object (a missing or null one is empty); RecordError naming the field for a
    list, a string or anything else."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RecordError(f"{where}: {field}: expected an object, got {_shown(value)}")
    return value


def number(value: Any, where: str, field: str, *, low: float | None = 0.0,
           high: float | None = None) -> float:  # fmt: skip
    """A finite number (at least ``low`` unless None, at most ``high`` unless None);
    RecordError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RecordError(f"{where}: {field}: expected a finite number, got {_shown(value)}")
    if low is not None and value < low:
        raise RecordError(f"{where}: {field}: expected at least {low:g}, got {value!r}")
    if high is not None and value > high:
        raise RecordError(f"{where}: {field}: expected at most {high:g}, got {value!r}")
    return float(value)


def count(value: Any, where: str, field: str, *, high: int = 1 << 40) -> int:
    """A non-negative integer (an integral float is accepted) up to ``high``."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise RecordError(
            f"{where}: {field}: expected an integer in [0, {high:,}], got {_shown(value)}"
        )
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:50] + f"... ({len(text)} characters)"
