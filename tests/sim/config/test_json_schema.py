"""The scenario's JSON schema (sim.config.json_schema), the one editors read: every
property described, well formed, and agreeing with the loader on what a scenario may say.

With the ``jsonschema`` package installed, the schema is also checked against its
metaschema and used to validate every shipped scenario; without it those tests are
skipped and only the structural checks written here run."""

from __future__ import annotations

import json
import re
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel, BeforeValidator

from sim.catalog.presets import HARDWARE_PRESETS, MODEL_PRESETS
from sim.config.errors import ScenarioError
from sim.config.json_schema import (
    ARRIVAL_FIELD,
    JSON_SCHEMA_DIALECT,
    LENGTH_FIELDS,
    POLICY_CHOICE_FIELDS,
    POLICY_NAME_FIELDS,
    PRESET_FIELDS,
    scenario_json_schema,
)
from sim.config.loader import validate_scenario
from sim.config.policy_names import policy_registry
from sim.config.scenario import Scenario

try:
    import jsonschema
except ImportError:  # the checks written here still run
    jsonschema = None

needs_jsonschema = pytest.mark.skipif(
    jsonschema is None, reason="jsonschema not installed: metaschema and instance checks skipped"
)

REPO = Path(__file__).resolve().parents[3]
SHIPPED = sorted(p for p in (REPO / "scenarios").rglob("*.yaml") if p.parent.name != "sweeps")
#: (scenarios/sweeps/ holds sweep files, not scenarios: tests/sim/sweep/test_sweep.py)
SCHEMA = scenario_json_schema()

#: keywords of JSON Schema 2020-12 (core, applicator, validation, meta-data, format,
#: unevaluated), plus the OpenAPI ``discriminator`` annotation pydantic writes
KEYWORDS = {
    *("$schema", "$id", "$ref", "$defs", "$comment", "$anchor", "$dynamicRef"),
    *("$dynamicAnchor", "$vocabulary", "title", "description", "default", "examples"),
    *("deprecated", "readOnly", "writeOnly", "type", "enum", "const", "properties"),
    *("patternProperties", "additionalProperties", "required", "propertyNames"),
    *("minProperties", "maxProperties", "dependentRequired", "dependentSchemas"),
    *("items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains"),
    *("minContains", "maxContains", "minimum", "maximum", "exclusiveMinimum"),
    *("exclusiveMaximum", "multipleOf", "minLength", "maxLength", "pattern", "format"),
    *("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "unevaluatedItems"),
    *("unevaluatedProperties", "discriminator"),
}
TYPES = {"null", "boolean", "object", "array", "number", "integer", "string"}
ONE_SCHEMA = ("additionalProperties", "propertyNames", "contains", "not", "if", "then", "else")
ONE_SCHEMA += ("items", "unevaluatedItems", "unevaluatedProperties")
SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "dependentSchemas")


def subschemas(schema: dict, path: str = "#"):
    """(JSON pointer, schema) of ``schema`` and every schema inside it, by keyword: never
    a ``default``, ``const``, ``enum`` or ``examples`` value, which are data."""
    yield path, schema
    for key in ONE_SCHEMA:
        if isinstance(schema.get(key), dict):
            yield from subschemas(schema[key], f"{path}/{key}")
    for key in SCHEMA_LISTS:
        for i, sub in enumerate(schema.get(key, [])):
            yield from subschemas(sub, f"{path}/{key}/{i}")
    for key in SCHEMA_MAPS:
        for name, sub in schema.get(key, {}).items():
            yield from subschemas(sub, f"{path}/{key}/{name}")


def properties(schema: dict):
    """(pointer, property schema) of every property anywhere in the schema."""
    for path, sub in subschemas(schema):
        for name, prop in sub.get("properties", {}).items():
            yield f"{path}/properties/{name}", prop


def resolve(pointer: str) -> dict:
    node = SCHEMA
    for part in pointer.removeprefix("#/").split("/"):
        node = node[part]
    return node


# --- descriptions ------------------------------------------------------------------------


def test_every_property_has_a_description():
    found = list(properties(SCHEMA))
    missing = [path for path, prop in found if not str(prop.get("description", "")).strip()]
    assert not missing, f"{len(missing)} of {len(found)} properties lack a description: {missing}"
    # every field of every scenario model is among them (and the preset overrides' copies)
    fields = sum(len(model.model_fields) for model in scenario_models())
    assert len(found) > fields > 100


