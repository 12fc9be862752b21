"""Eviction policies on hand-written event sequences, pinning the exact victim order."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.context import PolicyContext, build_policy
from policies.eviction import (
    EVICTORS,
    AdaptiveReplacement,
    FirstInFirstOut,
    LeastFrequentlyUsed,
    LeastRecentlyUsed,
    ReuseWeighted,
    SegmentedLRU,
)
from policies.registry import UnknownPolicy


def make(name: str, num_blocks: int = 8, seed: int = 0, **params):
    """A registered policy, built as a run builds it (the prefix key passed to
    ``on_cached`` below is the block id: one key per block, as the index publishes)."""
    context = PolicyContext.standalone(num_blocks=num_blocks, seed=seed)
    return build_policy(EVICTORS, name, params, context)


def reuse(policy, block: int, now: int, key: int | None = None) -> None:
    """What the block manager does on a prefix hit on a cached-evictable block, and on
    the hitting request's release: out of the set, the hit, back into the set."""
    policy.on_removed(block)
    policy.on_hit(block, now)
    policy.on_cached(block, now, block if key is None else key)


def test_registry_names():
    expected = {"lru", "lfu", "fifo", "reuse-weighted", "slru", "arc", "belady"}
    assert expected <= set(EVICTORS.names())


def test_lru_least_recently_released_first_and_hit_removes_from_the_middle():
    lru = LeastRecentlyUsed()
    for now, block in enumerate((5, 3, 9)):
        lru.on_cached(block, now, block)
    lru.on_removed(3)  # a prefix hit took it back into use
    lru.on_hit(3, 4)
    lru.on_cached(3, 5, 3)  # released again: now the most recent
    assert 3 in lru and len(lru) == 3
    assert lru.pick_victims(2) == [5, 9]
    assert lru.pick_victims(5) == [3] and len(lru) == 0


def test_fifo_keeps_the_first_caching_time_across_reuse():
    fifo = FirstInFirstOut()
    fifo.on_cached(5, 1, 5)
    fifo.on_cached(3, 2, 3)
    fifo.on_removed(5)
    fifo.on_hit(5, 3)
    fifo.on_cached(5, 4, 5)
    assert fifo.pick_victims(2) == [5, 3]
    # Evicted blocks forget their history: block 5 cached afresh is now the newest.
    fifo.on_cached(5, 10, 5)
    fifo.on_cached(7, 8, 7)
    assert fifo.pick_victims(2) == [7, 5]


def test_lfu_fewest_hits_first_ties_by_recency():
    lfu = LeastFrequentlyUsed()
    for block, hits in ((1, 2), (3, 1)):
        for _ in range(hits):
            lfu.on_hit(block, 0)
    for now, block in enumerate((1, 2, 3, 5, 4)):
        lfu.on_cached(block, now, block)
    assert lfu.pick_victims(5) == [2, 5, 4, 3, 1]


def test_lfu_forgets_the_hits_of_an_evicted_block():
    lfu = LeastFrequentlyUsed()
    lfu.on_hit(1, 0)
    lfu.on_cached(1, 1, 1)
    lfu.on_cached(2, 2, 2)
    assert lfu.pick_victims(2) == [2, 1]
    lfu.on_cached(1, 3, 1)  # the block holds a new prefix now: zero hits
    lfu.on_cached(2, 4, 2)
    assert lfu.pick_victims(1) == [1]


def test_reuse_weighted_protects_reused_blocks_until_they_age():
    policy = ReuseWeighted(half_life=10)
    for _ in range(5):
        policy.on_hit(1, 0)  # value 6 at time 0
    policy.on_cached(1, 0, 1)
    policy.on_cached(2, 10, 2)  # value 1 at time 10: worth less than 6 halved once
    assert policy.pick_victims(1) == [2]

    policy.on_cached(3, 100, 3)  # 6 halved ten times is far below a fresh 1
    assert policy.pick_victims(2) == [1, 3]


def test_heap_policies_stay_small_under_hit_churn():
    lfu = LeastFrequentlyUsed()
    for now in range(10_000):
        lfu.on_cached(now % 7, now, now % 7)
        lfu.on_removed(now % 7)
    assert len(lfu) == 0 and len(lfu._set._heap) <= 64 + 2


def test_random_is_reproducible_under_a_seed():
    def order(seed):
        policy = make("random", seed=seed)
        for block in range(20):
            policy.on_cached(block, block, block)
        policy.on_removed(4)
        return policy.pick_victims(30)

    assert order(1) == order(1)
    assert order(1) != order(2)  # the order really comes from the generator
    assert sorted(order(1)) == [b for b in range(20) if b != 4]


