"""The scenario's JSON schema, for editors: completion, hover text and checks as you type.

It is pydantic's schema of :class:`~sim.config.scenario.Scenario` (validation mode, every
field described by the docstring after it), plus what pydantic cannot see because a
``BeforeValidator`` or a field validator decides it:

* ``model`` and ``hardware`` take a preset name, a full spec, or ``{preset: NAME,
  ...overrides}``; the preset names are listed, each with a one-line summary; ``model``
  also takes ``{config: PATH, ...overrides}`` (a HuggingFace config.json);
* lengths take an integer (fixed) or a preset name (``sharegpt``); a tagged section
  needs its ``kind``, except an arrival, which is Poisson without one;
* policy fields list the registered names of their family (with each policy's summary)
  and accept a ``module:attr`` / ``file.py:attr`` plug-in; ``scheduler.admission``,
  ``scheduler.batching`` and ``preemption.mode`` also take a bare name.

``pagesim schema`` prints it; the README says how to point an editor at it.
"""

from __future__ import annotations

import copy
import inspect
import re
from typing import Any

from pydantic import BaseModel

from sim.catalog.hardware import HardwareSpec, ModelSpec
from sim.catalog.presets import HARDWARE_PRESETS, MODEL_PRESETS
from sim.config.arrivals import PoissonArrival
from sim.config.disaggregation import PoolSpec
from sim.config.offload_tiers import OffloadTierSpec
from sim.config.policy_names import policy_registry
from sim.config.scenario import Scenario
from sim.config.sections import (
    EvictionSpec,
    PolicyChoice,
    PreemptionSpec,
    RoutingSpec,
    SchedulerSpec,
)
from sim.config.workload import LENGTH_PRESETS, PrefixGroupsSpec, SessionsSpec, WorkloadSpec

__all__ = ["JSON_SCHEMA_DIALECT", "scenario_json_schema"]

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

#: fields holding a policy name -> its family in sim.config.sections' registries
POLICY_NAME_FIELDS = {
    (SchedulerSpec, "policy"): "scheduling",
    (PreemptionSpec, "victim"): "preemption",
    (EvictionSpec, "policy"): "eviction",
    (OffloadTierSpec, "eviction"): "eviction",
    (RoutingSpec, "router"): "routing",
    (PoolSpec, "router"): "routing",
}

#: fields holding a PolicyChoice (a bare name or {policy, params}) -> family, and the name
#: of the $defs entry made for that family
POLICY_CHOICE_FIELDS = {
    (SchedulerSpec, "admission"): ("admission", "AdmissionChoice"),
    (SchedulerSpec, "batching"): ("batching", "BatchingChoice"),
    (PreemptionSpec, "mode"): ("preemption mode", "PreemptionModeChoice"),
}

#: fields holding a length distribution (sim.config.workload.LengthDist)
LENGTH_FIELDS = (
    (WorkloadSpec, "input"),
    (WorkloadSpec, "output"),
    (PrefixGroupsSpec, "length"),
    (SessionsSpec, "turns"),
)

#: the fields whose tagged union (``kind``) is widened, and the shorthand's $defs name
ARRIVAL_FIELD = (WorkloadSpec, "arrival")
KINDLESS_POISSON = "PoissonArrivalWithoutKind"

PRESET_FIELDS = {
    "model": (ModelSpec, MODEL_PRESETS, "ModelPresetOverrides"),
    "hardware": (HardwareSpec, HARDWARE_PRESETS, "HardwarePresetOverrides"),
}

#: $defs name of ``model: {config: PATH, ...overrides}`` (sim.config.hf_config)
MODEL_FROM_CONFIG = "ModelFromConfig"

PLUGIN = {
    "type": "string",
    "pattern": ":",
    "description": "A plug-in: ``module:attr``, or ``path/file.py:attr`` (a relative file is "
    "looked up beside the scenario first).",
}

DESCRIPTION = (
    "A pagesim scenario: one LLM serving deployment (model, GPUs, paged KV cache, scheduler "
    "and policies) and the traffic it serves, simulated by ``pagesim run``. Every field has "
    "a default, so ``model: llama-3-8b`` alone is a scenario; ``--set key.path=value`` "
    "overrides any field from the command line."
)