def test_every_model_field_has_a_docstring_description():
    """The descriptions come from the docstring after each field (StrictModel's
    use_attribute_docstrings), so a field added without one fails here first."""
    bare = [
        f"{model.__name__}.{name}"
        for model in scenario_models()
        for name, info in model.model_fields.items()
        if not (info.description or "").strip()
    ]
    assert not bare


# --- form --------------------------------------------------------------------------------


def test_the_schema_is_well_formed_json_schema():
    """What the metaschema would say, checked by hand (it runs without jsonschema)."""
    assert json.loads(json.dumps(SCHEMA)) == SCHEMA
    assert SCHEMA["$schema"] == JSON_SCHEMA_DIALECT
    assert SCHEMA["title"] and SCHEMA["description"]
    assert scenario_json_schema() == SCHEMA  # a fresh, equal dict each call
    referenced = set()
    for path, sub in subschemas(SCHEMA):
        assert isinstance(sub, dict), path
        assert set(sub) <= KEYWORDS, f"{path}: unknown keywords {set(sub) - KEYWORDS}"
        types = sub.get("type", [])
        assert set([types] if isinstance(types, str) else types) <= TYPES, path
        if "$ref" in sub:
            assert sub["$ref"].startswith("#/$defs/"), path
            assert isinstance(resolve(sub["$ref"]), dict), f"{path}: dangling {sub['$ref']}"
            referenced.add(sub["$ref"].removeprefix("#/$defs/"))
        for key in ("required", "enum"):
            assert isinstance(sub.get(key, []), list), path
        assert set(sub.get("required", [])) <= set(sub.get("properties", {})), path
        if "enum" in sub:
            assert sub["enum"], path
        if "pattern" in sub:
            re.compile(sub["pattern"])
        for key in ("anyOf", "oneOf", "allOf"):
            assert sub.get(key, [None]), f"{path}: empty {key}"
    assert referenced == set(SCHEMA["$defs"]), "every $defs entry is used, none is missing"


@needs_jsonschema
def test_the_schema_is_valid_under_its_metaschema():
    validator = jsonschema.validators.validator_for(SCHEMA)
    assert validator.META_SCHEMA["$id"].rstrip("#") == JSON_SCHEMA_DIALECT
    validator.check_schema(SCHEMA)


# --- what an editor offers ---------------------------------------------------------------


def offered(prop: dict) -> set[str]:
    """The constant strings a property (or its anyOf branches) lists."""
    branches = [prop, *prop.get("anyOf", []), *prop.get("oneOf", [])]
    return {b["const"] for b in branches if "const" in b} | {
        name for b in branches for name in b.get("enum", [])
    }


def test_presets_are_offered_by_name():
    assert offered(SCHEMA["properties"]["model"]) == set(MODEL_PRESETS)
    assert offered(SCHEMA["properties"]["hardware"]) == set(HARDWARE_PRESETS)
    for _, presets, name in PRESET_FIELDS.values():
        assert offered(SCHEMA["$defs"][name]["properties"]["preset"]) == set(presets)


@pytest.mark.parametrize(
    ("field", "family"),
    [(f, fam) for f, fam in POLICY_NAME_FIELDS.items()]
    + [(f, fam) for f, (fam, _) in POLICY_CHOICE_FIELDS.items()],
    ids=lambda v: v if isinstance(v, str) else f"{v[0].__name__}.{v[1]}",
)
def test_policy_fields_offer_their_registry(field, family):
    model, name = field
    prop = SCHEMA["$defs"][model.__name__]["properties"][name]
    assert offered(prop) == set(policy_registry(family).names())
    assert all(b.get("description") for b in prop["anyOf"] if "const" in b)


def test_every_shorthand_the_models_accept_is_in_the_schema():
    """A BeforeValidator means a field accepts more than its type (a preset name, a bare
    number): json_schema.py must widen each such field, or editors flag valid input."""
    widened = {*LENGTH_FIELDS, ARRIVAL_FIELD, *POLICY_CHOICE_FIELDS}
    widened |= {(Scenario, name) for name in PRESET_FIELDS}
    with_validator = {
        (model, name)
        for model in scenario_models()
        for name, info in model.model_fields.items()
        if any(isinstance(m, BeforeValidator) for m in info.metadata)
    }
    assert with_validator == widened


