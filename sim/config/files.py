"""Files a scenario names (traces, length tables, calibration files, profile folders).

Relative paths resolve against the scenario file's folder (passed by the loader as
validation context), else the working directory. A section naming a file keeps the path
as written, so a dumped scenario never holds absolute paths; :class:`FileRef` remembers
the resolved one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

from pydantic import (
    PrivateAttr,
    ValidationInfo,
    model_validator,
)

from sim.inputs.schema import StrictModel


def base_dir(info: ValidationInfo) -> Path:
    """Relative paths resolve against the scenario file's directory (passed by the loader
    as validation context), else against the working directory."""
    context = info.context or {}
    return Path(context.get("base_dir", "."))


def _resolve(value: str, info: ValidationInfo, check) -> tuple[Path, bool]:
    """The absolute path of ``value`` and ``check(path)`` (``Path.is_file``, ...); a
    name the file system refuses (too long) is a one-line ValueError, not an OSError."""
    try:
        resolved = (base_dir(info) / value).resolve()
        return resolved, check(resolved)
    except OSError as err:
        shown = value if len(value) <= 100 else value[:97] + "..."
        raise ValueError(f"cannot read {shown}: {err.strerror or err}") from None


def resolve_existing_file(value: str, info: ValidationInfo) -> Path:
    """The absolute path of an existing file named in a scenario; ValueError if none."""
    resolved, found = _resolve(value, info, Path.is_file)
    if not found:
        raise ValueError(f"file not found: {value} (looked for {resolved})")
    if not os.access(resolved, os.R_OK):
        raise ValueError(f"file not readable: {value}")
    return resolved


def resolve_existing_dir(value: str, info: ValidationInfo) -> Path:
    """The absolute path of an existing directory named in a scenario; ValueError if none."""
    resolved, found = _resolve(value, info, Path.is_dir)
    if not found:
        raise ValueError(f"directory not found: {value} (looked for {resolved})")
    return resolved


class FileRef(StrictModel):
    """A section naming a file in its ``path`` field (or the field ``_file_field`` names;
    subclasses check it exists with :func:`resolve_existing_file`, on the field). The
    field keeps the path as written (so dumps never contain absolute paths);
    :attr:`resolved_path` is the absolute one (None when the field is empty)."""

    _file_field: ClassVar[str] = "path"
    _resolved: Path | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _remember_resolved(self, info: ValidationInfo) -> FileRef:
        value = getattr(self, self._file_field)
        if value is not None:
            self._resolved = (base_dir(info) / value).resolve()
        return self

    @property
    def resolved_path(self) -> Path | None:
        return self._resolved
