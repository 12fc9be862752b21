"""Which allocator a scenario's ``cache.allocator`` names: a shipped one, or a user's
plug-in class (``module:Class`` or ``path/to/file.py:Class``, a relative path looked up
beside the scenario first, as policy plug-ins are).

A plug-in is an :class:`backend.base.Allocator` subclass built as an
:class:`backend.base.AllocatorFactory`: ``Class(num_blocks=..., block_size=...,
num_cpu_blocks=..., enable_prefix_caching=...)``. Its ``supports_prefix_caching`` says
whether ``cache.prefix_caching`` may be on. ``pagesim check-allocator`` runs pagesim's
allocator state machine against one.
"""

from __future__ import annotations

import inspect
from pathlib import Path

from backend.base import Allocator
from backend.shipped import SHIPPED_ALLOCATORS as SHIPPED
from policies.registry import UnknownPolicy, load_object

PLUGIN_FORMS = "a plug-in 'module:Class' or 'path/file.py:Class'"
#: The constructor arguments an error line shows (the others can be long tuples).
_SHOWN = ("num_blocks", "block_size", "num_cpu_blocks", "enable_prefix_caching")


def is_plugin(name: str) -> bool:
    return name not in SHIPPED and ":" in name


def load_allocator_class(spec: str, base_dir: Path | None = None) -> type[Allocator]:
    """The Allocator subclass ``spec`` names (``module:Class`` or ``file.py:Class``; a
    relative .py path is looked up in ``base_dir`` first, then the working directory).
    Runs the plug-in's module. Raises ValueError with one line if it cannot be loaded,
    is not an Allocator subclass, or leaves abstract methods unimplemented."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise ValueError(f"expected {PLUGIN_FORMS}, got {spec!r}")
    if target.endswith(".py") and base_dir is not None and not Path(target).is_absolute():
        beside = base_dir / target
        if beside.is_file():
            target = str(beside)
    if target.endswith(".py") and not Path(target).is_file():
        where = f" (nor in {base_dir})" if base_dir is not None else ""
        raise ValueError(f"cannot load allocator class {spec!r}: file not found: {target}{where}")
    try:
        obj = load_object(f"{target}:{attr}", "allocator", kind="class")
    except UnknownPolicy as err:
        raise ValueError(str(err)) from None
    except Exception as err:  # the plug-in's module itself failed to run
        raise ValueError(
            f"cannot load allocator class {spec!r}: {type(err).__name__}: {err}"
        ) from None
    if not (isinstance(obj, type) and issubclass(obj, Allocator)):
        raise ValueError(f"{spec!r} is not a subclass of backend.base.Allocator (got {obj!r})")
    if inspect.isabstract(obj):
        missing = ", ".join(sorted(obj.__abstractmethods__))
        raise ValueError(f"{spec!r} does not implement the Allocator methods {missing}")
    for flag in CAPABILITY_FLAGS:
        value = getattr(obj, flag, False)
        if not isinstance(value, bool):
            raise ValueError(f"{spec!r}: {flag} must be True or False, got {value!r}")
    return obj


#: The class attributes an allocator declares its capabilities with (backend.base).
CAPABILITY_FLAGS = ("supports_prefix_caching", "supports_kv_groups", "supports_kv_connector")

#: What a KV connector calls on the allocator beside it (capabilities.TakesExternalKV).
CONNECTOR_SEAM = ("prompt_keys", "record_computed_blocks", "take_computed_blocks")


def connector_gap(cls: type[Allocator]) -> str | None:
    """Why no KV connector (the offload tiers) can work beside allocator class ``cls``,
    in a few words; None: one can."""
    if not getattr(cls, "supports_kv_connector", False):
        return "its supports_kv_connector is not True"
    missing = [name for name in CONNECTOR_SEAM if not callable(getattr(cls, name, None))]
    if missing:
        return f"it declares supports_kv_connector but lacks {', '.join(missing)}"
    for command in ("allocate", "can_allocate"):
        if "external_blocks" not in inspect.signature(getattr(cls, command)).parameters:
            return f"it declares supports_kv_connector but its {command} takes no external_blocks"
    return None


def construct(
    cls: type[Allocator],
    *,
    num_blocks: int,
    block_size: int,
    num_cpu_blocks: int,
    enable_prefix_caching: bool,
    **declared,
) -> Allocator:
    """``cls`` built as an AllocatorFactory, with the arguments of the capabilities it
    declares (``declared``: ``kv_groups``).
    Raises ValueError with one line if the constructor fails or returns something else
    than an Allocator."""
    arguments = {
        "num_blocks": num_blocks,
        "block_size": block_size,
        "num_cpu_blocks": num_cpu_blocks,
        "enable_prefix_caching": enable_prefix_caching,
        **declared,
    }
    shown = {k: v for k, v in arguments.items() if k in _SHOWN}
    more = ", ..." if declared else ""
    call = f"{cls.__name__}({', '.join(f'{k}={v!r}' for k, v in shown.items())}{more})"
    try:
        allocator = cls(**arguments)
    except Exception as err:
        raise ValueError(f"cannot construct {call}: {type(err).__name__}: {err}") from None
    if not isinstance(allocator, Allocator):
        raise ValueError(f"{call} returned {allocator!r}, not an Allocator")
    return allocator
