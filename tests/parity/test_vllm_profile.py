"""The rules of the ``vllm-v1`` engine profile one at a time, on hand-made streams
(each would pass under the rule and fail without it), and what selecting it sets."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from sim.config import Scenario
from sim.recorded.parity import replay
from sim.workload.request import Request

BASE = {
    "format": "pagesim-parity",
    "stream": "hand-made",
    "config": {
        "block_size": 16,
        "num_gpu_blocks": 200,
        "max_num_seqs": 16,
        "max_num_batched_tokens": 512,
        "max_model_len": 4096,
        "enable_prefix_caching": True,
        "long_prefill_token_threshold": 0,
        "policy": "fcfs",
    },
    "step_time": {"step": 0.01, "tokens": 1e-5, "seqs": 1e-4},
    "steps": [],
    "request_times": {},
}


def record(requests, **config):
    rec = copy.deepcopy(BASE)
    rec["config"].update(config)
    rec["requests"] = [
        {"id": f"r{j}", "priority": 0, "n": 1, **row} for j, row in enumerate(requests)
    ]
    return rec


def urgent_behind_a_full_pool(low: int, low_priority: int, urgent_at: float, urgent_len: int):
    """``low`` low-priority long decodes fill a 20-block pool (no prefix cache); a
    high-priority request arrives at ``urgent_at`` when it does not fit. Returns the
    steps and the index of the first step that preempted."""
    rows = [
        {"arrival_s": 0.0, "prompt": [[j, 60]], "max_tokens": 200, "priority": low_priority}
        for j in range(low)
    ]
    rows.append(
        {"arrival_s": urgent_at, "prompt": [[9, urgent_len]], "max_tokens": 4, "priority": 0}
    )
    rec = record(rows, num_gpu_blocks=21, enable_prefix_caching=False, policy="priority")
    steps = replay(rec).steps
    return steps, next(i for i, s in enumerate(steps) if s["preempted"])


def test_selecting_the_profile_sets_vllms_rules_and_explicit_settings_win():
    chosen = Scenario.model_validate(
        {"scheduler": {"engine": "vllm-v1"}, "cache": {"num_blocks": 100}}
    )
    assert chosen.scheduler.batching.policy == "vllm-v1"
    assert chosen.scheduler.admission.policy == "whole-sequence"
    assert chosen.scheduler.watermark == 0.0
    assert chosen.preemption.victim == "last-admitted"
    assert chosen.kv_pool.device_blocks == 99  # block 0 is vLLM's null block
    priority = Scenario.model_validate({"scheduler": {"engine": "vllm-v1", "policy": "priority"}})
    assert priority.scheduler.policy == "strict-priority"
    assert priority.preemption.victim == "lowest-priority"
    mine = Scenario.model_validate(
        {
            "scheduler": {"engine": "vllm-v1", "watermark": 0.05},
            "preemption": {"victim": "most-blocks"},
        }
    )
    assert mine.scheduler.watermark == 0.05 and mine.preemption.victim == "most-blocks"
    default = Scenario.model_validate({"cache": {"num_blocks": 100}})
    assert default.scheduler.engine == "vllm-v1" and default.kv_pool.device_blocks == 99
    own = Scenario.model_validate(
        {"scheduler": {"engine": "pagesim"}, "cache": {"num_blocks": 100}}
    )
    assert own.kv_pool.device_blocks == 100 and own.preemption.victim == "last-arrived"
    assert own.scheduler.batching.policy == "mixed" and own.scheduler.watermark == 0.01


def test_a_burst_sharing_a_prefix_hits_blocks_scheduled_earlier_in_the_same_step():
    shared = [[7, 160]]
    rec = record(
        [
            {"arrival_s": 0.0, "prompt": shared + [[100, 20]], "max_tokens": 2},
            {"arrival_s": 0.0, "prompt": shared + [[101, 20]], "max_tokens": 2},
        ]
    )
    (first, *_) = replay(rec).steps
    assert first["new"] == ["r0", "r1"]
    # r0's chunk registers its ten full prompt blocks as it is scheduled: r1 hits them.
    assert first["prefix_hits"] == {"r0": 0, "r1": 160}
    assert first["scheduled"] == {"r0": 180, "r1": 20}


def test_a_long_chunk_ahead_in_the_running_list_takes_the_budget_of_later_decodes():
    rec = record(
        [
            {"arrival_s": 0.0, "prompt": [[1, 2000]], "max_tokens": 3},
            {"arrival_s": 0.0, "prompt": [[2, 8]], "max_tokens": 5},
        ],
        max_num_batched_tokens=256,
    )
    steps = replay(rec).steps
    # Step 0: r0 takes the whole budget; r1 is not admitted (no budget left).
    assert steps[0]["scheduled"] == {"r0": 256}
    # r1 decodes only once r0's remaining chunks leave budget after them.
    decoding = [s for s in steps if s["scheduled"].get("r1") == 1]
    assert decoding and all(
        "r0" not in s["scheduled"] or s["scheduled"]["r0"] < 256 for s in decoding
    )


def test_admission_needs_the_whole_sequence_free_but_allocates_only_the_chunk():
    # 40 usable blocks after the null block: a 600-token prompt needs 38.
    rec = record(
        [
            {"arrival_s": 0.0, "prompt": [[1, 600]], "max_tokens": 2},
            {"arrival_s": 0.0, "prompt": [[2, 100]], "max_tokens": 2},
        ],
        num_gpu_blocks=41,
        max_num_batched_tokens=64,
    )
    steps = replay(rec).steps
    assert steps[0]["scheduled"] == {"r0": 64}
    assert steps[0]["free_blocks"] == 40 - 4  # only the chunk's blocks are taken
    # r1's seven blocks would fit now, but not beside all of r0: it waits until r0 is done.
    first_r1 = next(i for i, s in enumerate(steps) if "r1" in s["scheduled"])
    assert all("r0" not in s["scheduled"] for s in steps[first_r1 + 1 :])
    assert sum(s["scheduled"].get("r0", 0) for s in steps[:first_r1]) >= 600


def test_no_request_is_admitted_in_a_step_that_preempted():
    # The urgent request would fit in the blocks the preemption frees, but waits a step.
    steps, preempting = urgent_behind_a_full_pool(3, 1, urgent_at=0.3, urgent_len=40)
    assert steps[preempting]["preempted"] == ["r2"]  # the lowest priority, last arrived
    assert steps[preempting]["free_blocks"] >= 3  # r3's three blocks were free
    assert not steps[preempting]["new"]
    assert steps[preempting + 1]["new"] == ["r3"]


@pytest.mark.parametrize("threshold, cap", [(0, 512), (100, 100)])
def test_long_prefill_token_threshold_caps_a_prompt_only_beside_others(threshold, cap):
    rows = [
        {"arrival_s": 0.0, "prompt": [[1, 1000]], "max_tokens": 2},
        {"arrival_s": 0.0, "prompt": [[2, 1000]], "max_tokens": 2},
    ]
    steps = replay(record(rows, long_prefill_token_threshold=threshold)).steps
    assert steps[0]["scheduled"]["r0"] == cap
    alone = replay(record(rows[:1], long_prefill_token_threshold=threshold)).steps
    assert alone[0]["scheduled"] == {"r0": 512}  # nobody to starve: the whole budget


def test_parallel_samples_fan_out_into_requests_that_hit_the_first_ones_prompt():
    rec = record([{"arrival_s": 0.0, "prompt": [[4, 170]], "max_tokens": 3, "n": 3}])
    replayed = replay(rec)
    first = replayed.steps[0]
    assert first["new"] == ["r0#0", "r0#1", "r0#2"]
    assert first["prefix_hits"] == {"r0#0": 0, "r0#1": 160, "r0#2": 160}
    assert first["scheduled"] == {"r0#0": 170, "r0#1": 10, "r0#2": 10}
    assert replayed.steps[1]["scheduled"] == {"r0#0": 1, "r0#1": 1, "r0#2": 1}
    assert replayed.request_times["r0"]["finished_s"] == replayed.steps[2]["t_end"]


def test_the_victim_is_the_running_lists_tail_not_the_last_arrival():
    from policies.preemption import VICTIMS

    class View:  # r0 arrived first but was resumed last: it is the tail
        def admission_order(self, request):
            return {0: 9, 1: 3, 2: 5}[request.req_id]

    running = [
        Request(req_id=i, arrival_s=float(i), prompt=np.ones(4, np.int32), output_len=2)
        for i in range(3)
    ]
    assert VICTIMS.get("last-admitted")().pick(running, View()).req_id == 0
    assert VICTIMS.get("last-arrived")().pick(running, View()).req_id == 2


def test_a_preempted_request_goes_back_under_its_own_priority_not_to_the_front():
    # r1 (low priority) is preempted; r2 (high), waiting since before, fits the blocks
    # that frees and is admitted the step after, while r1 (which does not fit yet)
    # waits: pagesim's own priority policy would keep the resumed r1 first and block r2.
    steps, preempting = urgent_behind_a_full_pool(2, 5, urgent_at=0.6, urgent_len=100)
    assert steps[preempting]["preempted"] == ["r1"]
    assert steps[preempting + 1]["new"] == ["r2"]
