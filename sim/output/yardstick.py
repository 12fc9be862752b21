"""The offline-optimal yardstick in ``pagesim compare``: each run's prefix-cache hit rate
as a fraction of a ``belady`` run's (eviction.policy: belady, policies/eviction.py) on
the same scenario, so a user sees how much an online eviction policy leaves behind.

Runs are comparable when their scenario.json files agree on everything but the name,
the description and the eviction section; a run on another scenario gets no figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Scenario fields that may differ between runs measured against one belady run.
_FREE_FIELDS = ("name", "description", "eviction")


def _comparable(scenario: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in scenario.items() if k not in _FREE_FIELDS}


def _is_belady(scenario: Mapping[str, Any]) -> bool:
    cache = scenario.get("cache") or {}
    eviction = scenario.get("eviction") or {}
    return bool(cache.get("prefix_caching")) and eviction.get("policy") == "belady"


def hit_rate_vs_belady(
    summaries: Mapping[str, Mapping[str, Any]], scenarios: Mapping[str, Mapping[str, Any]]
) -> dict[str, float | None] | None:
    """Per run (``summaries``' names): its prefix hit rate / the first belady run's, or
    None for a run on another scenario or without a hit rate. None when no run used
    belady with prefix caching (or its hit rate is 0: nothing to measure against)."""
    yardstick = next((name for name in summaries if _is_belady(scenarios.get(name, {}))), None)
    if yardstick is None:
        return None
    best = summaries[yardstick].get("prefix_hit_rate")
    if not best:
        return None
    same = _comparable(scenarios[yardstick])
    fractions: dict[str, float | None] = {}
    for name, summary in summaries.items():
        rate = summary.get("prefix_hit_rate")
        comparable = _comparable(scenarios.get(name, {})) == same
        fractions[name] = rate / best if comparable and rate is not None else None
    return fractions