def test_slru_a_reused_block_survives_a_scan_of_blocks_seen_once():
    # 8 blocks, protected holds floor(0.8 * 8) = 6.
    #   cache 0            probation [0]            protected []
    #   reuse 0 twice      probation []             protected [0]
    #   cache 1..5 (scan)  probation [1 2 3 4 5]    protected [0]
    # Victims: probation least recent first, then protected. LRU takes 0 first.
    slru, lru = SegmentedLRU(num_blocks=8), LeastRecentlyUsed()
    for policy in (slru, lru):
        policy.on_cached(0, 0, 0)
        reuse(policy, 0, 1)
        reuse(policy, 0, 2)
        for block in range(1, 6):
            policy.on_cached(block, 2 + block, block)
    assert slru.pick_victims(5) == [1, 2, 3, 4, 5]
    assert slru.pick_victims(5) == [0] and len(slru) == 0
    assert lru.pick_victims(1) == [0]


def test_slru_overflow_demotes_and_eviction_forgets_the_history():
    # 4 blocks, protected_fraction 0.5: protected holds 2.
    #   cache 0 1 2        probation [0 1 2]   protected []
    #   reuse 0            probation [1 2]     protected [0]
    #   reuse 1            probation [2]       protected [0 1]
    #   reuse 2            protected [0 1 2] is over 2: its least recent, 0, is demoted
    #                      probation [0]       protected [1 2]
    #   cache 3            probation [0 3]     protected [1 2]
    slru = SegmentedLRU(num_blocks=4, protected_fraction=0.5)
    for block in (0, 1, 2):
        slru.on_cached(block, block, block)
    for block in (0, 1, 2):
        reuse(slru, block, 3 + block)
    slru.on_cached(3, 6, 3)
    assert slru.pick_victims(4) == [0, 3, 1, 2]
    # The ids now hold new content. 1 gets a hit while in use (its first release then
    # protects it); 2's hits were forgotten at eviction, so it is on probation again.
    #   cache 2, 1, 0      probation [2 0]     protected [1]
    slru.on_hit(1, 7)
    for now, block in enumerate((2, 1, 0), start=8):
        slru.on_cached(block, now, block)
    assert slru.pick_victims(3) == [2, 0, 1]


@pytest.mark.parametrize("fraction", [0, 1, 1.5, -0.1, math.nan])
def test_slru_rejects_a_protected_fraction_outside_0_1(fraction):
    with pytest.raises(ValueError, match=r"^protected_fraction must be in \(0, 1\), got") as err:
        SegmentedLRU(num_blocks=8, protected_fraction=fraction)
    # The run prefixes the policy's name; the message must not repeat it.
    assert "slru" not in str(err.value).lower() and "segmented" not in str(err.value).lower()


@pytest.mark.parametrize("policy", [SegmentedLRU, AdaptiveReplacement])
@pytest.mark.parametrize("num_blocks", [0, -3, 2.5, True])
def test_new_policies_need_a_positive_block_count(policy, num_blocks):
    with pytest.raises(ValueError, match=r"^num_blocks must be an integer >= 1, got"):
        policy(num_blocks=num_blocks)


def test_arc_a_scan_of_new_blocks_does_not_flush_t2():
    # 8 blocks. 0 and 1 are reused, so they sit in T2; a scan of six blocks seen once
    # (ids never evicted, so no ghost hits) fills T1 while p stays 0.
    #   T1 [2 3 4 5 6 7]   T2 [0 1]   p 0
    # REPLACE takes T1 while |T1| > p: the whole scan goes before T2 is touched, and
    # the victims' ids become B1 ghosts.
    arc = AdaptiveReplacement(num_blocks=8)
    for block in (0, 1):
        arc.on_cached(block, block, block)
        reuse(arc, block, 2 + block)
    for block in range(2, 8):
        arc.on_cached(block, 2 + block, block)
    assert arc.pick_victims(6) == [2, 3, 4, 5, 6, 7]
    assert arc.target == 0 and sorted(arc.blocks()) == [0, 1]
    assert list(arc._b1) == [2, 3, 4, 5, 6, 7] and not arc._b2
    assert arc.pick_victims(2) == [0, 1]


def test_arc_p_adapts_on_ghost_hits():
    # 4 blocks. Keys name contents; block ids are reused for other content at once.
    # Key 100 (block 0) reused -> T2 [0]; keys 101, 102 (blocks 1, 2) seen once -> T1 [1 2].
    arc = AdaptiveReplacement(num_blocks=4)
    arc.on_cached(0, 0, 100)
    reuse(arc, 0, 1, key=100)
    arc.on_cached(1, 2, 101)
    arc.on_cached(2, 3, 102)
    # |T1| 2 > p 0: T1's least recent goes.            T1 [2]   B1 [101]
    assert arc.pick_victims(1) == [1]
    # Block 1 comes back holding other content (key 201): no ghost hit.
    arc.on_cached(1, 4, 201)
    assert arc.target == 0 and list(arc._t1) == [2, 1] and list(arc._b1) == [101]
    # Key 101 computed again (in block 3): a B1 ghost hit, p += max(|B2|/|B1|, 1) = 1,
    # and the content, now seen twice, enters T2:   T2 [0 3]  B1 []
    arc.on_cached(3, 5, 101)
    assert arc.target == 1 and list(arc._t2) == [0, 3] and not arc._b1
    # |T1| 2 > p 1: 2 goes (B1 [102]); then |T1| 1 = p: T2 gives 0, then 3 (B2 [100 101]).
    assert arc.pick_victims(3) == [2, 0, 3]
    # Key 100 back: a B2 ghost hit. p -= max(|B1|/|B2|, 1) = 1.
    arc.on_cached(0, 6, 100)
    assert arc.target == 0 and list(arc._t2) == [0]
    assert list(arc._b1) == [102] and list(arc._b2) == [101]


