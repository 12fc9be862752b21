"""The offload tiers below the device pool (backend/connectors/offload.py), a KV
connector beside the paged manager, rule by rule, as the engine meets them (through
backend/connectors/seam.py). The allocator state machine (test_allocator_checker.py)
drives them at random as well."""

from __future__ import annotations

import numpy as np
import pytest

from backend.base import NULL_BLOCK, InvalidRequest, KVGroup
from backend.blocks import BlockManager
from backend.capabilities import TakesExternalKV
from backend.connectors.offload import OffloadConnector, TierSpec, group_key
from backend.connectors.seam import ConnectorSeam
from backend.transfer import CPU, DISK, REMOTE, SWAP_IN, SWAP_OUT

PROMPT = [1, 2, 3, 4, 5, 6, 7]  # three full blocks of 2, then the last token


class Tiered:
    """A paged manager of blocks of 2 with the tiers ``TierSpec(CPU, tier), *lower``
    beside it: prompts, lookups and each step's moves go through the seam, every other
    command to the manager."""

    def __init__(self, num_blocks=4, tier=16, lower=(), num_cpu_blocks=0):
        self.m = BlockManager(
            num_blocks, 2, enable_prefix_caching=True, num_cpu_blocks=num_cpu_blocks
        )
        specs = [TierSpec(CPU, tier), *lower]
        self.tiers = OffloadConnector.build(specs, 2, cpu_base=num_cpu_blocks)
        self.seam = ConnectorSeam(self.m, self.tiers)

    def __getattr__(self, name):
        return getattr(self.m, name)

    def allocate(self, seq, prompt, *, salt=0, computed_tokens=None) -> int:
        return self.seam.allocate(seq, np.asarray(prompt, np.int32), salt, computed_tokens)

    def cached_prefix_tokens(self, prompt, *, salt=0) -> int:
        return self.seam.cached_prefix_tokens(prompt, salt=salt)

    def take_tier_transfers(self):
        return self.seam.take_transfers()

    @property
    def tier_stats(self):
        return self.tiers.tier_stats

    def check_invariants(self) -> None:
        self.m.check_invariants()
        self.tiers.check_invariants()


def manager(num_blocks=4, tier=16, **kwargs) -> Tiered:
    return Tiered(num_blocks, tier, **kwargs)


def computed(m: Tiered, seq: int, prompt, **kwargs) -> int:
    """Admit ``prompt`` as ``seq`` with its KV computed; returns the hit tokens."""
    return m.allocate(seq, prompt, computed_tokens=None, **kwargs)


def push_out(m: Tiered, first_seq: int) -> None:
    """Fill the device with other prompts until nothing of PROMPT is cached there."""
    for n, value in enumerate((9, 8)):
        computed(m, first_seq + n, [value] * 8)
        m.take_tier_transfers()
        m.free(first_seq + n)


def test_write_through_stores_every_computed_block_once_after_the_forward():
    m = manager()
    assert isinstance(m.m, TakesExternalKV)
    m.allocate(0, PROMPT, computed_tokens=0)
    assert m.take_tier_transfers() == ((), ())  # nothing computed yet: nothing to store
    m.mark_computed(0, 4)
    loads, stores = m.take_tier_transfers()
    assert not loads and [t.route for t in stores] == [SWAP_OUT] * 2
    assert [t.src for t in stores] == m.block_table(0)[:2]
    assert all(t.dst >= m.num_cpu_blocks for t in stores)  # the tier's CPU blocks
    m.mark_computed(0, 7)
    assert len(m.take_tier_transfers().stores) == 1  # only the newly computed full block
    m.free(0)
    computed(m, 1, PROMPT)  # a device hit: published again, never stored again
    assert m.take_tier_transfers().stores == ()
    assert m.tier_stats[0].stored_blocks == 3


def test_a_sequence_gone_before_the_forward_has_nothing_stored():
    """Published in a plan, then preempted or swapped out in the same plan: no forward
    computes its blocks, so the tier must not copy them (vLLM's connector stores only
    the blocks of the requests a step runs)."""
    m = manager(num_cpu_blocks=4)
    computed(m, 0, PROMPT)
    m.free(0)
    computed(m, 1, [5] * 5)
    m.swap_out(1)
    assert m.take_tier_transfers().stores == ()
    assert m.tier_stats[0].stored_blocks == 0
    m.check_invariants()


def test_a_prefix_the_device_evicted_is_loaded_from_the_tier_into_fresh_blocks():
    m = manager()
    computed(m, 0, PROMPT)
    m.take_tier_transfers()
    m.free(0)
    push_out(m, 1)
    assert m.cached_prefix_tokens(PROMPT) == 6
    assert computed(m, 3, PROMPT) == 6  # the whole prefix short of the last token
    loads, stores = m.take_tier_transfers()
    assert [t.route for t in loads] == [SWAP_IN] * 3 and not stores
    assert [t.dst for t in loads] == m.block_table(3)[:3]
    assert m.read_tokens(3).tolist() == PROMPT
    assert m.tier_stats[0].loaded_blocks == 3 and m.tier_stats[0].hit_tokens == 6
    assert m.prefix_cache_stats.hits_tokens == 0  # the device's own cache had none
    m.check_invariants()


