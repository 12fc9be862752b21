"""A tiny name -> plug-in registry, one per policy family, which is also the family's
descriptor: the scenario field that names one of its policies, where that policy's
parameters go, and what the engine asks of a built policy (the methods and bool flags of
the family's Protocol). Validation, building and ``pagesim list`` read these; the
families themselves are listed in :mod:`policies.families`.

Scenarios name policies by string; the schema validates the name against the registry
so a typo is a clear error listing the valid names, never a KeyError deep in a run.
A name of the form ``module:attribute`` or ``path/to/file.py:attribute`` loads a user's
own plug-in without touching pagesim.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownPolicy(ValueError):
    """A policy name that is neither registered nor a loadable ``module:attribute``."""


class Registry(Generic[T]):
    """Maps names to plug-ins (classes or factories) of one family, and describes it.

    ``field``: the scenario field that names a policy of the family (``scheduler.policy``;
    default the family's name);
    ``params_field``: where its constructor's keyword arguments are written (default
    ``<field>.params``); ``methods``: what the engine calls on a built policy; ``flags``:
    bool attributes it reads; ``optional_flags``: bool attributes a policy may leave out,
    read as False (a plug-in's guard answers for them)."""

    def __init__(
        self,
        family: str,
        *,
        field: str | None = None,
        params_field: str | None = None,
        methods: tuple[str, ...] = (),
        flags: tuple[str, ...] = (),
        optional_flags: tuple[str, ...] = (),
    ):
        self.family = family
        self.field = field or family
        self.params_field = params_field or f"{self.field}.params"
        self.methods, self.flags, self.optional_flags = methods, flags, optional_flags
        self._entries: dict[str, T] = {}

    def missing_methods(self, policy: object) -> list[str]:
        """The family's methods ``policy`` (a built plug-in) does not have."""
        return [m for m in self.methods if not callable(getattr(policy, m, None))]

    def bad_flag(self, policy: object) -> tuple[str, object] | None:
        """A flag of ``policy`` that is not a bool, with its value (None: all are)."""
        for flag in self.flags + self.optional_flags:
            value = getattr(policy, flag, False if flag in self.optional_flags else None)
            if not isinstance(value, bool):
                return flag, value
        return None

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register the decorated object under ``name`` (unique)."""

        def add(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.family} policy {name!r} is already registered")
            self._entries[name] = obj
            return obj

        return add

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries or (isinstance(name, str) and ":" in name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def get(self, name: str) -> T:
        """The plug-in registered as ``name``, or loaded from ``module:attribute``.

        Raises UnknownPolicy naming the valid choices."""
        if name in self._entries:
            return self._entries[name]
        if ":" in name:
            return load_object(name, self.family)
        raise UnknownPolicy(
            f"unknown {self.family} policy {name!r}; valid: {', '.join(self.names())}"
        )


@functools.cache
def load_object(spec: str, family: str = "plug-in", kind: str = "policy"):
    """Load ``module:attribute`` or ``path/to/file.py:attribute``, once per spec (a run
    builds a policy per replica from the same class). Raises UnknownPolicy ("cannot load
    <family> <kind> <spec>: why") if it cannot be imported or found."""
    target, _, attr = spec.rpartition(":")
    try:
        if target.endswith(".py"):
            path = Path(target)
            module_spec = importlib.util.spec_from_file_location(path.stem, path)
            if module_spec is None or module_spec.loader is None or not path.is_file():
                raise FileNotFoundError(target)
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
        return getattr(module, attr)
    except (ImportError, FileNotFoundError, AttributeError) as err:
        raise UnknownPolicy(f"cannot load {family} {kind} {spec!r}: {err}") from None
    except Exception as err:  # the user's module failed while running (a syntax error, ...)
        why = f"{type(err).__name__}: {err}"
        raise UnknownPolicy(f"cannot load {family} {kind} {spec!r}: {why}") from None
