"""Engine profiles: a named set of scheduling rules a scenario selects in one line
(``scheduler.engine: vllm-v1``), each pinned to the engine version it was checked
against.

A profile fills the scheduler, preemption and cache settings the scenario leaves unset
(what the scenario sets explicitly wins) and switches on the engine options that have no
scenario field of their own (:class:`EngineRules`). ``pagesim`` is the simulator's own
rules, as before profiles existed.

``vllm-v1`` is vLLM V1's ``Scheduler.schedule`` (vllm/v1/core/sched/scheduler.py and
kv_cache_manager.py of the pinned version), held step for step against recorded
decisions of the real scheduler by ``tests/parity/``:

* the running loop in admission order, then admissions, none in a step that preempted
  (``scheduler.batching: vllm-v1``);
* admission only if the whole sequence fits, allocation per chunk
  (``scheduler.admission: whole-sequence``, vLLM's ``scheduler_reserve_full_isl``);
* the victim is the tail of the running list, or under ``priority`` the lowest
  priority, latest arrival (``preemption.victim``); vLLM's priority queue keeps
  preempted requests in priority order (``scheduler.policy: strict-priority``);
* a watermark of 0, applied (when set) to resumed requests too, whenever anything runs;
* a chunk's full blocks are offered to prefix lookups as soon as it is scheduled, so a
  request admitted later in the same step hits them;
* block 0 is vLLM's null block: one usable block fewer than ``cache.num_blocks``;
* ``n > 1`` fans out into n requests with one prefill each (vllm/v1/engine/
  parallel_sampling.py), the later ones hitting the first one's prompt blocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class EngineRules:
    """Engine options a profile sets that no scenario field carries."""

    #: A scheduled chunk's full blocks are visible to lookups later in the same step.
    same_step_prefix_hits: bool = False
    #: The watermark applies to resumed (preempted) requests too, not only new ones.
    watermark_for_resumed: bool = False
    #: Blocks of the pool the engine never hands out (vLLM's null block).
    reserved_blocks: int = 0
    #: ``n > 1`` runs as n requests, each prefilled (vLLM V1's parent-request fan-out),
    #: not one prefill whose samples fork.
    fan_out_samples: bool = False
    #: With async scheduling, a sequence that finished in the step just ended frees its
    #: blocks only after the next step is planned (that plan was made before its output).
    async_frees_lag: bool = False


@dataclass(frozen=True)
class EngineProfile:
    name: str
    checked_against: str  # the engine version the rules were held against ("" for pagesim)
    scheduler: dict[str, Any] = field(default_factory=dict)
    preemption: dict[str, Any] = field(default_factory=dict)
    #: preemption defaults when ``scheduler.policy`` is ``priority``
    priority_preemption: dict[str, Any] = field(default_factory=dict)
    rules: EngineRules = EngineRules()


VLLM_VERSION = "0.33.0"

PROFILES: dict[str, EngineProfile] = {
    "pagesim": EngineProfile("pagesim", ""),
    "vllm-v1": EngineProfile(
        "vllm-v1",
        f"vllm {VLLM_VERSION}",
        scheduler={"batching": "vllm-v1", "admission": "whole-sequence", "watermark": 0.0},
        preemption={"victim": "last-admitted", "mode": "recompute"},
        priority_preemption={"victim": "lowest-priority", "mode": "recompute"},
        rules=EngineRules(
            same_step_prefix_hits=True,
            watermark_for_resumed=True,
            reserved_blocks=1,
            fan_out_samples=True,
            async_frees_lag=True,
        ),
    ),
}


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
