"""Reading a scenario: YAML, ``--set`` overrides, validation into a frozen Scenario."""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    BaseModel,
    ValidationError,
)

from sim.catalog.hardware import HardwareSpec, ModelSpec
from sim.config.errors import ScenarioError, error_path, format_validation_error
from sim.config.scenario import Scenario
from sim.config.workload import (
    expand_length_shorthand,
)
from sim.inputs.hints import did_you_mean
from sim.inputs.textfile import check_regular_file, check_size, non_utf8_line


def load_scenario(
    path: str | Path, overrides: typing.Sequence[str] = (), seed: int | None = None
) -> Scenario:
    """Read, override and validate a scenario file.

    ``overrides`` are ``key.path=value`` strings (value parsed as a YAML scalar) applied
    to the raw mapping before validation; ``seed`` replaces ``simulation.seed``. The
    scenario's ``name`` defaults to the file's stem. Raises ScenarioError (one line).
    """
    source = str(path)
    raw = _read_yaml(Path(path), source)
    for assignment in overrides:
        apply_override(raw, assignment, source)
    if seed is not None:
        apply_override(raw, f"simulation.seed={int(seed)}", source)
    raw.setdefault("name", Path(path).stem)
    return validate_scenario(raw, source, base_dir=Path(path).resolve().parent)


def validate_scenario(raw: dict, source: str = "<scenario>", *, base_dir: Path | None = None):
    """Validate an already-parsed mapping; relative paths resolve against ``base_dir``
    (default: the working directory). Raises ScenarioError (one line)."""
    context = {"base_dir": str(base_dir or Path.cwd())}
    try:
        scenario = Scenario.model_validate(raw, context=context)
    except ValidationError as err:
        raise ScenarioError(
            format_validation_error(err, source, raw), error_path(err, raw)
        ) from None
    scenario._source = source
    scenario._base_dir = Path(context["base_dir"])
    return scenario


def _read_yaml(path: Path, source: str) -> dict:
    if path.exists():  # a FIFO or /dev/zero would hang the read; a folder is named as one
        named = lambda problem: ScenarioError(problem.replace(str(path), source, 1))  # noqa: E731
        check_regular_file(path, named)
        check_size(path, named)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        where = non_utf8_line(path)
        line = f"line {where[0]}: " if where else ""
        raise ScenarioError(f"{source}: {line}not UTF-8 text; save the scenario as UTF-8") from None
    except OSError as err:
        raise ScenarioError(f"{source}: cannot read the scenario: {err.strerror}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "YAML"
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ScenarioError(f"{source}: {where}: invalid YAML: {problem}") from None
    except RecursionError:
        raise ScenarioError(f"{source}: YAML: nested too deeply to read") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ScenarioError(f"{source}: (top level): expected a mapping of sections")
    return raw


def apply_override(raw: dict, assignment: str, source: str = "<scenario>") -> None:
    """Apply one ``key.path=value`` to the raw mapping (mutates ``raw``).

    The path is checked against the schema (a misspelt key names the closest valid one);
    missing sections are created; a preset name or length shorthand on the way is
    expanded so one of its fields can be set. Raises ScenarioError."""
    key, sep, text = assignment.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise ScenarioError(f"{source}: --set {assignment}: expected KEY.PATH=VALUE")
    problem = _schema_path_problem(parts)
    if problem:
        raise ScenarioError(f"{source}: --set {key}: {problem}")
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError:
        raise ScenarioError(f"{source}: --set {key}: cannot parse value {text!r}") from None
    node = raw
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = {}
        elif not isinstance(child, dict):
            child = _expand_shorthand(parts[: depth + 1], child)
            if child is None:
                where = ".".join(parts[: depth + 1])
                raise ScenarioError(
                    f"{source}: --set {key}: {where} is {node[part]!r}, not a section"
                )
        node[part] = child
        node = child
    node[parts[-1]] = value


def _expand_shorthand(path: list[str], value: Any) -> dict | None:
    """The mapping form of a shorthand value (preset name, length shorthand), or None."""
    if path in (["model"], ["hardware"]) and isinstance(value, str):
        return {"preset": value}
    if path[0] == "workload" and path[-1] in ("input", "output", "length", "turns"):
        expanded = expand_length_shorthand(value)
        return expanded if isinstance(expanded, dict) else None
    return None


def _schema_path_problem(parts: list[str]) -> str:
    """Why ``parts`` is not a field path of Scenario ('' if it is). Below a free-form
    dict (policy params) anything goes; union sections accept any variant's fields."""
    classes: list[type[BaseModel]] = [Scenario]
    for depth, part in enumerate(parts):
        if not classes:
            where = ".".join(parts[:depth])
            return f"{where} is a value, not a section"
        fields = {name: cls.model_fields[name] for cls in classes for name in cls.model_fields}
        if part == "preset" and classes[0] in (ModelSpec, HardwareSpec):
            return ""
        if part not in fields:
            return f"unknown field {part!r}{did_you_mean(part, sorted(fields))}"
        classes, open_dict = _section_types(fields[part].annotation)
        if open_dict:
            return ""
    return ""


def _section_types(annotation: Any) -> tuple[list[type[BaseModel]], bool]:
    """The model classes a field can hold, and whether it can hold a free-form dict."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _section_types(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        classes: list[type[BaseModel]] = []
        open_dict = False
        for arg in typing.get_args(annotation):
            sub, sub_open = _section_types(arg)
            classes += sub
            open_dict |= sub_open
        return classes, open_dict
    if origin is dict or annotation is dict:
        return [], True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation], False
    return [], False
