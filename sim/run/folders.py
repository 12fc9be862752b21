"""Run folders that never lie: a run's files appear all at once or not at all, an
existing run is replaced only when asked, and every run says what made it. Single
files (a profile, a calibration, a page, a schema) are written the same way
(:func:`atomic_file`), and every output path is checked before any work
(:func:`check_target`, :func:`check_file_target`).

Files are written into a hidden temporary folder beside the target; only when all of
them are complete is it renamed into place (the previous run, if replacing, is renamed
aside first and removed after). An interruption leaves the previous complete run, or
nothing, never a mix of two runs. The temporary folders of an interrupted run are
removed on the way out (and named ``.<target>.partial-<pid>`` should a kill leave one).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from sim.inputs.user_errors import UserError

#: Packages whose versions a run's metadata records.
RECORDED_PACKAGES = ("pagesim", "simpy", "numpy", "pydantic", "torch", "triton")


class FolderExists(UserError):
    """The target folder holds files and replacing it was not asked for."""


def scenario_hash(scenario) -> str:
    """A short hash of the resolved scenario (what a run computed from, seed included)."""
    dump = json.dumps(scenario.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(dump.encode()).hexdigest()[:10]


def default_run_dir(scenario, root: Path = Path("runs")) -> Path:
    """``runs/<name>-seed<seed>-<hash>``: distinct scenarios never share a folder."""
    name = f"{scenario.name}-seed{scenario.simulation.seed}-{scenario_hash(scenario)[:8]}"
    return root / name


def check_target(target: Path, *, force: bool) -> None:
    """Raise FolderExists if ``target`` holds files and ``force`` is off; problems the
    file system would raise later (a file or a broken link where the folder goes, a
    parent that is a file or not writable) as ValueError with one line."""
    if target.is_symlink() and not target.exists():
        raise ValueError(f"{target}: is a broken symbolic link; remove it or choose another")
    if target.exists() and not target.is_dir():
        raise ValueError(f"{target}: exists and is not a folder")
    try:
        holds_files = target.is_dir() and any(target.iterdir())
    except OSError as err:
        raise ValueError(f"{target}: cannot list the folder: {err.strerror}") from None
    if holds_files and not force:
        raise FolderExists(
            f"{target} already holds a run; pass --force to replace it or --out another folder"
        )
    _check_creatable(target, "the output directory")


def _check_creatable(target: Path, what: str) -> None:
    """The nearest existing ancestor of ``target`` is a writable folder (the folders
    between it and ``target`` are created when ``target`` is written)."""
    existing = target.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{target}: cannot create {what}: {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{target}: cannot create {what}: {existing} is not writable")
    # os.access says yes to root everywhere; /proc and /sys refuse all the same. Only
    # creating a file there tells (it is removed at once).
    try:
        with tempfile.TemporaryFile(dir=existing, prefix=".pagesim-probe-"):
            pass
    except OSError as err:
        raise ValueError(
            f"{target}: cannot create {what}: cannot write in {existing} ({err.strerror})"
        ) from None


def check_file_target(target: Path) -> None:
    """ValueError (one line) unless ``target`` can be written as a file: not a folder,
    not a device or pipe (it would be replaced, not written to), and its nearest
    existing ancestor a writable folder. An existing file is replaced."""
    if target.is_dir():
        raise ValueError(f"{target}: is a folder; expected a file name")
    if target.exists() and not target.is_file():
        raise ValueError(f"{target}: exists and is not a regular file")
    _check_creatable(target, "the file")


@contextlib.contextmanager
def atomic_file(target: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``target`` (checked by :func:`check_file_target`)
    for the body to write; when it succeeds the file is renamed onto ``target``, so a
    reader sees the previous file or the whole new one. On any exception the temporary
    file and the folders made for it are removed and ``target`` is left as it was."""
    target = Path(target)
    check_file_target(target)
    created = _missing_folders(target.parent)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.parent / f".{target.name}.partial-{os.getpid()}"
    try:
        yield partial
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def _missing_folders(folder: Path) -> list[Path]:
    """``folder`` and its ancestors that do not exist yet, outermost first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing[::-1]


@contextlib.contextmanager
def atomic_folder(target: Path, *, force: bool) -> Iterator[Path]:
    """Yield a fresh temporary folder beside ``target``; when the body succeeds it
    becomes ``target`` (replacing a previous run only with ``force``). On any exception,
    KeyboardInterrupt included, the temporary folder is removed and ``target`` is left
    as it was. Raises FolderExists as :func:`check_target`."""
    check_target(target, force=force)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.parent / f".{target.name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    try:
        yield partial
        _swap_into_place(partial, target)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def _swap_into_place(partial: Path, target: Path) -> None:
    old = target.parent / f".{target.name}.replaced-{os.getpid()}"
    if target.exists():
        target.rename(old)  # an interruption from here on leaves no target, never a mix
    partial.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def run_metadata(scenario, argv: Sequence[str] | None = None) -> dict[str, Any]:
    """metadata.json: who made this run and from what (kept out of summary.json, which
    stays byte-identical for the same scenario and seed)."""
    return {
        "pagesim_version": _version("pagesim"),
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": list(sys.argv if argv is None else argv),
        "scenario_name": scenario.name,
        "scenario_hash": scenario_hash(scenario),
        "seed": scenario.simulation.seed,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": {name: _version(name) for name in RECORDED_PACKAGES},
    }


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None
