"""User mistakes in a scenario, as one line: ``<file>: <field.path>: <what was expected>``.

:func:`format_validation_error` turns pydantic's ValidationError into that line, with
the location as the user wrote it (union tags pydantic inserts are dropped).
"""

from __future__ import annotations

import typing
from typing import Any

from pydantic import (
    ValidationError,
)
from pydantic_core import PydanticCustomError

from sim.config.arrivals import ArrivalSpec
from sim.config.workload import LengthDist
from sim.inputs.hints import did_you_mean
from sim.inputs.user_errors import UserError


class ScenarioError(UserError, ValueError):
    """A user mistake in a scenario file or an override; the message is one line.
    ``field`` is the dotted path it names (``workload.arrival.stages[0].rate_rps``) where
    it came from a field's validation, else None."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def error_at(path: str, message: str) -> PydanticCustomError:
    """An error to report at ``path`` (dotted) from a validator that sees the whole
    scenario (pydantic would otherwise report it at the validator's own level)."""
    return PydanticCustomError("at_path", "{message}", {"path": path, "message": message})


def _kind_tags(*unions: Any) -> set[str]:
    """The ``kind`` literals of tagged-union members, which pydantic inserts into error
    locations (``workload.arrival.poisson.rate_rps``) and the user never wrote."""
    members = (typing.get_args(typing.get_args(union)[0]) for union in unions)
    return {typing.get_args(m.model_fields["kind"].annotation)[0] for ms in members for m in ms}


_TAGS = _kind_tags(LengthDist, ArrivalSpec)


def format_validation_error(err: ValidationError, source: str, raw: Any, at: str = "") -> str:
    """``<file>: <field.path>: <message>`` for the first error, ``(+N more)`` after;
    ``at`` is the path of ``raw`` within its file (``recorded.stages[0]``), if not the
    top level."""
    errors = err.errors(include_url=False)
    path = error_path(err, raw, at) or "(top level)"
    # A value that fits none of a field's forms fails once per form, each at the same
    # place as the user wrote it: one message for the field, naming every form.
    where = _user_loc(errors[0]["loc"], raw)
    forms = [e for e in errors if _user_loc(e["loc"], raw) == where]
    message = _forms_message(forms) if len(forms) > 1 else _message(errors[0])
    rest = len(errors) - len(forms) if len(forms) > 1 else len(errors) - 1
    more = f" (+{rest} more)" if rest else ""
    return f"{source}: {path}: {message}{more}"


def _forms_message(errors: list[dict]) -> str:
    """One field's value rejected by each form the field takes: our own validator's
    message if one of them is one, else every form's expectation and what was given."""
    own = [e for e in errors if e["type"].startswith("value_error") or e["type"] == "at_path"]
    if own:
        return _message(own[0])
    expected: list[str] = []
    for error in errors:
        text = error["msg"].removeprefix("Input should be ").split(", ")[0]
        if text not in expected:
            expected.append(text)
    return f"expected {' or '.join(expected)}, got {shown(errors[0].get('input'))}"


def error_path(err: ValidationError, raw: Any, at: str = "") -> str:
    """The dotted path of ``err``'s first error as the user wrote it ('' at the top)."""
    first = err.errors(include_url=False)[0]
    ctx = first.get("ctx") or {}
    if first["type"] == "at_path":
        path = ctx["path"]
    else:
        loc = _user_loc(first["loc"], raw)
        if first["type"] in ("unknown_field", "bool_for_number"):
            loc.append(ctx["field"])
        if first["type"] in ("union_tag_invalid", "union_tag_not_found"):
            loc.append("kind")
        path = _dotted(loc)
    if at:
        path = f"{at}{'' if path.startswith('[') or not path else '.'}{path}"
    return path


def _dotted(loc: list) -> str:
    """``["workload", "stages", 0, "rate"]`` as ``workload.stages[0].rate``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _user_loc(loc: tuple, raw: Any) -> list:
    """The error location as the user wrote it: drop the union tags pydantic inserts
    (``workload.arrival.poisson.rate_rps`` -> ``workload.arrival.rate_rps``)."""
    out: list = []
    node, written = raw, False
    for part in loc:
        in_dict = isinstance(node, dict) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and part < len(node)
        if written:  # past the value the user wrote: the name of a form it failed
            continue
        if in_dict or in_list:
            node = node[part]
            out.append(part)
            written = not isinstance(node, dict | list)
        elif isinstance(part, str) and (part in _TAGS or "[" in part):
            continue
        else:
            node = None
            out.append(part)
    return out


def _message(error: dict) -> str:
    kind, msg, ctx = error["type"], error["msg"], error.get("ctx") or {}
    got = error.get("input")
    if kind == "at_path":
        return ctx["message"]
    if kind in ("unknown_field", "bool_for_number"):
        return msg
    if kind == "missing":
        return "required field missing"
    if kind == "union_tag_invalid":
        valid = [t.strip(" '") for t in str(ctx.get("expected_tags", "")).split(",")]
        return f"unknown kind {ctx.get('tag')!r}{did_you_mean(ctx.get('tag'), valid)}"
    if kind == "union_tag_not_found":
        return "required field missing (the variant's kind)"
    if kind.startswith("value_error") or kind == "assertion_error":
        return msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if kind in ("model_type", "dict_type", "model_attributes_type", "dataclass_type"):
        msg = "expected an object"  # not pydantic's class name, which the user never wrote
    text = msg.replace("Input should be ", "expected ")
    if ", got " in text:  # pydantic says what it got already ("a fractional part")
        return f"{text} ({shown(got)})"
    return f"{text}, got {shown(got)}"


def shown(value: Any) -> str:
    """``repr(value)``, cut to about 60 characters (a 5,000-digit number or a 10 MB string
    would otherwise become the error line)."""
    try:
        text = repr(value)
    except ValueError:  # an int past Python's 4,300-digit str() limit
        return f"an integer of {value.bit_length():,} bits"
    return text if len(text) <= 60 else text[:50] + f"... ({len(text):,} characters)"
