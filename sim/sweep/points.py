"""Points of a sweep (or probes of a capacity search): each one the base scenario with
``--set``-style overrides, validated before anything runs; its identity (the hash of
its resolved scenario, which names its run folder and makes a sweep resumable); and
its row of points.csv (every scalar of summary.json, flattened to stable names).
"""

from __future__ import annotations

import copy
import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.config.errors import ScenarioError
from sim.config.loader import apply_override, validate_scenario
from sim.inputs.textfile import parse_json, read_text
from sim.run.folders import scenario_hash
from sim.sweep.spec import axis_text, describe, override

#: The folder of a sweep's run folders (one per point, named by its scenario hash).
RUNS = "runs"

#: Columns every row starts with, before the axes' and the summary's.
LEAD = ("point", "seed", "status", "error", "run")


@dataclass
class Point:
    """One run of a sweep: its axis values and seed, the raw scenario mapping they give
    (what travels to a worker), the validated scenario and its hash."""

    index: int
    values: dict[str, Any]
    seed: int
    raw: dict[str, Any]
    scenario: Any
    source: str
    base_dir: Path
    key: str = field(init=False)

    def __post_init__(self) -> None:
        self.key = scenario_hash(self.scenario)

    @property
    def folder(self) -> str:
        """The run folder, relative to the sweep's output folder."""
        return f"{RUNS}/{self.key}"

    def describe(self) -> str:
        return describe(self.values, self.seed)


def resolve_point(
    index: int,
    base_raw: Mapping[str, Any],
    base: Path,
    values: Mapping[str, Any],
    seed: int | None,
    common: Sequence[str] = (),
    *,
    where: str,
) -> Point:
    """The point that sets ``common`` (``key=value`` strings) then ``values`` and
    ``seed`` on the base scenario, validated as ``pagesim run`` would. Raises
    ScenarioError: ``<where>: point N (<values>): <the scenario's error line>``."""
    raw = copy.deepcopy(dict(base_raw))
    source = str(base)
    try:
        for assignment in [*common, *(override(k, v) for k, v in values.items())]:
            apply_override(raw, assignment, source)
        if seed is not None:
            apply_override(raw, f"simulation.seed={int(seed)}", source)
        raw.setdefault("name", base.stem)
        scenario = validate_scenario(raw, source, base_dir=base.resolve().parent)
    except ScenarioError as err:
        raise ScenarioError(f"{where}: point {index} ({describe(values, seed)}): {err}") from None
    final_seed = scenario.simulation.seed
    return Point(index, dict(values), final_seed, raw, scenario, source, base.resolve().parent)


def flatten(summary: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Every scalar of ``summary`` (numbers, strings, booleans, nulls) under its dotted
    path (``ttft_s.p99``, ``kv.peak_used_fraction``); lists are left out (a per-replica
    table or a percentile list has no single column)."""
    flat: dict[str, Any] = {}
    for key, value in summary.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        elif value is None or isinstance(value, (bool, int, float, str)):
            flat[name] = value
    return flat


def point_row(
    point: Point, axes: Sequence[str], summary: Mapping[str, Any] | None, error: str | None
) -> dict[str, Any]:
    """One row of points.csv (the summary's scalars, or the error that stopped it)."""
    row: dict[str, Any] = {
        "point": point.index,
        "seed": point.seed,
        "status": "failed" if error else "ok",
        "error": error or "",
        "run": point.folder if not error else "",
    }
    for axis in axes:
        row[axis] = axis_text(point.values[axis]) if axis in point.values else ""
    if summary is not None:
        # settings the point's run shows could not have mattered (sim.run.warnings)
        row["warnings"] = "; ".join(w for w in summary.get("warnings") or () if isinstance(w, str))
        for name, value in flatten(summary).items():
            row.setdefault(name, value)
    return row


def cell(value: Any) -> str:
    """A CSV cell that reads the same on every machine: floats in Python's shortest
    round-trip form, booleans as true/false, a missing value as the empty string."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def csv_text(rows: Iterable[Mapping[str, Any]], lead: Sequence[str]) -> str:
    """The rows as CSV: the ``lead`` columns first, then every other column any row
    has, sorted by name (so the same rows always give the same header)."""
    rows = list(rows)
    rest = sorted({name for row in rows for name in row} - set(lead))
    header = [*lead, *rest]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([cell(row.get(name)) for name in header])
    return out.getvalue()


def finished_summary(out: Path, point: Point) -> dict[str, Any] | None:
    """The summary of ``point``'s finished run folder under ``out``, or None when there
    is none. A run folder appears whole or not at all (sim.run.folders), and its
    metadata names the scenario hash it was run from, which must be this point's."""
    folder = out / point.folder
    try:
        metadata = parse_json(read_text(folder / "metadata.json", ValueError))
        summary = parse_json(read_text(folder / "summary.json", ValueError))
    except ValueError:  # missing, not a file, not UTF-8 or not JSON: not finished
        return None
    if not isinstance(metadata, dict) or metadata.get("scenario_hash") != point.key:
        return None
    return summary if isinstance(summary, dict) else None
