"""What a run gives the policies it builds, and the one function that builds them.

Every policy of every family is built by :func:`build_policy` from (registry, name,
params, context). A policy declares what it needs from the run by the *names* of its
constructor's parameters: a parameter named like a :class:`PolicyContext` field (see
:data:`CONTEXT_FIELDS`) receives that field; every other parameter comes from the
scenario's ``params``. Nothing is probed on the built object.

    class Deadline:                                     # scheduler.policy: my.py:Deadline
        def __init__(self, slo: SLO, slack_s: float = 0.1):   # slo from the run,
            ...                                               # slack_s from params

A scenario cannot set a context field through ``params``, and a policy that needs one
the run does not have (``served_tokens`` anywhere but a scheduler, say) is an error.
"""

from __future__ import annotations

import inspect
import math
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from policies.registry import Registry
from policies.views import RequestInfo


@dataclass(frozen=True)
class SLO:
    """The run's latency targets (goodput counts requests that meet both)."""

    ttft_s: float
    tpot_s: float


class ServedTokens:
    """Tokens computed per tenant on one replica (prompt and decode tokens). The engine
    counts them only for a scheduler that asks for ``served_tokens``: counting costs
    every step. Policies read it; only the engine adds to it."""

    def __init__(self) -> None:
        self._served: dict[int, int] = {}

    def __call__(self, tenant: int) -> int:
        return self._served.get(tenant, 0)

    def add(self, tenant: int, tokens: int) -> None:
        self._served[tenant] = self._served.get(tenant, 0) + tokens

    def add_each(self, tenants: np.ndarray) -> None:
        """One token for each entry of ``tenants`` (a decode step's sequences)."""
        for tenant, count in zip(*np.unique(tenants, return_counts=True)):
            self.add(int(tenant), int(count))


@dataclass(frozen=True)
class PolicyContext:
    """The run, as policies may see it (read-only). ``requests`` is the whole known
    request stream in arrival order: offline yardsticks (``belady``, ``sjf-oracle``)
    use it, online policies must not."""

    seed: int
    slo: SLO
    block_size: int
    num_blocks: int  # one replica's device pool, in blocks (slots for contiguous pools)
    model: Any  # sim.catalog.hardware.ModelSpec: name, layers, heads, max_model_len, ...
    hardware: Any  # sim.catalog.hardware.HardwareSpec: name, memory, bandwidth, flops
    num_replicas: int
    replica: int | None = None  # which replica the policy serves (None: the router)
    requests: Sequence[RequestInfo] = ()
    served_tokens: ServedTokens | None = field(default=None, compare=False)

    @classmethod
    def standalone(
        cls,
        *,
        block_size: int = 16,
        num_blocks: int = 1024,
        seed: int = 0,
        slo: SLO = SLO(2.0, 0.2),
        requests: Sequence[RequestInfo] = (),
        served_tokens: ServedTokens | None = None,
    ) -> PolicyContext:
        """A context for building a policy outside a run (tests, notebooks): one
        replica, no model or hardware spec."""
        return cls(
            seed=seed,
            slo=slo,
            block_size=block_size,
            num_blocks=num_blocks,
            model=None,
            hardware=None,
            num_replicas=1,
            replica=0,
            requests=tuple(requests),
            served_tokens=served_tokens,
        )

    def value(self, name: str) -> Any:
        """The context field ``name`` as a constructor receives it; ``rng`` is a fresh
        generator seeded from the run's seed (one per policy, so policies never perturb
        each other's draws)."""
        if name == "rng":
            return np.random.default_rng(self.seed)
        return getattr(self, name)


#: Constructor parameter names the run fills in (everything else comes from params).
CONTEXT_FIELDS = frozenset(f.name for f in fields(PolicyContext) if f.name != "seed") | {"rng"}


class PolicyError(ValueError):
    """A policy that cannot be built from its name and params (one line, no prefix: the
    caller names the scenario section)."""


def context_parameters(factory: Callable[..., Any]) -> frozenset[str]:
    """The context fields ``factory``'s constructor asks for."""
    return frozenset(_parameters(factory)) & CONTEXT_FIELDS


def check_params(factory: Callable[..., Any], params: Mapping[str, Any]) -> None:
    """Raise PolicyError if ``params`` names a context field or a parameter ``factory``
    does not take (before anything is built: no user code runs)."""
    takes = _parameters(factory)
    for name in params:
        if name in CONTEXT_FIELDS:
            raise PolicyError(f"{name!r} is given by the run, not by params")
        if name not in takes and not _takes_kwargs(factory):
            valid = sorted(set(takes) - CONTEXT_FIELDS)
            raise PolicyError(
                f"unexpected parameter {name!r} (takes: {', '.join(valid) or 'none'})"
            )
    kinds = _number_kinds(factory)
    for name, value in params.items():
        _check_number(name, value, kinds.get(name))


def _number_kinds(factory: Callable[..., Any]) -> dict[str, type]:
    """The parameters ``factory`` annotates as a plain ``int`` or ``float``."""
    target = factory.__init__ if isinstance(factory, type) else factory
    try:
        hints = typing.get_type_hints(target)
    except Exception:  # (a plug-in's annotations may name what cannot be resolved)
        return {}
    return {name: kind for name, kind in hints.items() if kind in (int, float)}


def _check_number(name: str, value: Any, kind: type | None) -> None:
    """PolicyError unless ``value`` is a number of ``kind`` (None: anything): an int, or
    for a float a finite int or float; a YAML ``true`` is not a number here."""
    if kind is None:
        return
    whole = isinstance(value, int | np.integer) and not isinstance(value, bool)
    if kind is int and not whole:
        raise PolicyError(f"{name} must be an integer, got {value!r}")
    real = whole or isinstance(value, float | np.floating)
    if kind is float and not (real and math.isfinite(value)):
        raise PolicyError(f"{name} must be a finite number, got {value!r}")


def build_policy(
    registry: Registry, name: str, params: Mapping[str, Any], context: PolicyContext
) -> Any:
    """The policy ``name`` of ``registry`` built with ``params`` plus the context fields
    its constructor asks for. Raises PolicyError (one line) for an unknown name, a bad
    parameter, a context field the run does not provide, or what the constructor
    raises as TypeError / ValueError."""
    factory = registry.get(name)  # UnknownPolicy is a PolicyError's sibling (ValueError)
    check_params(factory, params)
    given = dict(params)
    for wanted in context_parameters(factory):
        value = context.value(wanted)
        if value is None:
            raise PolicyError(f"asks for {wanted!r}, which a {registry.family} policy is not given")
        given[wanted] = value
    try:
        return factory(**given)
    except (TypeError, ValueError, ArithmeticError) as err:  # e.g. int(inf): OverflowError
        raise PolicyError(str(err)) from None


def _parameters(factory: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin without a signature: takes nothing known
        return {}
    return {
        name: p
        for name, p in signature.parameters.items()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }


def _takes_kwargs(factory: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind is p.VAR_KEYWORD for p in parameters)