def scenario_json_schema() -> dict[str, Any]:
    """The JSON schema (draft 2020-12) of a scenario file as written, shorthands included:
    what ``pagesim schema`` prints. A new dict each call."""
    schema = Scenario.model_json_schema(mode="validation")
    defs = schema["$defs"]
    for field, (spec, presets, name) in PRESET_FIELDS.items():
        _accept_presets(schema["properties"][field], defs, spec, presets, name)
    _accept_model_config(schema["properties"]["model"], defs)
    for cls, field in LENGTH_FIELDS:
        _accept_length_shorthands(_property(defs, cls, field), defs)
    _accept_kindless_poisson(_property(defs, *ARRIVAL_FIELD), defs)
    for (cls, field), family in POLICY_NAME_FIELDS.items():
        _property(defs, cls, field)["anyOf"] = _policy_names(family)
    for (cls, field), (family, name) in POLICY_CHOICE_FIELDS.items():
        _accept_policy_choice(_property(defs, cls, field), defs, family, name)
    del defs[PolicyChoice.__name__]  # replaced by one entry per family
    _tidy_descriptions(schema)
    rest = {k: v for k, v in schema.items() if k not in ("title", "description", "$defs")}
    header = {"$schema": JSON_SCHEMA_DIALECT, "title": "pagesim scenario"}
    return {**header, "description": DESCRIPTION, **rest, "$defs": defs}


def _property(defs: dict, cls: type[BaseModel], field: str) -> dict:
    return defs[cls.__name__]["properties"][field]


def _accept_presets(prop: dict, defs: dict, spec: type[BaseModel], presets: dict, name: str):
    """``prop`` (a $ref to the spec) also takes a preset name or {preset, ...overrides}."""
    full = prop.pop("$ref")
    fields = copy.deepcopy(defs[spec.__name__]["properties"])
    for field in fields.values():
        field.pop("default", None)  # an override's default is the preset's own value
    defs[name] = {
        "title": f"{spec.__name__} from a preset",
        "description": "A preset with some of its fields overridden: ``{preset: NAME, "
        "FIELD: VALUE, ...}``.",
        "type": "object",
        "properties": {
            "preset": {"description": "The preset to start from.", "anyOf": _presets(presets)},
            **fields,
        },
        "required": ["preset"],
        "additionalProperties": False,
    }
    prop["anyOf"] = [*_presets(presets), {"$ref": full}, {"$ref": f"#/$defs/{name}"}]


def _accept_model_config(prop: dict, defs: dict) -> None:
    """``model`` also takes ``{config: PATH, ...overrides}``; ``config`` never goes with
    ``preset``."""
    fields = copy.deepcopy(defs[ModelSpec.__name__]["properties"])
    config = fields.pop("config")
    del defs[PRESET_FIELDS["model"][2]]["properties"]["config"]
    for field in fields.values():
        field.pop("default", None)  # an override's default is what the file says
    defs[MODEL_FROM_CONFIG] = {
        "title": "ModelSpec from a HuggingFace config.json",
        "description": "A dense model's HuggingFace ``config.json`` (Llama, Mistral, Qwen2/3 or "
        "OPT types) with some of its fields overridden: ``{config: PATH, FIELD: VALUE, ...}``.",
        "type": "object",
        "properties": {
            "config": {"type": "string", "minLength": 1, "description": config["description"]},
            **fields,
        },
        "required": ["config"],
        "additionalProperties": False,
    }
    prop["anyOf"].append({"$ref": f"#/$defs/{MODEL_FROM_CONFIG}"})


def _presets(presets: dict) -> list[dict]:
    return [{"const": key, "description": _summary(presets[key])} for key in sorted(presets)]