def test_arc_keeps_the_paper_s_ghost_bounds():
    # A block manager's ids are below num_blocks, so ghosts and members (distinct ids)
    # never outnumber it; another caller's id 5 shows the bound |T1| + |B1| <= 2 at work.
    # Evicting 0 then 1 from T1 fills B1 [0 1]; caching 5 pushes B1's oldest out.
    arc = AdaptiveReplacement(num_blocks=2)
    arc.on_cached(0, 0, 0)
    arc.on_cached(1, 1, 1)
    assert arc.pick_victims(2) == [0, 1] and list(arc._b1) == [0, 1]
    arc.on_cached(5, 2, 5)
    assert list(arc._t1) == [5] and list(arc._b1) == [1]


events = st.lists(
    st.tuples(st.sampled_from(["cache", "remove", "hit", "pick"]), st.integers(0, 7)),
    max_size=60,
)


@pytest.mark.parametrize("name", EVICTORS.names())
@given(script=events)
def test_every_policy_is_a_consistent_set(name, script):
    """Against a plain set: victims are members, each returned once, sizes agree."""
    policy = make(name)
    members: set[int] = set()
    for now, (action, block) in enumerate(script):
        if action == "cache" and block not in members:
            policy.on_cached(block, now, block)
            members.add(block)
        elif action == "remove" and block in members:
            policy.on_removed(block)
            members.discard(block)
        elif action == "hit":
            policy.on_hit(block, now)
        elif action == "pick":
            victims = policy.pick_victims(block % 3)
            assert len(victims) == min(block % 3, len(members))
            assert len(set(victims)) == len(victims) and set(victims) <= members
            members -= set(victims)
        assert len(policy) == len(members) and set(policy.blocks()) == members


@st.composite
def block_manager_scripts(draw):
    """A pool size and events in the order a block manager gives them. Each block is
    free, in use or cached-evictable; only an in-use block is released (on_cached), a
    hit on a cached block takes it out first (on_removed, then on_hit), only in-use or
    cached blocks are hit, and victims are reused (in use) or freed."""
    num_blocks = draw(st.integers(1, 8))
    actions = st.sampled_from(["take", "release", "hit", "reclaim", "evict"])
    script = draw(st.lists(st.tuples(actions, st.integers(0, 7)), max_size=80))
    return num_blocks, script


@pytest.mark.parametrize(
    ("name", "params"),
    [("slru", {}), ("slru", {"protected_fraction": 0.3}), ("arc", {})],
)
@given(drawn=block_manager_scripts())
def test_new_policies_under_the_event_contract(name, params, drawn):
    num_blocks, script = drawn
    policy = make(name, num_blocks, **params)
    state = dict.fromkeys(range(num_blocks), "free")
    for now, (action, value) in enumerate(script):
        block = value % num_blocks
        if action == "take" and state[block] == "free":
            state[block] = "in use"
        elif action == "release" and state[block] == "in use":
            policy.on_cached(block, now, block)
            state[block] = "cached"
        elif action == "hit" and state[block] != "free":
            if state[block] == "cached":
                policy.on_removed(block)
            policy.on_hit(block, now)
            state[block] = "in use"
        elif action in ("reclaim", "evict"):
            count = value % 4
            live = sum(s == "cached" for s in state.values())
            victims = policy.pick_victims(count)
            assert len(victims) == min(count, live) and len(set(victims)) == len(victims)
            assert all(state[v] == "cached" for v in victims)
            for victim in victims:
                state[victim] = "in use" if action == "reclaim" else "free"
        members = {b for b, s in state.items() if s == "cached"}
        assert len(policy) == len(policy.blocks()) == len(members)
        assert set(policy.blocks()) == members
        assert all((b in policy) == (b in members) for b in range(num_blocks))
        assert len(policy._reused) <= num_blocks
        if name == "slru":
            assert len(policy._protected) <= policy.protected_capacity
        else:
            ghosts = len(policy._b1) + len(policy._b2)
            assert len(policy._t1) + len(policy._b1) <= num_blocks
            assert len(policy) + ghosts <= 2 * num_blocks
            assert not (set(policy._b1) | set(policy._b2)) & members
            assert 0 <= policy.target <= num_blocks


def test_unknown_eviction_policy_lists_valid_names():
    with pytest.raises(UnknownPolicy, match="lru"):
        EVICTORS.get("nope")