def test_the_tier_keeps_tenants_apart_and_never_serves_the_last_token():
    m = manager()
    computed(m, 0, PROMPT, salt=7)
    m.take_tier_transfers()
    m.free(0)
    push_out(m, 1)
    assert m.cached_prefix_tokens(PROMPT, salt=8) == 0
    assert m.cached_prefix_tokens(PROMPT[:6], salt=7) == 4  # block 3 holds the last token
    assert computed(m, 3, PROMPT, salt=8) == 0


def test_a_full_tier_evicts_by_its_own_policy_and_a_load_renews_recency():
    m = manager(num_blocks=8, tier=4)
    a, b = [1, 1, 2, 2, 9], [3, 3, 4, 4, 9]
    computed(m, 0, a)
    computed(m, 1, b)
    m.take_tier_transfers()  # the tier holds a's two blocks, then b's
    m.free(0)
    m.free(1)
    m.evict(8)  # the device forgets both
    assert computed(m, 2, a) == 4  # a loaded: now the most recent
    m.take_tier_transfers()
    computed(m, 3, [5, 5, 9])
    m.take_tier_transfers()  # the tier is full: its least recent block (b's first) goes
    assert m.tier_stats[0].evicted_blocks == 1
    m.free(2)
    m.evict(8)
    assert m.cached_prefix_tokens(a) == 4 and m.cached_prefix_tokens(b) == 0


def test_a_block_evicted_from_the_device_before_its_store_is_due_is_not_stored():
    m = manager(num_blocks=2, tier=8)
    computed(m, 0, [1, 1, 2])
    m.free(0)
    computed(m, 1, [3, 3, 4, 4])  # takes back the cached block before any store ran
    stores = m.take_tier_transfers().stores
    assert sorted(t.src for t in stores) == sorted(m.block_table(1))  # [3, 3] and [4, 4]
    assert m.cached_prefix_tokens([1, 1, 2]) == 0  # [1, 1] was never stored


def test_a_tier_needs_prefix_caching_and_a_manager_without_one_records_nothing():
    tiers = OffloadConnector.build([TierSpec(CPU, 4)], 2, cpu_base=0)
    with pytest.raises(InvalidRequest, match="prefix caching"):
        ConnectorSeam(BlockManager(4, 2), tiers)
    plain = BlockManager(4, 2, enable_prefix_caching=True)
    plain.allocate(0, [1, 2, 3])
    plain.mark_computed(0, 3)
    assert plain.take_computed_blocks() == []  # nobody asked it to record
    assert np.array_equal(plain.read_tokens(0), [1, 2, 3])


def test_external_blocks_past_the_prompt_are_refused_and_change_nothing():
    m = BlockManager(4, 2, enable_prefix_caching=True)
    before = m.snapshot()
    with pytest.raises(InvalidRequest, match="external_blocks"):
        m.allocate(0, PROMPT, external_blocks=4)  # 3 full blocks precede the last token
    assert m.snapshot() == before
    assert m.allocate(0, PROMPT, external_blocks=3) == 6  # all three: counted computed
    assert m.cached_prefix_tokens(PROMPT) == 6  # and offered to lookups at once


def test_a_disk_tier_takes_every_store_by_cascade_and_serves_through_the_cpu_tier():
    """vLLM 0.33's tiering: a CPU store cascades to the disk; a key the CPU tier lost is
    promoted from the disk into a CPU block and loaded from there."""
    m = manager(tier=4, lower=(TierSpec(DISK, 16),))
    computed(m, 0, PROMPT)
    stores = m.take_tier_transfers().stores
    assert [t.route for t in stores] == [SWAP_OUT, (CPU, DISK)] * 3
    assert [t.src for t in stores[1::2]] == [t.dst for t in stores[::2]]  # from the CPU copy
    m.free(0)
    push_out(m, 1)  # the device and the 4-block CPU tier lose PROMPT; the disk keeps it
    assert computed(m, 3, PROMPT) == 6
    loads = m.take_tier_transfers().loads
    assert [t.route for t in loads] == [(DISK, CPU), SWAP_IN] * 3
    for promotion, load in zip(loads[::2], loads[1::2]):
        assert load.src == promotion.dst  # staged: the device reads the promoted CPU block
    assert [t.dst for t in loads[1::2]] == m.block_table(3)[:3]
    assert m.read_tokens(3).tolist() == PROMPT
    cpu, disk = m.tier_stats
    assert (cpu.medium, disk.medium) == (CPU, DISK)
    assert disk.loaded_blocks == 3 and cpu.loaded_blocks == 0  # hits count where they were
    assert disk.stored_blocks == cpu.stored_blocks  # every store cascaded
    m.check_invariants()