def _summary(spec: ModelSpec | HardwareSpec) -> str:
    """One line that tells presets apart in a completion list."""
    if isinstance(spec, ModelSpec):
        return (
            f"{_millions(spec.num_params)} parameters, {spec.num_layers} layers, "
            f"{spec.num_heads} query / {spec.num_kv_heads} KV heads, "
            f"{spec.max_model_len}-token context, {spec.dtype_bytes} bytes per element."
        )
    dense = spec.flops.get("bf16") or spec.flops.get("fp16") or max(spec.flops.values())
    return (
        f"{spec.mem_capacity_bytes / 1e9:.0f} GB at {spec.mem_bandwidth_bytes_s / 1e12:.2f} "
        f"TB/s, {dense / 1e12:.0f} dense 16-bit TFLOP/s."
    )


def _millions(count: int) -> str:
    return f"{count / 1e9:.1f}B" if count >= 1e9 else f"{count / 1e6:.1f}M"


def _accept_length_shorthands(prop: dict, defs: dict) -> None:
    """``128`` means ``{kind: fixed, value: 128}``, ``sharegpt`` the preset."""
    prop["anyOf"] = [
        _tagged_union(prop, defs),
        {
            "type": "integer",
            "minimum": 1,
            "description": "Shorthand for a fixed length: ``{kind: fixed, value: N}``.",
        },
        {
            "enum": sorted(LENGTH_PRESETS),
            "description": "Shorthand for a preset: ``{kind: preset, name: NAME}``.",
        },
    ]


def _accept_kindless_poisson(prop: dict, defs: dict) -> None:
    """``arrival: {rate_rps: 5}`` means Poisson."""
    poisson = copy.deepcopy(defs[PoissonArrival.__name__])
    del poisson["properties"]["kind"]
    poisson["title"] = "PoissonArrival, kind left out"
    defs[KINDLESS_POISSON] = poisson
    prop["anyOf"] = [_tagged_union(prop, defs), {"$ref": f"#/$defs/{KINDLESS_POISSON}"}]


def _tagged_union(prop: dict, defs: dict) -> dict:
    """Take pydantic's discriminated union out of ``prop``. Its members need their tag
    (pydantic picks the member by it) although the tag field has a default: require it,
    which also makes ``oneOf`` unambiguous."""
    tagged = {key: prop.pop(key) for key in ("oneOf", "discriminator")}
    tag = tagged["discriminator"]["propertyName"]
    for ref in tagged["discriminator"]["mapping"].values():
        member = defs[ref.removeprefix("#/$defs/")]
        required = member.get("required", [])
        member["required"] = [tag, *(name for name in required if name != tag)]
    return tagged


def _policy_names(family: str) -> list[dict]:
    """Each registered name of ``family`` with its policy's summary, then plug-ins."""
    registry = policy_registry(family)
    names = [
        {"const": name, "description": _first_paragraph(registry.get(name))}
        for name in registry.names()
    ]
    return [*names, dict(PLUGIN)]


def _first_paragraph(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.split("\n\n")[0]


def _accept_policy_choice(prop: dict, defs: dict, family: str, name: str) -> None:
    """A bare policy name, or ``{policy: NAME, params: {...}}`` with the family's names."""
    prop.pop("$ref")
    choice = copy.deepcopy(defs[PolicyChoice.__name__])
    choice["title"] = name
    choice["properties"]["policy"]["anyOf"] = _policy_names(family)
    defs[name] = choice
    prop["anyOf"] = [*_policy_names(family), {"$ref": f"#/$defs/{name}"}]


_ROLE = re.compile(r":\w+:`~?([^`]+)`")


def _tidy_descriptions(node: Any) -> None:
    """Docstrings read as prose: source line breaks joined (lists and paragraphs kept),
    Sphinx roles (``:mod:`x```) as code."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                node[key] = _reflow(_ROLE.sub(r"``\1``", value))
            else:
                _tidy_descriptions(value)
    elif isinstance(node, list):
        for item in node:
            _tidy_descriptions(item)


def _reflow(text: str) -> str:
    paragraphs = []
    for paragraph in text.strip().split("\n\n"):
        lines: list[str] = []
        for line in paragraph.splitlines():
            if lines and not line.lstrip().startswith(("* ", "- ")):
                lines[-1] += " " + line.strip()
            else:
                lines.append(line.strip())
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)
