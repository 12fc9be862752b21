"""Reading a recorded run's files: JSON, JSON lines and YAML into plain values, then each
object into its format's typed model (:class:`Record`, :func:`parse`), with a one-line
:class:`~sim.recorded.run.RecordError` (``file:line: key.path: expected ...``) for
anything malformed, and each file's sha256 so a run names exactly what it was read from.
The field types the models share are in :mod:`sim.recorded.fields`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from sim.config.errors import format_validation_error
from sim.inputs.textfile import check_regular_file, parse_json, read_text
from sim.recorded.run import RecordError


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
    return path


def _text(path: Path) -> str:
    return read_text(path, RecordError)


def read_json(path: Path) -> Any:
    """The JSON value in ``path`` (sim.inputs.textfile.parse_json: no NaN, no 10^400)."""
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


class Record(BaseModel):
    """Base of the typed model of a recorded file's object: fields an importer reads,
    typed; every other key ignored (clients add fields between versions, and a file is
    refused only for what a replay would read wrong)."""

    model_config = ConfigDict(extra="ignore", frozen=True)


M = TypeVar("M", bound=BaseModel)


def parse(model: type[M], value: Any, where: str) -> M:
    """``value`` (a file's JSON or YAML object, or one line's) as ``model``; RecordError
    ``where: key.path: expected ...`` (the first problem, as a scenario's) otherwise."""
    try:
        return model.model_validate(value)
    except ValidationError as err:
        raise RecordError(format_validation_error(err, where, value)) from None


def parse_value(kind: Any, value: Any, where: str, field: str) -> Any:
    """One value as the type ``kind`` (one of this module's field types); RecordError
    ``where: field: expected ...`` otherwise."""
    try:
        return TypeAdapter(kind).validate_python(value)
    except ValidationError as err:
        raise RecordError(format_validation_error(err, where, value, field)) from None
