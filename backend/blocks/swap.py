"""Swap of paged sequences between the device pool and the CPU pool.

A swapped-out sequence's table holds CPU block ids, one per device block it had (a
shared block is copied for every holder). Swapping back in shares again the computed full
blocks whose prefix is still cached on the device instead of copying them; blocks whose
KV is not computed yet (a prompt swapped out mid-prefill) always come back private.
"""

from __future__ import annotations

import numpy as np

from backend.base import InvalidRequest, OutOfBlocks
from backend.blocks.block_pool import BlockPool
from backend.blocks.freelist import FreeList
from backend.blocks.group_tables import GroupTables
from backend.blocks.prefix_index import PrefixIndex
from backend.blocks.sequences import ON_DEVICE, SWAPPED, SequenceRegistry
from backend.transfer import CPU, GPU, Transfer


class SwapSpace:
    """``num_cpu_blocks`` CPU blocks (their token memory ``slots`` and a free list) and
    the swap commands of the Allocator interface, which move a sequence's blocks of
    ``group`` between them and the device ``pool``, changing its state in ``registry``."""

    def __init__(
        self,
        num_cpu_blocks: int,
        *,
        pool: BlockPool,
        index: PrefixIndex,
        group: GroupTables,
        registry: SequenceRegistry,
    ):
        self.slots = np.zeros((num_cpu_blocks, pool.block_size), np.int32)
        self.free = FreeList(num_cpu_blocks)
        self._pool, self._index, self._group, self._seqs = pool, index, group, registry

    def can_swap_out(self, *seq_ids: int) -> bool:
        registry, tables = self._seqs, self._group.tables
        seqs = [registry.live(seq_id) for seq_id in seq_ids]
        if any(registry.state[seq] != ON_DEVICE for seq in seqs):
            return False
        # Each sequence takes one CPU block per table entry (a shared block is copied for
        # every holder), so the sum is exact.
        return sum(len(tables[seq]) for seq in seqs) <= len(self.free)

    def swap_out(self, seq_id: int) -> list[Transfer]:
        registry, group = self._seqs, self._group
        seq = registry.on_device(seq_id)
        device = group.tables[seq]
        if len(device) > len(self.free):
            raise OutOfBlocks(
                f"swap out of sequence {seq} needs {len(device)} CPU blocks, {len(self.free)} free",
                needed=len(device),
                available=len(self.free),
            )
        self._pool.clock += 1
        cpu = self.free.take(len(device)).tolist()
        self.slots[cpu] = group.slots[device]
        self._pool.release(device, int(registry.num_tokens[seq]))
        group.tables[seq] = cpu
        registry.set_state(seq, SWAPPED)
        return [Transfer(d, c, GPU, CPU) for d, c in zip(device, cpu)]

    def swap_in_plan(self, seq: int) -> tuple[list[int], int, int]:
        """(device blocks to share instead of copying, blocks to take, of the shared ones
        how many are cached-evictable). Full blocks whose prefix is still cached on the
        device (a forked sibling's, or this sequence's own, not yet evicted) are shared
        again rather than copied back: swapping a fork out and in must not turn its
        shared prompt into private copies, which could need more memory than it freed.

        Only blocks whose KV this sequence had computed (marked, or prefix hits) are
        shared (issue 14). A prompt swapped out mid-prefill resumes from the count of
        computed tokens its caller kept, and the executor writes the rest of its KV in
        place through this table; had a block there been shared with a cached block of
        the same key, that write would land in KV other sequences read (a recomputed
        prefix need not match bit for bit, and readers in the same step race with it).
        Counting the cached block as computed instead would save that prefill, but
        ``swap_in`` would then have to tell its caller that more of the prompt is done
        than it knows, a change to every allocator's contract and to the engine, for at
        most the uncomputed blocks of one prompt. So a block is shared on swap-in under
        the same rule as on allocate: only once its KV is computed."""
        cpu = self._group.tables[seq]
        hits = self._index.cached_blocks_of(seq, lambda n: self.slots[cpu[:n]])
        return hits, len(cpu) - len(hits), self._pool.revived(hits)

    def can_swap_in(self, *seq_ids: int) -> bool:
        """Exact for one sequence. For several, the answer assumes no prefix hits (their
        whole tables are copied back): one swap-in can evict blocks another would have
        shared, but a hit never needs more than the copy it replaces, so a yes is safe
        (a no may be cautious)."""
        registry = self._seqs
        seqs = [registry.live(seq_id) for seq_id in seq_ids]
        if any(registry.state[seq] != SWAPPED for seq in seqs):
            return False
        if len(seqs) == 1:
            _, needed, revived = self.swap_in_plan(seqs[0])
            return needed <= self._pool.available(revived)
        return sum(len(self._group.tables[seq]) for seq in seqs) <= self._pool.available()

    def swap_in(self, seq_id: int) -> list[Transfer]:
        registry, pool, group = self._seqs, self._pool, self._group
        seq = registry.live(seq_id)
        if registry.state[seq] != SWAPPED:
            raise InvalidRequest(f"sequence {seq} is not swapped out")
        hits, needed, revived = self.swap_in_plan(seq)
        pool.require(needed, not_evictable=revived)
        pool.clock += 1
        if hits:
            pool.reuse(hits)
        cpu = group.tables[seq]
        copied = cpu[len(hits) :]
        device = pool.take(needed).tolist()
        group.slots[device] = self.slots[copied]
        pool.token_slots += int(registry.num_tokens[seq]) - len(hits) * pool.block_size
        self.free.put(cpu)
        table = hits + device
        group.replace(seq, table)
        # Computed full blocks become prefix-cache candidates again under their keys.
        self._index.republish(seq, len(hits), table)
        registry.set_state(seq, ON_DEVICE)
        return [Transfer(c, d, CPU, GPU) for c, d in zip(copied, device)]

    def check_invariants(self, swapped: list[int]) -> None:
        """Assert the ``swapped`` sequences' tables and the CPU free list partition the
        CPU pool, and each table has one block per ``block_size`` tokens held."""
        tables = self._group.tables
        owned = [block for seq in swapped for block in tables[seq]]
        free = list(self.free)
        assert len(set(owned)) == len(owned), "a CPU block belongs to two sequences"
        assert len(set(free)) == len(free), "a CPU block is on the free list twice"
        assert sorted(owned + free) == list(range(len(self.slots))), "CPU pool leak"
        for seq in swapped:
            held = int(self._seqs.num_tokens[seq])
            assert len(tables[seq]) == self._group.blocks_for(held), f"CPU table {seq}"