def test_tiers_are_checked_when_built():
    with pytest.raises(InvalidRequest, match="the first offload tier is the CPU tier"):
        OffloadConnector.build([TierSpec(DISK, 4)], 2, cpu_base=0)
    with pytest.raises(InvalidRequest, match="one offload tier per medium"):
        manager(lower=(TierSpec(DISK, 4), TierSpec(DISK, 4)))
    with pytest.raises(InvalidRequest, match="num_blocks"):
        manager(lower=(TierSpec(DISK, 0),))


def test_a_remote_tier_is_one_store_for_every_allocator_that_shares_it():
    """Replica b finds in the shared remote tier what replica a computed, never across
    tenants; the store holds each prefix once."""
    a = manager(lower=(TierSpec(REMOTE, 16),))
    b = manager(lower=(TierSpec(REMOTE, 16, shared=a.tiers.offload_tier(REMOTE)),))
    computed(a, 0, PROMPT)
    assert [t.route for t in a.take_tier_transfers().stores] == [SWAP_OUT, (CPU, REMOTE)] * 3
    assert computed(b, 0, PROMPT, salt=1) == 0  # another tenant: no hit
    b.take_tier_transfers()
    b.free(0)
    assert computed(b, 1, PROMPT) == 6
    loads = b.take_tier_transfers().loads
    assert [t.route for t in loads] == [(REMOTE, CPU), SWAP_IN] * 3
    assert b.read_tokens(1).tolist() == PROMPT
    assert a.tier_stats[1] == b.tier_stats[1] and b.tier_stats[1].stored_blocks == 6
    with pytest.raises(InvalidRequest, match="does not match"):
        manager(lower=(TierSpec(REMOTE, 8, shared=a.tiers.offload_tier(REMOTE)),))


# -- beside KV cache groups (full attention and a sliding window, as gpt-oss keeps them) ----
WINDOWED = (KVGroup(), KVGroup(sliding_window=4))  # a window reads 2 blocks of 2 before it
LONG = list(range(1, 10))  # four full blocks of 2, then the last token


def windowed(tier=32, groups=WINDOWED) -> Tiered:
    t = Tiered.__new__(Tiered)
    t.m = BlockManager(12, 2, enable_prefix_caching=True, kv_groups=groups)
    t.tiers = OffloadConnector.build([TierSpec(CPU, tier)], 2, cpu_base=0)
    t.seam = ConnectorSeam(t.m, t.tiers)
    return t


def test_each_group_stores_its_own_blocks_under_its_own_keys():
    m = windowed()
    computed(m, 0, LONG)
    stores = m.take_tier_transfers().stores
    full, window = m.block_tables(0)
    assert [(t.src, t.group) for t in stores] == [(b, 0) for b in full[:4]] + [
        (b, 1) for b in window[:4]
    ]
    assert len({t.dst for t in stores}) == 8  # one tier block each: the keys differ by group
    assert group_key(123, 0) == 123 and group_key(123, 1) != 123


def test_a_window_loads_only_the_blocks_before_the_hit_that_it_reads():
    """vLLM 0.33's offloading connector with the hybrid manager: full attention loads
    the whole run, the window the ceil((W - 1) / block_size) blocks before its end, and
    takes no block for the rest; the hit's tokens are counted once."""
    m = windowed()
    computed(m, 0, LONG)
    m.take_tier_transfers()
    m.free(0)
    m.evict(12)
    assert m.cached_prefix_tokens(LONG) == 8
    assert computed(m, 1, LONG) == 8
    full, window = m.block_tables(1)
    loads = m.take_tier_transfers().loads
    assert [(t.dst, t.group) for t in loads] == [(b, 0) for b in full[:4]] + [
        (b, 1) for b in window[2:4]
    ]
    assert window[:2] == [NULL_BLOCK, NULL_BLOCK]  # never read again: no block taken
    assert m.read_tokens(1, group=0).tolist() == LONG
    assert m.read_tokens(1, group=1).tolist()[4:] == LONG[4:]
    (stats,) = m.tier_stats
    assert stats.loaded_blocks == 6 and stats.hit_tokens == 8
    m.check_invariants()


def test_a_window_without_its_last_blocks_in_the_tier_ends_the_hit_where_it_has_them():
    m = windowed()
    computed(m, 0, LONG[:7])  # three full blocks stored in both groups
    m.take_tier_transfers()
    m.free(0)
    m.evict(12)
    # LONG's fourth block is in no tier: full attention serves three blocks, and the
    # window the two before the end of those three
    assert m.cached_prefix_tokens(LONG) == 6
    assert computed(m, 1, LONG) == 6
    assert len(m.take_tier_transfers().loads) == 3 + 2


def test_a_model_of_windows_only_is_served_too():
    m = windowed(groups=(KVGroup(sliding_window=4),))  # Mistral-7B-v0.1's one window
    computed(m, 0, LONG)
    m.take_tier_transfers()
    m.free(0)
    m.evict(12)
    assert computed(m, 1, LONG) == 8
    assert [t.group for t in m.take_tier_transfers().loads] == [0, 0]
    assert m.tier_stats[0].hit_tokens == 4  # the window's two loaded blocks count
    m.check_invariants()
