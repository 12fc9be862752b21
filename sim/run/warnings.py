"""What a run's summary warns about: settings that the run shows could not have mattered,
so that two runs differing only in them are not read as a finding."""

from __future__ import annotations

from typing import Any


def run_warnings(scenario, summary: dict[str, Any]) -> list[str]:
    """One sentence per warning (none: an empty list). Reads the scenario and the
    summary's ``kv`` block; mutates nothing."""
    warnings = []
    if "eviction" in scenario.model_fields_set:
        warnings += _eviction(scenario, summary)
    return warnings


def _eviction(scenario, summary: dict[str, Any]) -> list[str]:
    """An eviction policy chooses only when prefix caching keeps blocks and a full pool
    makes it reclaim one, and its choice matters only if a request ever hits a kept
    block."""
    kv = summary.get("kv") or {}
    policy = scenario.eviction.policy
    if not scenario.cache.prefix_caching:
        return [
            f"eviction.policy {policy} cannot matter: cache.prefix_caching is off, so no "
            "block is ever kept for reuse"
        ]
    if kv.get("evicted_blocks") == 0:
        peak = kv.get("peak_used_fraction")
        seen = "" if peak is None else f" (peak use {100 * peak:.1f} % of the pool)"
        return [
            f"eviction.policy {policy} never chose: no cached block was evicted, the pool "
            f"never ran out of free blocks{seen}"
        ]
    if summary.get("prefix_hit_rate") == 0:
        return [
            f"eviction.policy {policy} could not matter: it evicted blocks, but no request "
            "ever hit the prefix cache (hit rate 0 %), so which blocks it kept made no "
            "difference (the workload shares no prefix)"
        ]
    return []
