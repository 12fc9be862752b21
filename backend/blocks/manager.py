"""The pure-model paged block manager: block tables over a pool of device blocks, with
prefix caching, copy-on-write and swap, over a token-id "memory" that tests can read
back.

A KV connector (backend/connectors/: the offload tiers) works beside the manager,
which knows none: it hands over its prompts' keys and its computed blocks and allocates
for the blocks a connector supplies (capabilities.TakesExternalKV).

The manager is vLLM's KV cache manager to its parts: it checks what callers pass in,
keeps the sequences, ticks the pool's clock once per command, and hands each command to
the coordinator of the model's shape of KV, chosen once when it is built
(coordinator.py: one full-attention group with or without a prefix cache, one_group.py;
several groups or a window, kv_groups.py), with no per-call branch on the shape. Its
parts:

* the block pool (block_pool.py): free list, refcounts, eviction hand-off, token-slot
  accounting and peak;
* a prefix index per KV cache group (prefix_index.py): published keys, key chains, hit
  checks;
* the sequence registry (sequences.py): per-sequence state, token counts and id checks;
* one manager per KV cache group, its block tables and their growth (group_tables.py;
  kinds: full_attention.py, and sliding_window.py, which releases the blocks behind the
  window), which the coordinator drives;
* the swap space (swap.py): the CPU pool and the swap commands (one group only);
* the memory ``slots``: the token id held in every slot of the device pool.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence

import numpy as np

from backend.base import ONE_GROUP, Allocator, InvalidRequest, KVUsage, as_tokens, check_count
from backend.blocks.block_pool import BlockPool
from backend.blocks.coordinator import Coordinator
from backend.blocks.full_attention import FullAttention
from backend.blocks.kv_groups import KVGroup, KVGroups, check_kv_groups
from backend.blocks.one_group import OneGroup, OneGroupNoCache
from backend.blocks.prefix_index import GroupIndexes, PrefixCacheStats, PrefixIndex, check_salt
from backend.blocks.sequences import ON_DEVICE, SWAPPED, SequenceRegistry
from backend.blocks.swap import SwapSpace
from backend.connectors.contract import ComputedBlock
from backend.evictor import Evictor, LeastRecentlyUsed
from backend.transfer import Transfer


class BlockManager(Allocator):
    """Paged KV bookkeeping over ``num_blocks`` device blocks of ``block_size`` slots
    (see the module docstring and backend.base.Allocator for the contracts).
    Its constructor is an :class:`backend.base.AllocatorFactory`."""

    supports_prefix_caching = True
    supports_kv_connector = True
    supports_kv_groups = True
    kv_groups = ONE_GROUP  # (set per instance: the groups it was built with)

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        num_cpu_blocks: int = 0,
        enable_prefix_caching: bool = False,
        evictor: Evictor | None = None,
        kv_groups: Sequence[KVGroup] = (),
    ):
        self.num_blocks = check_count("num_blocks", num_blocks, 1)
        self.block_size = check_count("block_size", block_size, 1)
        self.num_cpu_blocks = check_count("num_cpu_blocks", num_cpu_blocks, 0)
        self.enable_prefix_caching = bool(enable_prefix_caching)
        # The "memory": the token id held in every slot.
        self.slots = np.zeros((self.num_blocks, self.block_size), np.int32)
        self.kv_groups = check_kv_groups(kv_groups)
        caching = self.enable_prefix_caching
        indexes = [PrefixIndex(self.slots, enabled=caching) for _ in self.kv_groups]
        self._index, self._indexes = indexes[0], indexes
        # Which cached block goes first is a policy (policies/eviction.py), passed in so
        # the backend imports nothing from policies/; LRU when none is given.
        evictor = evictor if evictor is not None else LeastRecentlyUsed()
        keys = self._index if len(indexes) == 1 else GroupIndexes(indexes, self.num_blocks)
        self._pool = BlockPool(self.num_blocks, self.block_size, evictor, keys)
        self._seqs = SequenceRegistry()
        self._coord = self._coordinator(indexes)
        self._first = self._coord.groups[0]
        self._swap = SwapSpace(
            self.num_cpu_blocks,
            pool=self._pool,
            index=self._index,
            group=self._first,
            registry=self._seqs,
        )

    def _coordinator(self, indexes: list[PrefixIndex]) -> Coordinator:
        """The coordinator of this model's shape of KV (coordinator.py), chosen once:
        one full-attention group (most models) with a prefix cache or without one, or
        several groups or a window. Raises InvalidRequest for swap space with groups."""
        caching = self.enable_prefix_caching
        if self.kv_groups != ONE_GROUP:
            if self.num_cpu_blocks:  # (each group's tables would move)
                raise InvalidRequest(
                    "swap space is not modelled with KV cache groups or sliding windows yet"
                )
            return KVGroups(self.kv_groups, self._pool, indexes, self.slots, prefix_caching=caching)
        group = FullAttention(self._pool, indexes[0], self.slots, prefix_caching=caching)
        shape = OneGroup if caching else OneGroupNoCache
        return shape(self._pool, indexes[0], group)

    # -- public counters -----------------------------------------------------------------
    @property
    def reads_token_ids(self) -> bool:
        """Whether the token ids written here matter to this allocator: only prefix
        caching hashes them. A caller whose other readers ignore them too (a cost model)
        may write zeros instead of generating them."""
        return self.enable_prefix_caching

    @property
    def evictor(self) -> Evictor:
        return self._pool.evictor

    @property
    def num_free_blocks(self) -> int:
        return self._pool.num_free

    @property
    def num_cached_blocks(self) -> int:
        return self._pool.num_cached

    @property
    def num_used_blocks(self) -> int:
        return self._pool.num_used

    @property
    def peak_used_blocks(self) -> int:
        return self._pool.peak_used_blocks

    @property
    def num_free_cpu_blocks(self) -> int:
        return len(self._swap.free)

    @property
    def prefix_cache_stats(self) -> PrefixCacheStats:
        return self._index.stats

    # -- allocation ---------------------------------------------------------------------------
    def can_allocate(
        self, token_ids, *, salt: int = 0, max_new_tokens: int = 0, external_blocks: int = 0
    ) -> bool:
        """``Allocator.can_allocate``; ``external_blocks`` as ``allocate`` takes them (a
        window takes no block for those it will not read; one group takes a fresh block
        for each either way)."""
        tokens = as_tokens(token_ids, allow_empty=False)
        return self._coord.can_allocate(tokens, check_salt(salt), external=external_blocks)

    def can_admit(
        self, token_ids, *, salt: int = 0, in_flight_tokens: int, external_blocks: int = 0
    ) -> bool:
        """``can_allocate`` with vLLM's admission cap for windows (capabilities.py)."""
        tokens = as_tokens(token_ids, allow_empty=False)
        return self._coord.can_allocate(tokens, check_salt(salt), in_flight_tokens, external_blocks)

    def peak_blocks(
        self, shared_tokens: int, tokens: int, samples: int, *, in_flight_tokens: int
    ) -> int:
        """``blocks_for_samples`` with each window credited with what it releases as the
        sequences grow by at most ``in_flight_tokens`` at a time (capabilities.py)."""
        return self._coord.peak_blocks(shared_tokens, tokens, samples, in_flight_tokens)

    def allocate(
        self,
        seq_id,
        token_ids,
        *,
        salt: int = 0,
        max_new_tokens: int = 0,
        computed_tokens: int | None = None,
        external_blocks: int = 0,
    ) -> int:
        """``Allocator.allocate``; ``external_blocks``: blocks after the device's hit that
        a KV connector supplies (capabilities.TakesExternalKV). Raises InvalidRequest for
        more external blocks than the prompt has full blocks before its last token."""
        seq = self._seqs.new_id(seq_id)
        tokens = as_tokens(token_ids, allow_empty=False)
        salt = check_salt(salt)
        external = check_count("external_blocks", external_blocks, 0)
        if external:
            _, hits = self.prompt_keys(tokens, salt=salt)
            if hits + external > (tokens.shape[0] - 1) // self.block_size:
                raise InvalidRequest(
                    f"external_blocks: {external} after {hits} cached blocks is past "
                    "the prompt's last full block before its last token"
                )
        return BlockManager.allocate_trusted(self, seq, tokens, salt, computed_tokens, external)

    def allocate_trusted(
        self,
        seq: int,
        tokens: np.ndarray,
        salt: int,
        computed_tokens: int | None = None,
        external_blocks: int = 0,
    ) -> int:
        """``allocate`` for a caller that guarantees its input (the engine, which numbers
        its sequences itself): ``seq`` a new non-negative int id, ``tokens`` a non-empty
        1-D int32 array, ``salt`` an int in 64 bits, ``external_blocks`` within the
        prompt. Unchecked: bad input corrupts the state instead of raising. Raises
        OutOfBlocks (nothing changed) like allocate."""
        cached = self._coord.allocate(seq, tokens, salt, computed_tokens, external_blocks)
        self._seqs.add(seq, tokens.shape[0])
        return cached

    def shared_prefix_tokens(self, token_ids, *, salt: int = 0) -> int:
        """Tokens of the longest prefix of ``token_ids`` one KV cache group holds cached,
        when that is longer than the prefix every group serves (else 0). No mutation but
        the lookup memo (capabilities.RetainsPrefixTails)."""
        tokens = as_tokens(token_ids, allow_empty=False)
        return self._coord.shared_prefix_blocks(tokens, check_salt(salt)) * self.block_size

    def retain_prefix_tails(
        self, seq_id: int, *, num_prompt_tokens: int, shared_prefix_tokens: int
    ) -> None:
        """``seq_id`` (just allocated) has a prompt of ``num_prompt_tokens`` and a shared
        prefix of ``shared_prefix_tokens`` found before its allocation: sliding windows
        with sparse retention keep the tails of both (capabilities.RetainsPrefixTails)."""
        seq = self._seqs.live(seq_id)
        prompt = check_count("num_prompt_tokens", num_prompt_tokens, 1)
        shared = check_count("shared_prefix_tokens", shared_prefix_tokens, 0)
        self._coord.retain_tails(seq, prompt, shared // self.block_size)

    def begin_step(self, *, lag: bool) -> None:
        """A step's planning begins (capabilities.ReleasesBehindProcessed)."""
        self._coord.begin_step(lag)

    def mark_computed(self, seq_id: int, num_tokens: int) -> None:
        """The KV of ``seq_id``'s first ``num_tokens`` tokens is computed (or scheduled
        this step): publish its full blocks among them in the prefix cache."""
        seq = self._seqs.live(seq_id)
        if self._seqs.state[seq] == ON_DEVICE:
            count = check_count("num_tokens", num_tokens, 0)
            self._coord.mark_computed(seq, min(count, int(self._seqs.num_tokens[seq])))

    def unpublish_last_block(self, seq_id: int) -> None:
        """Withdraw ``seq_id``'s last block from the prefix cache if it is full and this
        sequence published it: an engine that registers a block only once the token
        filling it is known (vLLM's async scheduling) never registered it when the
        sequence is preempted first. Call just before freeing the sequence."""
        seq = self._seqs.live(seq_id)
        held = int(self._seqs.num_tokens[seq])
        if held and held % self.block_size == 0:
            self._coord.unpublish_last(seq)

    def cached_prefix_tokens(self, token_ids, *, salt: int = 0) -> int:
        tokens = as_tokens(token_ids, allow_empty=False)
        return self._coord.prompt_keys(tokens, check_salt(salt))[1] * self.block_size

    # -- a KV connector beside the manager (backend/connectors/) ---------------------------
    def prompt_keys(self, token_ids, *, salt: int = 0) -> tuple[list[int], int]:
        """The prefix keys of the prompt's full blocks and how many of them the device
        holds cached from the first (none without prefix caching). No mutation but the
        lookup memo."""
        self._check_connectable()
        return self._coord.prompt_keys(as_tokens(token_ids, allow_empty=False), check_salt(salt))

    def record_computed_blocks(self) -> None:
        """Remember the blocks published from now on, in every KV cache group, for
        ``take_computed_blocks``. Raises InvalidRequest without prefix caching (a
        connector finds KV by its keys)."""
        self._check_connectable()
        for index in self._indexes:
            if index.newly_published is None:
                index.newly_published = []

    def _check_connectable(self) -> None:
        if not self.enable_prefix_caching:
            raise InvalidRequest("a KV connector needs prefix caching (its keys)")

    def take_computed_blocks(self) -> list[ComputedBlock]:
        """The blocks published since the last call (computed, or scheduled in a step
        whose forward runs next) that a table still holds: a published block no table
        holds any more was never to be computed (its sequence left before the forward),
        and vLLM's connector stores only the blocks of the requests a step runs."""
        held, computed = self._pool.refcount, []
        for group, index in enumerate(self._indexes):
            if index.newly_published is None:  # (not recording)
                continue
            published, index.newly_published = index.newly_published, []
            for block in published:
                key = index.key_of(block)
                if key is None or not held[block]:  # evicted again, never to be computed
                    continue
                salt, position = index.placement_of(block)
                row = self.slots[block]
                computed.append(ComputedBlock(block, key, salt, position, row, group))
        return computed

    # -- growth: the groups grow, the registry counts the tokens ----------------------------
    def can_append(self, seq_id: int, num_tokens: int = 1) -> bool:
        seq = self._seqs.on_device(seq_id)
        held = int(self._seqs.num_tokens[seq])
        return self._coord.can_append(seq, held, check_count("num_tokens", num_tokens, 0))

    def append(self, seq_id: int, token_ids) -> list[Transfer]:
        seq = self._seqs.on_device(seq_id)
        tokens = as_tokens(token_ids, allow_empty=True)
        held = int(self._seqs.num_tokens[seq])
        moves = self._coord.append(seq, held, tokens)
        self._seqs.num_tokens[seq] = held + tokens.shape[0]
        return moves

    def blocks_needed_for_batch(self, seq_ids: np.ndarray) -> int:
        seqs, _ = self._seqs.check_batch(seq_ids, np.zeros(np.shape(seq_ids), np.int32))
        return self._coord.batch_need(seqs, self._seqs.num_tokens[seqs])

    def append_batch(self, seq_ids: np.ndarray, token_ids: np.ndarray) -> list[Transfer]:
        return BlockManager.append_batch_trusted(self, *self._seqs.check_batch(seq_ids, token_ids))

    def append_batch_trusted(self, seqs: np.ndarray, tokens: np.ndarray) -> list[Transfer]:
        """``append_batch`` for a caller that guarantees its input (the engine, whose
        decode batch is its own running set): ``seqs`` distinct on-device ids (int64),
        ``tokens`` int32 ids in range, one each. Unchecked: bad input corrupts the state
        instead of raising. Raises OutOfBlocks (nothing changed) like append_batch."""
        if not seqs.shape[0]:
            return []
        num_tokens = self._seqs.num_tokens
        held = num_tokens[seqs]
        moves = self._coord.append_batch(seqs, held, tokens)
        self._pool.clock += 1
        held += 1
        num_tokens[seqs] = held
        return moves

    # -- decode stretches (backend/stretch.py) ------------------------------------------------
    def plain_decode_steps(self, seq_ids: np.ndarray, limit: int) -> int:
        """See backend/stretch.py. 0 when a sequence's partly filled last block is
        shared (its next write copies)."""
        seqs = np.asarray(seq_ids, dtype=np.int64)
        if limit <= 0 or not seqs.size:
            return max(int(limit), 0)
        return self._coord.plain_decode_steps(seqs, self._seqs.num_tokens[seqs], limit)

    def append_steps(self, seq_ids: np.ndarray, token_ids: np.ndarray) -> dict[str, np.ndarray]:
        """See backend/stretch.py. Raises InvalidRequest for a stretch that would copy
        or evict (ask ``plain_decode_steps`` first), or for bad ids or tokens."""
        grid = as_tokens(np.asarray(token_ids).reshape(-1), allow_empty=True)
        steps = int(np.shape(token_ids)[0]) if np.ndim(token_ids) == 2 else -1
        seqs, _ = self._seqs.check_batch(seq_ids, np.zeros(np.shape(seq_ids), np.int32))
        if steps < 0 or grid.shape[0] != steps * seqs.shape[0]:
            raise InvalidRequest("append_steps: token_ids must be (steps, len(seq_ids))")
        if self.plain_decode_steps(seqs, steps) < steps:
            raise InvalidRequest("append_steps: the stretch needs copy-on-write or eviction")
        return BlockManager.append_steps_trusted(self, seqs, grid.reshape(steps, seqs.shape[0]))

    def append_steps_trusted(self, seqs: np.ndarray, tokens: np.ndarray) -> dict[str, np.ndarray]:
        """``append_steps`` for a caller that guarantees its input (the engine): distinct
        on-device int64 ids, an int32 ``(steps, len(seqs))`` grid within what
        ``plain_decode_steps`` granted. Unchecked: bad input corrupts the state."""
        steps = tokens.shape[0]
        held = self._seqs.num_tokens[seqs]
        usage = self._coord.append_steps(seqs, held, tokens)
        self._seqs.num_tokens[seqs] = held + steps
        self._pool.clock += steps  # one tick per command, as step-by-step
        return usage

    # -- sharing and release ------------------------------------------------------------------
    def fork(self, parent_id: int, child_id: int) -> list[Transfer]:
        parent = self._seqs.on_device(parent_id)
        child = self._seqs.new_id(child_id)
        self._pool.clock += 1
        self._coord.fork(parent, child)
        self._seqs.add(child, int(self._seqs.num_tokens[parent]))
        return []

    def free(self, seq_id: int) -> None:
        seq = self._seqs.live(seq_id)
        self._pool.clock += 1
        swapped = self._seqs.state[seq] == SWAPPED
        num_tokens = int(self._seqs.num_tokens[seq])
        self._seqs.remove(seq)
        table = self._coord.free(seq, num_tokens, swapped)
        if swapped:
            self._swap.free.put(table)

    # -- swap (swap.py) ---------------------------------------------------------------------------
    def can_swap_out(self, *seq_ids: int) -> bool:
        return self._swap.can_swap_out(*seq_ids)

    def swap_out(self, seq_id: int) -> list[Transfer]:
        return self._swap.swap_out(seq_id)

    def can_swap_in(self, *seq_ids: int) -> bool:
        return self._swap.can_swap_in(*seq_ids)

    def swap_in(self, seq_id: int) -> list[Transfer]:
        return self._swap.swap_in(seq_id)

    def evict(self, num_blocks: int = 1) -> list[int]:
        """Reclaim up to ``num_blocks`` cached-evictable blocks, in the eviction policy's
        order: their keys are dropped and they go to the back of the free list.
        Returns their ids. Raises InvalidRequest for a negative count."""
        count = check_count("num_blocks", num_blocks, 0)
        self._pool.clock += 1
        return self._pool.evict(count)

    # -- queries ---------------------------------------------------------------------------------
    def is_swapped(self, seq_id: int) -> bool:
        return self._seqs.state[self._seqs.live(seq_id)] == SWAPPED

    def num_tokens(self, seq_id: int) -> int:
        return int(self._seqs.num_tokens[self._seqs.live(seq_id)])

    def block_table(self, seq_id: int) -> list[int]:
        return list(self._first.tables[self._seqs.live(seq_id)])

    def block_tables(self, seq_id: int) -> tuple[list[int], ...]:
        return self._coord.tables(self._seqs.live(seq_id))

    def held_blocks(self, seq_id: int) -> int:
        seq = self._seqs.live(seq_id)
        return self._coord.held_blocks(seq) if self._seqs.state[seq] == ON_DEVICE else 0

    def read_tokens(self, seq_id: int, group: int = 0) -> np.ndarray:
        """The token ids ``seq_id`` reads back through KV cache group ``group``'s table;
        -1 where a sliding window released the block. No mutation."""
        seq = self._seqs.live(seq_id)
        memory = self._swap.slots if self._seqs.state[seq] == SWAPPED else self.slots
        return self._coord.read(seq, int(self._seqs.num_tokens[seq]), group, memory)

    def available_blocks(self) -> int:
        return self._pool.available()

    def usage(self, next_request_tokens: int = 0) -> KVUsage:
        size, pool = self.block_size, self._pool
        used, cached, free = pool.num_used, pool.num_cached, pool.num_free
        return KVUsage(
            total_slots=self.num_blocks * size,
            token_slots=pool.token_slots,
            reserved_slots=0,
            internal_frag_slots=used * size - pool.token_slots,
            external_frag_slots=0,  # any free block fits any request's next block
            free_slots=(free + cached) * size,
            cached_slots=cached * size,
            used_blocks=used,
            cached_blocks=cached,
            free_blocks=free,
            evictions=pool.num_evicted,
        )

    def snapshot(self) -> bytes:
        """Every piece of mutable state, serialised, for bit-for-bit comparisons in
        tests (a refused command must leave it unchanged). The hash memo, the checked
        batch and the epoch are excluded: pure caches."""
        state = (
            self.slots,
            self._swap.slots,
            list(self._swap.free),
            self._pool.snapshot_state(),
            self._seqs.snapshot_state(),
            self._coord.snapshot_state(),
        )
        return pickle.dumps(state)

    # -- invariants ------------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Verify the whole state (O(pool + tokens)); AssertionError names the break."""
        on_device, swapped = self._seqs.check_invariants(self._first.tables)
        self._coord.check(on_device, self._seqs.num_tokens, self.read_tokens)
        self._swap.check_invariants(swapped)
        # (usage()'s split sums to the pool by construction; its parts are checked by
        # the pool: token slots against the tables, used blocks against the partition.)
