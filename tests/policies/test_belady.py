"""Belady's MIN as the prefix cache's offline optimum: it keeps what the known stream
needs soonest, and on a stream served one request at a time no other policy hits more."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from backend.blocks import BlockManager
from policies.context import PolicyContext, build_policy
from policies.eviction import EVICTORS
from sim.workload.request import Request


def stream(prompts: list[list[int]]) -> list[Request]:
    return [
        Request(i, float(i), np.asarray(p, dtype=np.int32), output_len=1)
        for i, p in enumerate(prompts)
    ]


def hits_served_in_turn(policy: str, requests, num_blocks: int, block_size: int) -> list[int]:
    """Prompt tokens found cached for each request, served alone one after another."""
    context = PolicyContext.standalone(
        block_size=block_size, num_blocks=num_blocks, requests=requests
    )
    manager = BlockManager(
        num_blocks,
        block_size,
        enable_prefix_caching=True,
        evictor=build_policy(EVICTORS, policy, {}, context),
    )
    hits = []
    for request in requests:
        hits.append(manager.allocate(request.req_id, request.prompt, salt=request.tenant))
        manager.mark_computed(request.req_id, request.prompt_len)
        manager.free(request.req_id)
        manager.check_invariants()
    return hits


A, B, C = [1, 1, 7], [2, 2, 7], [3, 3, 7]  # one reusable block each (the last token's
# block is never a hit), and a partly filled block that is never cached


def test_belady_keeps_the_block_needed_soonest():
    # 3 blocks: after A and B two blocks are cached; C needs two, so one cached block
    # goes. The stream needs A again before B: belady drops B, LRU drops A.
    requests = stream([A, B, C, A, B])
    assert hits_served_in_turn("belady", requests, 3, 2) == [0, 0, 0, 2, 0]
    assert hits_served_in_turn("lru", requests, 3, 2) == [0, 0, 0, 0, 0]


def test_a_prompt_the_stream_never_repeats_goes_first():
    requests = stream([A, B, A, C, A])
    assert hits_served_in_turn("belady", requests, 3, 2) == [0, 0, 2, 0, 2]


prompts = st.lists(
    st.sampled_from([[1, 1, 2, 2, 9], [1, 1, 3, 3, 9], [4, 4, 9], [5, 5, 6, 6, 9], [1, 1, 9]]),
    min_size=1,
    max_size=40,
)


@given(prompts=prompts, num_blocks=st.integers(3, 8))
def test_no_policy_hits_more_than_belady_on_a_stream_served_in_turn(prompts, num_blocks):
    requests = stream(prompts)
    best = sum(hits_served_in_turn("belady", requests, num_blocks, 2))
    for policy in ("lru", "fifo", "lfu", "reuse-weighted"):
        assert sum(hits_served_in_turn(policy, requests, num_blocks, 2)) <= best, policy


def test_copies_of_one_prefix_are_each_evictable():
    """Two sequences compute the same prompt at once: both copies stay cached under one
    key (as vLLM's block pool keeps them). Belady tracks each, evicts both in turn and
    forgets the key only with the last one."""
    requests = stream([[1, 2, 3, 4, 9], [1, 2, 3, 4, 9], [5, 6, 7, 8, 9]])
    context = PolicyContext.standalone(block_size=2, num_blocks=6, requests=requests)
    manager = BlockManager(
        6, 2, enable_prefix_caching=True, evictor=build_policy(EVICTORS, "belady", {}, context)
    )
    for seq in (0, 1):  # neither is computed when the other is allocated: no hit
        assert manager.allocate(seq, requests[seq].prompt, computed_tokens=0) == 0
    for seq in (0, 1):
        manager.mark_computed(seq, 5)
        manager.free(seq)
    assert manager.num_cached_blocks == 4  # two copies of each of the two full blocks
    manager.allocate(2, requests[2].prompt)  # 3 blocks: 2 free, then an eviction
    manager.check_invariants()
    assert manager.evict(8) and manager.num_cached_blocks == 0
    manager.check_invariants()
