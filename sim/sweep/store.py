"""A sweep's output folder: run folders keyed by scenario hash (so a point already run
is found, not run again), written whole as results arrive; the files that summarise
them written whole too (sim.run.folders), so an interruption loses no finished point
and leaves nothing half-written.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sim.inputs.textfile import parse_json, read_text
from sim.run.folders import _version, atomic_file, atomic_folder, check_target
from sim.sweep.points import Point, finished_summary
from sim.sweep.progress import SweepProgress
from sim.sweep.task import make_payload

#: (summary or None, error or None) of each point, by scenario hash.
Outcomes = dict[str, tuple[dict[str, Any] | None, str | None]]


#: The file in each finished run folder that lists the others with their sizes and
#: sha256, so a resume can tell a finished point from a damaged one.
MANIFEST = "manifest.json"


def check_out(out: Path, marker: str) -> None:
    """``out`` may be written: missing, empty, or an earlier run of the same command
    (it holds ``marker``, e.g. sweep.json). ValueError (one line) otherwise, also when a
    file the command rewrites whole (points.csv, ...) is not a file."""
    check_target(out, force=True)
    if out.is_dir() and any(out.iterdir()) and not (out / marker).is_file():
        raise ValueError(
            f"{out}: holds files but no {marker}; it is not a folder this "
            "command wrote: choose an empty or new folder"
        )
    if out.is_dir():
        for item in out.iterdir():
            if item.suffix in (".csv", ".json", ".html", ".js") and not item.is_file():
                raise ValueError(
                    f"{item}: is not a file (this command rewrites it whole): remove it"
                )


def earlier_settings(out: Path, marker: str, field: str) -> Any:
    """What the earlier run in ``out`` was asked (``field`` of its ``marker`` JSON), or
    None when there is none or it cannot be read (then nothing matches it)."""
    try:
        return json.loads((out / marker).read_text(encoding="utf-8")).get(field)
    except (OSError, ValueError, AttributeError):
        return None


def same_settings(stored: Any, settings: Any) -> bool:
    """Whether ``settings`` are those stored in JSON (compared as JSON reads them back)."""
    return stored == json.loads(json.dumps(settings, sort_keys=True))


def write_text(path: Path, text: str) -> None:
    """Write ``path`` whole (a reader sees the old file or the new one)."""
    with atomic_file(path) as partial:
        partial.write_text(text, encoding="utf-8")


def write_json(path: Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def provenance(argv: Sequence[str] | None, executor) -> dict[str, Any]:
    """What made these files: versions, date, command and executor (kept out of
    points.csv and the run folders, which stay byte-identical)."""
    import datetime
    import platform

    from sim.run.folders import RECORDED_PACKAGES

    return {
        "pagesim_version": _version("pagesim"),
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": list(argv or []),
        "executor": executor.describe(),
        "python": platform.python_version(),
        "packages": {name: _version(name) for name in (*RECORDED_PACKAGES, "ray")},
    }


def run_points(
    points: Sequence[Point],
    out: Path,
    executor,
    *,
    html: bool,
    extend: bool = False,
    progress: bool = True,
    label: str = "sweep",
    on_result: Callable[[Outcomes], None] | None = None,
    cpu_s: list[float] | None = None,
) -> Outcomes:
    """Run every point of ``points`` whose finished run folder is not in ``out`` yet
    (points with the same scenario hash run once), write each run folder as it comes
    back, and return every point's outcome. ``on_result`` is called after each result
    with the outcomes so far (to keep a table current); ``cpu_s[0]`` accumulates the
    CPU seconds the points took in their workers."""
    cpu_s = cpu_s if cpu_s is not None else [0.0]
    outcomes: Outcomes = {}
    todo: dict[str, Point] = {}
    damaged = []
    for point in points:
        if point.key in outcomes or point.key in todo:
            continue
        summary = finished_summary(out, point)
        folder = out / point.folder
        if summary is None:
            there = folder.exists() or folder.is_symlink() or folder.parent.is_file()
            why = "not a finished run folder" if there else None
        else:
            why = damage(folder)
        if summary is not None and why is None:
            outcomes[point.key] = (summary, None)
        else:
            todo[point.key] = point
            if why is not None:
                damaged.append(f"{point.folder} ({why})")
    if damaged:
        shown = "; ".join(damaged[:5]) + (f"; and {len(damaged) - 5} more" if damaged[5:] else "")
        print(f"{label}: running again {len(damaged)} damaged point(s): {shown}", file=sys.stderr)
    if not todo:
        return outcomes
    payloads = [make_payload(p, html=html, extend=extend) for p in todo.values()]
    bar = SweepProgress(
        len(outcomes) + len(todo), len(outcomes), executor.workers, label=label, enabled=progress
    )
    bar.started(len(payloads))
    try:
        for result in executor.run(payloads):
            key, error = result["key"], result["error"]
            if error is None:
                _write_run_folder(out / todo[key].folder, result["files"])
            outcomes[key] = (result["summary"], error)
            cpu_s[0] += result.get("cpu_s", 0.0)
            bar.finished(error is None)
            if on_result is not None:
                on_result(outcomes)
    finally:
        bar.close()
        if on_result is not None:
            # An interrupt between a folder landing and its row being written would
            # leave the table one point short; write it once more on the way out.
            on_result(outcomes)
    return outcomes


def _write_run_folder(target: Path, files: dict[str, bytes]) -> None:
    """Write a point's folder whole, with its manifest; a file where the folder (or
    ``runs/``) goes is damage of this command's own folder and is replaced."""
    for place in (target.parent, target):
        if (place.exists() or place.is_symlink()) and not place.is_dir():
            place.unlink()  # a file, or a link to nothing; a link to a folder is kept
    manifest = {name: [len(data), hashlib.sha256(data).hexdigest()] for name, data in files.items()}
    with atomic_folder(target, force=True) as partial:
        for name, data in files.items():
            (partial / name).write_bytes(data)
        (partial / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def damage(folder: Path) -> str | None:
    """What is wrong with a finished run folder against its manifest (a file missing,
    of another size or content), or None when it is whole. A folder written before
    manifests were kept has none and is taken as it is."""
    try:
        if not (folder / MANIFEST).exists():
            return None
        manifest = parse_json(read_text(folder / MANIFEST, ValueError))
    except ValueError:  # not a file, not UTF-8 or not JSON (read_text's errors too)
        return f"{MANIFEST} unreadable"
    if not isinstance(manifest, dict):
        return f"{MANIFEST} is not a mapping"
    for name, expected in sorted(manifest.items()):
        path = folder / name
        try:
            data = path.read_bytes()
        except OSError:
            return f"{name} missing"
        if [len(data), hashlib.sha256(data).hexdigest()] != expected:
            return f"{name} changed ({len(data)} bytes, expected {expected[0]})"
    return None
