"""The engine profiles a scenario's ``scheduler.engine`` names, and how a profile's
defaults reach the scenario. What each profile is lives with the policies
(``policies/engine_rules.py``: pagesim's own rules; ``policies/vllm_v1.py``: vLLM V1's).
"""

from __future__ import annotations

from typing import Any

from policies.engine_rules import PAGESIM, EngineProfile
from policies.vllm_v1 import VLLM_V1

PROFILES: dict[str, EngineProfile] = {profile.name: profile for profile in (PAGESIM, VLLM_V1)}


def profile_of(name: str) -> EngineProfile:
    return PROFILES[name]


#: What ``scheduler.engine`` is when a scenario does not say: users compare pagesim with
#: vLLM, so vLLM's rules (figures measured before 2026-12-03 used ``pagesim``).
DEFAULT_ENGINE = "vllm-v1"


def scheduler_with_defaults(section: Any) -> Any:
    """The ``scheduler`` section's own input with its engine's defaults under what it
    sets; anything malformed is left for validation to report. ``policy: priority``
    without params means the engine's own priority queue."""
    if not isinstance(section, dict):
        return section
    profile = PROFILES.get(section.get("engine", DEFAULT_ENGINE))
    if profile is None:
        return section
    section = {**profile.scheduler, **section}
    if section.get("policy") == "priority" and not section.get("params"):
        section["policy"] = profile.priority_queue
    return section


def preemption_with_defaults(section: Any, engine: str, policy: str) -> Any:
    """The ``preemption`` section's own input with the defaults of the validated
    scheduler's ``engine`` under what it sets (its priority ones under a priority
    ``policy``)."""
    profile = PROFILES[engine]
    if not isinstance(section, dict):
        return section
    priority = policy in ("priority", profile.priority_queue)
    defaults = profile.priority_preemption if priority else profile.preemption
    return {**defaults, **section}
