"""The base of every scenario section and spec: frozen, and an unknown key is a one-line
error naming the closest valid field (pydantic's own ``extra="forbid"`` message does not).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

from sim.inputs.hints import did_you_mean


class StrictModel(BaseModel):
    """Base of every scenario section: frozen, and unknown keys are an error that names
    the closest valid field (pydantic's own ``extra="forbid"`` message does not). The
    string literal after a field is its description (in the JSON schema, for editors).
    No number field takes ``.inf``, ``.nan`` or a YAML ``true``/``false`` (pydantic
    would read those as 1 and 0)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False
    )

    @model_validator(mode="before")
    @classmethod
    def _reject_unknown_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            valid = list(cls.model_fields)
            for key, value in data.items():
                if key not in cls.model_fields:
                    raise PydanticCustomError(
                        "unknown_field",
                        "unknown field{hint}",
                        {"field": str(key), "hint": did_you_mean(key, valid)},
                    )
                if isinstance(value, bool) and _number_not_bool(cls.model_fields[key].annotation):
                    raise PydanticCustomError(
                        "bool_for_number",
                        "expected a number, got {value}",
                        {"field": str(key), "value": str(value).lower()},
                    )
        return data


def _number_not_bool(annotation: Any) -> bool:
    """Whether a field of ``annotation`` takes an int or a float but not a bool."""
    seen: set[Any] = set()

    def kinds(node: Any) -> None:
        if isinstance(node, bool):  # a Literal's false or true takes a bool
            seen.add(bool)
        elif node in (int, float, bool):
            seen.add(node)
        for arg in get_args(node):
            kinds(arg)

    kinds(annotation)
    return bool(seen & {int, float}) and bool not in seen


def drop_unset(data: dict[str, Any], unset: Mapping[str, Any]) -> dict[str, Any]:
    """A model's dump less each field of ``unset`` whose value is the one given there.

    For fields added after dumps were pinned (scenario.json, sweep keys, golden files): a
    scenario that leaves them unset dumps exactly the fields it always had, byte for byte.
    Call it from a ``model_serializer(mode="wrap")``."""
    return {k: v for k, v in data.items() if k not in unset or v != unset[k]}


# --------------------------------------------------------------------------------------
# Files referenced by a workload (traces, length tables)
# --------------------------------------------------------------------------------------
