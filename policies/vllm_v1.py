"""The ``vllm-v1`` engine profile: vLLM V1's ``Scheduler.schedule``
(vllm/v1/core/sched/scheduler.py and kv_cache_manager.py of the pinned version), held
step for step against recorded decisions of the real scheduler by ``tests/parity/``.

Its policies, by name from the registries:

* ``scheduler.batching: vllm-v1`` (:class:`VllmV1`, below): the running loop in
  admission order (the engine's ``step.running()``, sim/engine/planning/
  running_order.py: decodes and prompt chunks share the budget in that order, a miss
  preempts the victim policy's pick), then admissions, none in a step that preempted;
* ``scheduler.admission: whole-sequence``: admission only if the whole sequence fits,
  allocation per chunk (vLLM's ``scheduler_reserve_full_isl``);
* ``preemption.victim: last-admitted``, the tail of the running list, or under
  ``priority`` ``lowest-priority`` (lowest priority, latest arrival); vLLM's priority
  queue keeps preempted requests in priority order (``scheduler.policy:
  strict-priority``); preemption recomputes;
* a watermark of 0.

Its rules (:class:`VllmV1Rules`), what no policy decides:

* a chunk's full blocks are offered to prefix lookups as soon as it is scheduled, so a
  request admitted later in the same step hits them;
* the watermark, when set, holds for resumed requests too, whenever anything runs;
* block 0 is vLLM's null block: one usable block fewer than ``cache.num_blocks`` (and
  the watermark is a fraction of the pool counting it);
* ``n > 1`` fans out into n requests with one prefill each (vllm/v1/engine/
  parallel_sampling.py), the later ones hitting the first one's prompt blocks;
* under async scheduling (the default since vLLM 0.12) step k+1 is planned before step
  k's output is processed: a sequence that finished in step k still holds its blocks
  and its ``max_num_seqs`` slot in that plan, and a block filled by step k's decode is
  registered in the prefix cache only once its token is known, so a sequence preempted
  before then never registered it.
"""

from __future__ import annotations

from collections.abc import Iterable

from backend.base import Allocator
from backend.capabilities import ReleasesBehindProcessed, UnpublishesBlocks
from policies.engine_rules import EngineProfile, EngineRules
from policies.views import StepBuilder

VLLM_VERSION = "0.33.0"


class VllmV1:
    """vLLM V1's step: running requests first, in the order they were admitted (decodes
    and prompt chunks share the budget in that order), then new prompts, but not in a
    step that had to preempt (vllm/v1/core/sched/scheduler.py, ``schedule``). Registered
    as the batching mode ``vllm-v1`` (policies/batching.py)."""

    chunks_prompts = True
    decode_stretches = True  # nothing waiting or prefilling: the running loop is decodes

    def compose(self, step: StepBuilder) -> None:
        step.running()
        if not step.preempted:
            step.admit()


class VllmV1Rules(EngineRules):
    reserved_blocks = 1  # the null block
    fan_out_samples = True

    def chunk_scheduled(self, alloc: Allocator, seq_id: int, computed: int) -> None:
        alloc.mark_computed(seq_id, computed)

    def step_planned(self, alloc: Allocator, chunks: Iterable[tuple[int, int]]) -> None:
        pass  # each chunk was published when it was scheduled

    def window_admission_tokens(self, max_num_batched_tokens: int, async_scheduling: bool):
        # VllmConfig.max_in_flight_tokens: a full budget for each concurrent batch (two
        # under async scheduling, pipeline parallelism 1), SlidingWindowSpec's cap
        return max_num_batched_tokens * (2 if async_scheduling else 1)

    def watermark_applies(self, resumed: bool) -> bool:
        return True

    def step_begins(self, alloc: ReleasesBehindProcessed | None, async_scheduling: bool) -> None:
        # Scheduler.allocate_slots frees a window's blocks behind num_computed_tokens less
        # the request's in-flight tokens: the previous step's, under async scheduling.
        if alloc is not None:
            alloc.begin_step(lag=async_scheduling)

    def frees_lag(self, async_scheduling: bool) -> bool:
        return async_scheduling

    def decodes_preempted(
        self, alloc: Allocator, seq_ids: list[int], async_scheduling: bool
    ) -> None:
        if async_scheduling and isinstance(alloc, UnpublishesBlocks):
            for seq_id in seq_ids:
                alloc.unpublish_last_block(seq_id)


VLLM_V1 = EngineProfile(
    "vllm-v1",
    f"vllm {VLLM_VERSION}",
    scheduler={"batching": "vllm-v1", "admission": "whole-sequence", "watermark": 0.0},
    preemption={"victim": "last-admitted", "mode": "recompute"},
    priority_preemption={"victim": "lowest-priority", "mode": "recompute"},
    priority_queue="strict-priority",  # vLLM's heap: preempted requests keep their place
    rules=VllmV1Rules,
)