def test_every_policy_name_field_offers_names():
    """A field checked against a registry (its ``_registered`` validator) must list the
    registry's names in the schema (POLICY_NAME_FIELDS)."""
    checked = {
        (model, field)
        for model in scenario_models()
        for name, decorator in model.__pydantic_decorators__.field_validators.items()
        if name == "_registered"
        for field in decorator.info.fields
    }
    assert checked == set(POLICY_NAME_FIELDS)


# --- agreeing with the loader ------------------------------------------------------------

ACCEPTED = {
    "three lines": {"model": "llama-3-8b", "hardware": "h100-sxm", "workload": {"input": 64}},
    "preset overrides": {
        "model": {"preset": "llama-3-8b", "max_model_len": 4096},
        "hardware": {"preset": "h100-sxm", "mem_capacity_bytes": 96 * 10**9},
    },
    "full model shape": {"model": MODEL_PRESETS["tiny"].model_dump(), "cache": {"num_blocks": 64}},
    "model from config.json": {
        "model": {"config": str(REPO / "scenarios/models/tiny.json"), "max_model_len": 1024},
        "cache": {"num_blocks": 64},
    },
    "length shorthands": {
        "workload": {
            "input": 128,
            "output": "alpaca",
            "prefix": {"num_groups": 2, "length": 512},
            "sessions": {"turns": 3},
        }
    },
    "kindless arrival": {"workload": {"arrival": {"rate_rps": 5}}},
    "policy choices": {
        "scheduler": {
            "policy": "priority",
            "params": {"aging_s": 5},
            "admission": {"policy": "first-chunk"},
            "batching": "prefill-first",
        },
        "preemption": {"mode": "swap", "victim": "most-blocks"},
        "cache": {"cpu_swap_gib": 4},
    },
    "plug-in": {"scheduler": {"policy": "my_policies:Premium"}},
    "duration": {"simulation": {"duration_s": 60}},
}

REJECTED = {
    "misspelt field": {"cache": {"block_sise": 16}},
    "unknown policy": {"scheduler": {"policy": "fcsf"}},
    "unknown mode": {"preemption": {"mode": "swapp"}},
    "unknown preset": {"model": "llama-3"},
    "preset and config": {"model": {"preset": "tiny", "config": "scenarios/models/tiny.json"}},
    "config not a path": {"model": {"config": 3}},
    "zero length": {"workload": {"input": 0}},
    "untagged length": {"workload": {"input": {"value": 5}}},
    "gamma without cv": {"workload": {"arrival": {"kind": "gamma", "rate_rps": 5}}},
    "utilization above 1": {"cache": {"gpu_memory_utilization": 1.5}},
}


def loader_accepts(raw: dict) -> bool:
    try:
        validate_scenario(raw)
    except ScenarioError:
        return False
    return True


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_the_loader_accepts_these(name):
    assert loader_accepts(ACCEPTED[name])


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_the_loader_rejects_these(name):
    assert not loader_accepts(REJECTED[name])


@needs_jsonschema
@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_the_schema_accepts_what_the_loader_accepts(name):
    errors = [e.message for e in validator().iter_errors(ACCEPTED[name])]
    assert not errors


@needs_jsonschema
@pytest.mark.parametrize("name", sorted(REJECTED))
def test_the_schema_rejects_what_the_loader_rejects(name):
    assert not validator().is_valid(REJECTED[name])


@needs_jsonschema
@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(REPO / "scenarios")))
def test_every_shipped_scenario_is_valid_under_the_schema(path):
    """Each file as YAML gives it (no defaults, no presets resolved), then as the run
    records it in scenario.json (everything resolved)."""
    raw = yaml.safe_load(path.read_text())
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator().iter_errors(raw)]
    assert not errors
    scenario = validate_scenario(raw, str(path), base_dir=path.parent)
    dumped = json.loads(json.dumps(scenario.model_dump(mode="json")))
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator().iter_errors(dumped)]
    assert not errors


# --- helpers -----------------------------------------------------------------------------


def validator():
    return jsonschema.validators.validator_for(SCHEMA)(SCHEMA)


def scenario_models() -> list[type[BaseModel]]:
    """Scenario and every model class reachable from its fields' annotations."""
    found: list[type[BaseModel]] = []
    todo: list[typing.Any] = [Scenario]
    while todo:
        item = todo.pop()
        if isinstance(item, type) and issubclass(item, BaseModel):
            if item not in found:
                found.append(item)
                todo += [info.annotation for info in item.model_fields.values()]
        else:
            todo += typing.get_args(item)
    return found
