"""Policy names in a scenario, checked against their families' registries
(policies.families) without loading any plug-in."""

from __future__ import annotations

from sim.inputs.hints import did_you_mean


def policy_registry(family: str):
    """The registry of a policy family (``scheduling``, ``preemption``, ...): its names
    and its descriptor (policies.families)."""
    from policies.families import FAMILIES  # (imports every policy: only when asked)

    return FAMILIES[family]


def check_policy_name(family: str, name: str) -> str:
    """``name`` if registered in ``family`` or a ``module:attr`` / ``file.py:attr``
    plug-in (loaded at run time, not here: loading runs user code)."""
    registry = policy_registry(family)
    if name in registry:
        return name
    hint = did_you_mean(name, registry.names())
    raise ValueError(f"unknown {registry.family} policy {name!r}{hint}")
