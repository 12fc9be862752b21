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


def apply_engine_profile(data: Any) -> Any:
    """The scenario's raw ``data`` with its engine profile's defaults filled in where
    the scenario says nothing; anything malformed is left for validation to report.
    Under ``vllm-v1``, ``scheduler.policy: priority`` means vLLM's queue
    (``strict-priority``)."""
    if not isinstance(data, dict):
        return data
    sched = data.get("scheduler", {})
    if not isinstance(sched, dict):
        return data
    engine = sched.get("engine", DEFAULT_ENGINE)
    if engine not in PROFILES:
        return data
    profile = PROFILES[engine]
    if not profile.checked_against:
        return data
    sched = {**profile.scheduler, **sched}
    priority = sched.get("policy") in ("priority", "strict-priority")
    if sched.get("policy") == "priority" and not sched.get("params"):
        sched["policy"] = "strict-priority"
    preemption = data.get("preemption", {})
    if not isinstance(preemption, dict):
        return {**data, "scheduler": sched}
    defaults = profile.priority_preemption if priority else profile.preemption
    return {**data, "scheduler": sched, "preemption": {**defaults, **preemption}}
