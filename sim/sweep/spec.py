"""What a sweep is: a base scenario, the axes that vary and the seeds, read from a sweep
file or the command line, validated like a scenario (one line naming file, field and
expectation), and expanded into the list of assignments each point applies.

A sweep file::

    base: ../tiny.yaml                 # relative to the sweep file
    grid:                              # every combination (the last axis varies fastest)
      cache.block_size: [8, 16, 32]
      eviction.policy: [lru, lfu]
    zip:                               # axes that vary together (equal lengths)
      workload.arrival.rate_rps: [20, 40]
      simulation.num_requests: [400, 800]
    seeds: 3                           # or a list: [0, 7, 9]; 3 means base seed, +1, +2
    set: {cache.prefix_caching: true}  # applied to every point

Every key is a scenario field path, as ``--set`` takes it; values are any YAML value.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from sim.config.errors import ScenarioError, format_validation_error
from sim.config.loader import _read_yaml, _schema_path_problem
from sim.inputs.schema import StrictModel

#: Most points one sweep may expand to (a typo such as 1e6 seeds is a mistake, not a plan).
MAX_POINTS = 100_000

#: The scenario field the seeds set; not allowed as an axis (use ``seeds``).
SEED_KEY = "simulation.seed"


class SweepFile(StrictModel):
    """A sweep file's fields (see the module's docstring)."""

    base: str
    """The base scenario, relative to the sweep file."""
    name: str | None = None
    """The sweep's name (default: the sweep file's stem, or the base scenario's)."""
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    """Axes whose values are combined: every value of each with every value of the others."""
    zip: dict[str, list[Any]] | list[dict[str, list[Any]]] = Field(default_factory=dict)
    """Axes that vary together, point by point (all lists of one group equally long); a list
    of mappings for several groups, each combined with the grid."""
    seeds: int | list[int] = 1
    """How many seeds each configuration runs (the base scenario's seed and the next ones),
    or the seeds themselves."""
    set: dict[str, Any] = Field(default_factory=dict)
    """Fields set on every point (``--set`` for the whole sweep)."""

    @field_validator("grid")
    @classmethod
    def _grid_lists(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in grid.items():
            _check_axis(key, values)
        return grid

    @field_validator("zip")
    @classmethod
    def _zip_groups(cls, value):
        for group in value if isinstance(value, list) else [value]:
            lengths = set()
            for key, values in group.items():
                _check_axis(key, values)
                lengths.add(len(values))
            if len(lengths) > 1:
                raise ValueError(
                    f"zip axes vary together: their lists must be equally long, "
                    f"got lengths {sorted(lengths)}"
                )
        return value

    @field_validator("seeds")
    @classmethod
    def _seed_values(cls, seeds: int | list[int]) -> int | list[int]:
        if isinstance(seeds, int):
            if not 1 <= seeds <= MAX_POINTS:  # a count, not built before it is checked
                raise ValueError(f"expected a number of seeds in [1, {MAX_POINTS:,}], got {seeds}")
        elif not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
            raise ValueError(f"expected distinct seeds >= 0, got {seeds}")
        return seeds

    @field_validator("set")
    @classmethod
    def _set_keys(cls, values: dict[str, Any]) -> dict[str, Any]:
        for key in values:
            _check_key(key)
        return values

    @model_validator(mode="after")
    def _keys_once(self) -> SweepFile:
        seen: dict[str, str] = {}
        for section, key in self.keys():
            if key in seen:
                raise ValueError(f"{key} is set in both {seen[key]} and {section}")
            seen[key] = section
        return self

    def zip_groups(self) -> list[dict[str, list[Any]]]:
        groups = self.zip if isinstance(self.zip, list) else [self.zip]
        return [g for g in groups if g]

    def keys(self) -> list[tuple[str, str]]:
        """(section, key) of every field the sweep sets, in the order written."""
        keys = [("grid", k) for k in self.grid]
        keys += [("zip", k) for group in self.zip_groups() for k in group]
        return keys + [("set", k) for k in self.set]

    def axes(self) -> list[str]:
        """The axis keys, grid first then zip, in the order written."""
        return [key for section, key in self.keys() if section != "set"]


def _check_key(key: str) -> None:
    if key == SEED_KEY:
        raise ValueError(f"{key}: use seeds to vary the seed")
    problem = (
        _schema_path_problem(key.split("."))
        if key and "" not in key.split(".")
        else ("expected a dotted field path such as cache.block_size")
    )
    if problem:
        raise ValueError(f"{key}: {problem}")


def _check_axis(key: str, values: list[Any]) -> None:
    _check_key(key)
    if not values:
        raise ValueError(f"{key}: expected at least one value")


class Sweep:
    """A validated sweep: the spec, the base scenario's path and raw mapping, and where
    it was read from (for error lines)."""

    def __init__(self, spec: SweepFile, base: Path, source: str, name: str):
        self.spec = spec
        self.base = base
        self.source = source
        self.name = name
        self.base_raw = _read_yaml(base, str(base))

    def assignments(self) -> list[tuple[dict[str, Any], int]]:
        """Each point's axis values (key -> value, in axis order) and seed, in point
        order: grid product (last axis fastest), then zip groups, then seeds."""
        factors: list[list[dict[str, Any]]] = [
            [{key: v} for v in values] for key, values in self.spec.grid.items()
        ]
        for group in self.spec.zip_groups():
            length = len(next(iter(group.values())))
            factors.append([{k: vs[i] for k, vs in group.items()} for i in range(length)])
        seeds = self.seeds()
        count = len(seeds)
        for factor in factors:
            count *= len(factor)
        if count > MAX_POINTS:
            raise ScenarioError(
                f"{self.source}: the sweep has {count:,} points; at most {MAX_POINTS:,} are allowed"
            )
        points = []
        for combo in itertools.product(*factors):
            values: dict[str, Any] = {}
            for part in combo:
                values.update(part)
            points += [(values, seed) for seed in seeds]
        return points

    def seeds(self) -> list[int]:
        seeds = self.spec.seeds
        if isinstance(seeds, list):
            return list(seeds)
        first = (self.base_raw.get("simulation") or {}).get("seed", 0)
        first = first if isinstance(first, int) and first >= 0 else 0
        return [first + i for i in range(seeds)]

    def resolved(self) -> dict[str, Any]:
        """The sweep as sweep.json records it."""
        return {"name": self.name, "base": str(self.base), **self.spec.model_dump(mode="json")}


def override(key: str, value: Any) -> str:
    """``key=value`` for :func:`sim.config.loader.apply_override`; JSON is YAML, so any
    value (a string, a number, a mapping) reads back as itself."""
    return f"{key}={json.dumps(value)}"


def read_sweep_file(path: Path, extra: Mapping[str, Any] | None = None) -> Sweep:
    """A sweep from a sweep file, with ``extra`` (command-line axes: grid, zip, seeds,
    set) added. Raises ScenarioError (one line naming the file and field)."""
    raw = _read_yaml(path, str(path))
    raw = _merge(raw, extra or {}, str(path))
    spec = _validate(raw, str(path))
    base = (path.parent / spec.base) if not Path(spec.base).is_absolute() else Path(spec.base)
    if not base.is_file():
        raise ScenarioError(
            f"{path}: base: scenario file not found: {spec.base} (looked for {base.resolve()})"
        )
    return Sweep(spec, base, str(path), spec.name or path.stem)


def sweep_from_scenario(scenario: Path, extra: Mapping[str, Any]) -> Sweep:
    """A sweep over ``scenario`` with the command line's axes. Raises ScenarioError."""
    raw = {"base": str(scenario), **{k: v for k, v in extra.items() if v}}
    spec = _validate(raw, "the command line")
    return Sweep(spec, scenario, "the command line", spec.name or scenario.stem)


def is_sweep_file(path: Path) -> bool:
    """A YAML mapping with a ``base`` key is a sweep file; anything else is a scenario
    (whose own reading reports what is wrong with it)."""
    try:
        raw = _read_yaml(path, str(path))
    except ScenarioError:
        return False
    return "base" in raw


def _merge(raw: dict, extra: Mapping[str, Any], source: str) -> dict:
    merged = dict(raw)
    for section in ("grid", "set"):
        if extra.get(section):
            merged[section] = {**(raw.get(section) or {}), **extra[section]}
    if extra.get("zip"):
        groups = raw.get("zip") or []
        groups = groups if isinstance(groups, list) else [groups]
        merged["zip"] = [*groups, extra["zip"]]
    if extra.get("seeds") is not None:
        merged["seeds"] = extra["seeds"]
    return merged


def _validate(raw: dict, source: str) -> SweepFile:
    try:
        return SweepFile.model_validate(raw)
    except ValidationError as err:
        raise ScenarioError(format_validation_error(err, source, raw)) from None


def parse_axis(text: str, option: str) -> tuple[str, list[Any]]:
    """``key=v1,v2,...`` (each value a YAML scalar, as ``--set`` reads it) -> (key, values).
    Raises ValueError with a one-line reason."""
    key, sep, values = text.partition("=")
    if not sep or not key.strip() or not values.strip():
        raise ValueError(f"{option} {text}: expected KEY.PATH=V1,V2,...")
    parsed = []
    for part in values.split(","):
        try:
            parsed.append(yaml.safe_load(part) if part.strip() else None)
        except yaml.YAMLError:
            raise ValueError(f"{option} {key}: cannot parse value {part!r}") from None
    return key.strip(), parsed


def axis_text(value: Any) -> str:
    """An axis value as a table cell: strings as written, everything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def describe(values: Mapping[str, Any], seed: int | None = None) -> str:
    """``cache.block_size=8, eviction.policy=lru, seed 1`` (for error lines)."""
    parts = [f"{k}={axis_text(v)}" for k, v in values.items()]
    if seed is not None:
        parts.append(f"seed {seed}")
    return ", ".join(parts) or "the base scenario"
