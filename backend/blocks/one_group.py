"""The coordinator of one full-attention KV cache group (coordinator.py), the shape of
most models and the one the engine's hot paths run: with a prefix cache (``OneGroup``,
vLLM's unitary coordinator) or without one (``OneGroupNoCache``: no key is hashed,
looked up or published, as vLLM hashes nothing with caching off)."""

from __future__ import annotations

import numpy as np

from backend.blocks import decode_stretch
from backend.blocks.block_pool import BlockPool
from backend.blocks.coordinator import Coordinator
from backend.blocks.full_attention import FullAttention
from backend.blocks.kv_groups import peak_blocks
from backend.blocks.prefix_index import PrefixIndex
from backend.stretch import paged_usage_by_step
from backend.transfer import Transfer


class OneGroup(Coordinator):
    """One full-attention group's tables (``group``) over ``pool``, its prefix cache in
    ``index``."""

    def __init__(self, pool: BlockPool, index: PrefixIndex, group: FullAttention):
        self.pool, self.index, self.group = pool, index, group
        self.groups = [group]
        self.block_size = pool.block_size
        # The decode step is the hottest command: the group's own method, one call less.
        self.append_batch = group.append_batch

    # -- prefix hits -----------------------------------------------------------------------
    def prompt_keys(self, tokens: np.ndarray, salt: int) -> tuple[list[int], int]:
        keys, hits = self.index.lookup(tokens, salt)
        return keys, len(hits)

    # -- allocation ------------------------------------------------------------------------
    def can_allocate(self, tokens, salt, in_flight=None, external=0) -> bool:
        """(One group takes a fresh block for an external one as for any other.)"""
        _, hits = self.index.lookup(tokens, salt)
        needed = self.group.blocks_for(tokens.shape[0]) - len(hits)
        return needed <= self.pool.available(self.pool.revived(hits))

    def allocate(self, seq, tokens, salt, computed, external=0) -> int:
        keys, hits = self.index.lookup(tokens, salt)
        pool, group = self.pool, self.group
        needed = group.blocks_for(tokens.shape[0]) - len(hits)
        pool.admit(needed, keys, hits)
        hit_tokens = len(hits) * self.block_size
        # (many blocks are written through their id array: a list index costs a conversion)
        taken = [pool.take_one()] if needed == 1 else pool.take(needed)
        fresh = taken if needed == 1 else taken.tolist()
        pool.token_slots += int(tokens.shape[0]) - hit_tokens  # hits were counted in reuse
        # External blocks come first among the fresh ones and hold the prompt's tokens:
        # a connector's KV of these very tokens (its hit was verified against them).
        group.write_fresh(taken, tokens[hit_tokens:])
        table = hits + fresh
        self.index.add_sequence(seq, salt, keys, table, len(hits), computed)
        if external:  # loaded KV is computed KV: offered to lookups at once
            self.index.publish_through(seq, len(hits) + external, table)
        group.add(seq, table)
        self.index.count_lookup(int(tokens.shape[0]), hit_tokens)
        return hit_tokens + external * self.block_size

    def peak_blocks(self, shared_tokens, tokens, samples, in_flight) -> int:
        return peak_blocks(self.groups, shared_tokens, tokens, samples, in_flight)

    # -- computed KV -----------------------------------------------------------------------
    def mark_computed(self, seq: int, count: int) -> None:
        self.index.publish_through(seq, count // self.block_size, self.group.tables[seq])

    def unpublish_last(self, seq: int) -> None:
        self.group.unpublish_last(seq)

    # -- growth ----------------------------------------------------------------------------
    def can_append(self, seq: int, held: int, num_new: int) -> bool:
        needed, _ = self.group.append_need(seq, held, num_new)
        return needed <= self.pool.available()

    def append(self, seq: int, held: int, tokens: np.ndarray) -> list[Transfer]:
        need = self.group.append_need(seq, held, tokens.shape[0])
        self.pool.require(need[0])
        if tokens.shape[0] == 0:
            return []
        self.pool.clock += 1
        return self.group.append(seq, held, tokens, need)

    def batch_need(self, seqs: np.ndarray, held: np.ndarray) -> int:
        return self.group.batch_need(seqs, held).needed

    def append_batch(self, seqs, held, tokens) -> list[Transfer]:
        return self.group.append_batch(seqs, held, tokens)

    def plain_decode_steps(self, seqs, held, limit) -> int:
        return decode_stretch.plain_steps(self.group, seqs, held, limit)

    def append_steps(self, seqs, held, tokens) -> dict:
        pool = self.pool
        before = (pool.num_cached, pool.num_free, pool.token_slots)
        crossing = decode_stretch.write_rows(self.group, seqs, held, tokens)
        size, evicted = self.block_size, pool.num_evicted
        return paged_usage_by_step(crossing, *before, seqs.shape[0], pool.num_blocks, size, evicted)

    # -- sharing and release ---------------------------------------------------------------
    def fork(self, parent: int, child: int) -> None:
        table = list(self.group.tables[parent])
        self.pool.add_references(table)  # a table holds each block once, so no duplicates
        self.index.fork(parent, child)
        self.group.add(child, table)

    def free(self, seq: int, held: int, swapped: bool) -> list[int]:
        table = self.group.remove(seq)
        if not swapped:
            self.pool.release(table, held)
        self.index.remove(seq)
        return table

    # -- queries and invariants ------------------------------------------------------------
    def tables(self, seq: int) -> tuple[list[int], ...]:
        return (list(self.group.tables[seq]),)

    def held_blocks(self, seq: int) -> int:
        return len(self.group.tables[seq])

    def read(self, seq: int, held: int, group: int, memory: np.ndarray) -> np.ndarray:
        return memory[self.group.tables[seq]].reshape(-1)[:held].copy()

    def check(self, on_device, num_tokens, read_tokens) -> None:
        """The tables, the pool against them, then the prefix index."""
        references, fill = self.group.check_tables(on_device, num_tokens)
        self.pool.check_invariants(references, int(fill.sum()))
        self.index.check_invariants(self.group.tables, on_device, read_tokens)

    def snapshot_state(self) -> tuple:
        return self.group.last_block, sorted(self.group.tables.items()), self.index.snapshot_state()


class OneGroupNoCache(OneGroup):
    """``OneGroup`` without a prefix cache: every block is taken fresh, nothing is hashed,
    looked up, published or counted (its index is disabled)."""

    def prompt_keys(self, tokens: np.ndarray, salt: int) -> tuple[list[int], int]:
        return [], 0

    def can_allocate(self, tokens, salt, in_flight=None, external=0) -> bool:
        return self.group.blocks_for(tokens.shape[0]) <= self.pool.available()

    def allocate(self, seq, tokens, salt, computed, external=0) -> int:
        """Every block fresh; returns 0 (no token was cached; a connector needs a prefix
        cache, so ``external`` is 0)."""
        pool, group, num_tokens = self.pool, self.group, tokens.shape[0]
        needed = group.blocks_for(num_tokens)
        pool.require(needed)
        pool.clock += 1
        taken = pool.take(needed)
        group.write_fresh(taken, tokens)
        pool.token_slots += num_tokens
        group.add(seq, taken.tolist())
        return 0

    def mark_computed(self, seq: int, count: int) -> None:
        """Nothing to publish."""

    def unpublish_last(self, seq: int) -> None:
        """Nothing was published."""

    def fork(self, parent: int, child: int) -> None:
        table = list(self.group.tables[parent])
        self.pool.add_references(table)
        self.group.add(child, table)

    def free(self, seq: int, held: int, swapped: bool) -> list[int]:
        table = self.group.remove(seq)
        if not swapped:
            self.pool.release(table, held)
        return table
