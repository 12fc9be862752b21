"""The pure-model paged block manager: free list, block tables, refcounts, prefix cache,
copy-on-write and swap, over a token-id "memory" that tests can read back.

Every physical block is in exactly one state:

* free: on the free list, no references, no prefix key;
* in use: referenced by at least one block table (refcount = number of table entries;
  the prefix cache holds no pin);
* cached-evictable: no references, but it still holds a full block whose prefix key is
  in the cache, so a later prompt can reuse it; the eviction policy reclaims it (drops
  its key) when the free list is empty and a block is needed.

Per-sequence scalars live in numpy arrays indexed by sequence id so that the decode step
(`append_batch`) is a handful of vectorised operations; Python work happens only for
the sequences that cross a block boundary, need copy-on-write or fill a block.
"""

from __future__ import annotations

import pickle
from typing import NamedTuple

import numpy as np

from backend.base import (
    Allocator,
    BlockMove,
    DuplicateSequence,
    InvalidRequest,
    KVUsage,
    OutOfBlocks,
    UnknownSequence,
    as_tokens,
    check_count,
    grow_arrays,
    indexes,
)
from backend.evictor import Evictor, LeastRecentlyUsed
from backend.freelist import FreeList
from backend.prefix_hash import ROOT_KEY, block_digests, chain_keys, next_keys, slot_multipliers

_DEAD, _ON_DEVICE, _SWAPPED = 0, 1, 2  # sequence states in ``_state``
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class PrefixCacheStats(NamedTuple):
    """Prompt tokens looked up in ``allocate`` and how many were found cached."""

    queries_tokens: int
    hits_tokens: int

    @property
    def hit_rate(self) -> float:
        return self.hits_tokens / self.queries_tokens if self.queries_tokens else 0.0


def check_salt(salt: int) -> int:
    """A tenant salt as an int64; InvalidRequest otherwise."""
    if isinstance(salt, bool) or not isinstance(salt, int | np.integer):
        raise InvalidRequest(f"salt must be an integer, got {salt!r}")
    if not _INT64_MIN <= int(salt) <= _INT64_MAX:
        raise InvalidRequest(f"salt must fit in 64 signed bits, got {salt}")
    return int(salt)


class _BatchNeed(NamedTuple):
    """What one decode step needs, gathered once per ``append_batch``."""

    held: np.ndarray  # tokens each sequence holds before the step
    slot: np.ndarray  # the slot each new token goes to within its block
    last: np.ndarray  # each sequence's last block before the step
    at_boundary: np.ndarray  # the last block is full: take a new one
    crossing: int  # how many sequences are at a boundary
    shared: np.ndarray | None  # last block partly filled and shared (None: none shared)
    needed: int  # blocks the whole step takes


class BlockManager(Allocator):
    """Paged KV bookkeeping over ``num_blocks`` device blocks of ``block_size`` slots
    (see the module docstring and backend.base.Allocator for the contracts)."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        num_cpu_blocks: int = 0,
        enable_prefix_caching: bool = False,
        evictor: Evictor | None = None,
    ):
        self.num_blocks = check_count("num_blocks", num_blocks, 1)
        self.block_size = check_count("block_size", block_size, 1)
        self.num_cpu_blocks = check_count("num_cpu_blocks", num_cpu_blocks, 0)
        self.enable_prefix_caching = bool(enable_prefix_caching)
        # Which cached block goes first is a policy (policies/eviction.py), passed in so
        # the backend imports nothing from policies/; LRU when none is given.
        self.evictor = evictor if evictor is not None else LeastRecentlyUsed()

        # The "memory": the token id held in every slot.
        self.slots = np.zeros((self.num_blocks, self.block_size), np.int32)
        self.cpu_slots = np.zeros((self.num_cpu_blocks, self.block_size), np.int32)
        self._refcount = np.zeros(self.num_blocks, np.int64)
        # FIFO free lists: a block freed long ago is reused first (deterministic ids).
        self._free = FreeList(self.num_blocks)
        self._cpu_free = FreeList(self.num_cpu_blocks)
        # Blocks with refcount > 1. While it is 0 (no fork, no prefix hit alive) every
        # in-use block has exactly one reference: release and the decode step skip the
        # sharing bookkeeping.
        self._num_shared = 0
        self._key_of_block: list[int | None] = [None] * self.num_blocks
        self._block_of_key: dict[int, int] = {}
        # The salt and chain position each keyed block was published under: a hit checks
        # them with the tokens, so a key collision cannot share a prefix across tenants or
        # reuse a block at another position.
        self._salt_of_block = np.zeros(self.num_blocks, np.int64)
        self._pos_of_block = np.zeros(self.num_blocks, np.int64)
        self._multipliers = slot_multipliers(self.block_size)  # see backend/prefix_hash.py

        self._clock = 0  # logical time for the eviction policy: one tick per command
        self._token_slots = 0  # tokens held in in-use blocks (a shared block counts once)
        self.peak_used_blocks = 0
        self.prefix_queries_tokens = 0
        self.prefix_hits_tokens = 0

        capacity = 64
        self._state = np.zeros(capacity, np.int8)
        self._num_tokens = np.zeros(capacity, np.int64)
        self._last_block = np.zeros(capacity, np.int64)
        self._batch_mark = np.zeros(capacity, np.int64)  # scratch for duplicate detection
        self._seq_salt = np.zeros(capacity, np.int64)
        self._arange = np.arange(capacity)
        # The decode batch is usually the same sequences step after step: remember the
        # last batch whose ids passed the checks, valid until any sequence changes state
        # (``_epoch`` counts those changes).
        self._epoch = 0
        self._checked_ids: tuple[bytes, int] | None = None
        self._tables: dict[int, list[int]] = {}
        self._keys: dict[int, list[int]] = {}  # the key chain of each sequence's full blocks
        # How many leading full blocks of each sequence are published in the prefix cache.
        # A block is published only once its KV is computed (scheduled), as vLLM does:
        # a prompt admitted whole but prefilled in chunks must not let another request
        # "hit" blocks whose KV does not exist yet.
        self._published: dict[int, int] = {}
        # can_allocate then allocate of the same prompt would hash it twice; remember one.
        self._memo: tuple[int, bytes, list[int]] | None = None

    # -- public counters -----------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_cached_blocks(self) -> int:
        return len(self.evictor)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free) - len(self.evictor)

    @property
    def num_free_cpu_blocks(self) -> int:
        return len(self._cpu_free)

    @property
    def prefix_cache_stats(self) -> PrefixCacheStats:
        return PrefixCacheStats(self.prefix_queries_tokens, self.prefix_hits_tokens)

    # -- sequence id checks ----------------------------------------------------------------
    def _seq_state(self, seq_id: int) -> int:
        return int(self._state[seq_id]) if indexes(seq_id, self._state.shape[0]) else _DEAD

    def _live(self, seq_id: int) -> int:
        if self._seq_state(seq_id) == _DEAD:
            raise UnknownSequence(f"sequence {seq_id} is not live (never allocated or freed)")
        return int(seq_id)

    def _on_device(self, seq_id: int) -> int:
        state = self._seq_state(seq_id)
        if state == _ON_DEVICE:
            return int(seq_id)
        if state == _SWAPPED:
            raise InvalidRequest(f"sequence {seq_id} is swapped out; swap it in first")
        return self._live(seq_id)  # raises UnknownSequence

    def _set_state(self, seq: int, state: int) -> None:
        self._state[seq] = state
        self._epoch += 1  # batches checked before this change must be checked again

    def _new_seq(self, seq_id: int) -> int:
        """A valid id for a new sequence. No mutation: the per-sequence arrays grow in
        ``_make_room``, once the command can no longer be refused."""
        seq = check_count("sequence id", seq_id, 0)
        if self._seq_state(seq) != _DEAD:
            raise DuplicateSequence(f"sequence {seq} is already live")
        return seq

    def _make_room(self, seq: int) -> None:
        """Grow the per-sequence arrays so that ``seq`` indexes them."""
        names = ("_state", "_num_tokens", "_last_block", "_batch_mark", "_seq_salt")
        grow_arrays(self, names, seq + 1)

    # -- block pool --------------------------------------------------------------------------
    def _available(self, not_evictable: int = 0) -> int:
        """Blocks a command could take: free ones, then cached-evictable ones (except
        ``not_evictable`` of them that the command itself reuses)."""
        return len(self._free) + len(self.evictor) - not_evictable

    def _require(self, needed: int, *, not_evictable: int = 0) -> None:
        """Raise OutOfBlocks unless ``needed`` blocks can be taken. Cached-evictable blocks
        count as available, except ``not_evictable`` of them that the caller will reuse."""
        available = self._available(not_evictable)
        if needed > available:
            raise OutOfBlocks(
                f"need {needed} blocks, {available} free or evictable",
                needed=needed,
                available=available,
            )

    def _take(self, count: int) -> np.ndarray:
        """Take ``count`` blocks (the caller checked availability): the free list first,
        then eviction victims. Each comes back with refcount 1 and no tokens."""
        from_free = min(count, len(self._free))
        blocks = self._free.take(from_free)
        if from_free < count:
            victims = self.evictor.pick_victims(count - from_free)
            for block in victims:
                self._drop_key(block)
            blocks = np.concatenate((blocks, np.asarray(victims, dtype=np.int64)))
        self._refcount[blocks] = 1
        self._update_peak()
        return blocks

    def _take_one(self) -> int:
        """``_take(1)`` without arrays, for the single-block paths."""
        if not self._free:
            return int(self._take(1)[0])
        block = self._free.take_one()
        self._refcount[block] = 1
        self._update_peak()
        return block

    def _update_peak(self) -> None:
        used = self.num_blocks - len(self._free) - len(self.evictor)
        if used > self.peak_used_blocks:
            self.peak_used_blocks = used

    def _drop_key(self, block: int) -> None:
        del self._block_of_key[self._key_of_block[block]]
        self._key_of_block[block] = None

    def _release(self, table: list[int], num_tokens: int) -> None:
        """Drop one reference to each block of a table holding ``num_tokens`` tokens.

        Released in reverse order so that, under an LRU-like policy, a sequence's tail
        (the least shareable part) is evicted first. Vectorised: a table holds each
        block once, so the fancy-indexed decrement is exact."""
        if not table:
            return
        blocks = np.array(table[::-1], dtype=np.int64)
        if not self._num_shared:  # every block has one reference: all of them go
            self._refcount[blocks] = 0
            self._token_slots -= num_tokens
            released = blocks
        else:
            self._refcount[blocks] -= 1
            left = self._refcount[blocks]
            self._num_shared -= int(np.count_nonzero(left == 1))
            dropped = left == 0
            size = self.block_size
            # Block i of a table holds min(size, num_tokens - i * size) tokens.
            fills = np.minimum(size, num_tokens - np.arange(len(table) - 1, -1, -1) * size)
            self._token_slots -= int(fills[dropped].sum())
            released = blocks[dropped]
        if not self._block_of_key:  # nothing can be cached: straight to the free list
            self._free.put(released)
            return
        uncached = []
        key_of_block, on_cached, now = self._key_of_block, self.evictor.on_cached, self._clock
        for block in released.tolist():
            if key_of_block[block] is not None:
                on_cached(block, now)
            else:
                uncached.append(block)
        self._free.put(uncached)

    def _reuse(self, hits: list[int]) -> None:
        """Take one more reference to each cached block found by a prefix hit."""
        blocks = np.array(hits, dtype=np.int64)
        revived = blocks[self._refcount[blocks] == 0].tolist()
        for block in revived:
            self.evictor.on_removed(block)  # O(1): out of the evictable set, back in use
        self._token_slots += len(revived) * self.block_size  # a cached block is full
        self._add_reference(blocks)
        if revived:  # back in use without being taken: _take's peak update missed them
            self._update_peak()
        for block in hits:
            self.evictor.on_hit(block, self._clock)

    def _add_reference(self, blocks: np.ndarray | list[int]) -> None:
        """One more reference to each of ``blocks`` (distinct, so the fancy increment is
        exact), keeping the count of shared blocks."""
        self._refcount[blocks] += 1
        self._num_shared += int(np.count_nonzero(self._refcount[blocks] == 2))

    def _seal_step(self, seqs: np.ndarray, blocks: np.ndarray) -> None:
        """A decode step filled ``blocks[i]``, the newest block of ``seqs[i]`` (distinct
        sequences): the digests and keys of all of them come from one numpy pass."""
        seq_list = seqs.tolist()
        chains = self._keys
        parents = [chain[-1] if chain else ROOT_KEY for chain in map(chains.get, seq_list)]
        digests = block_digests(self.slots[blocks], self._multipliers)
        salts = self._seq_salt[seqs].astype(np.uint64)
        keys = next_keys(np.array(parents, dtype=np.uint64), digests, salts)
        self._extend_chains(seq_list, blocks.tolist(), keys.tolist())

    def _seal_run(self, seq: int, blocks: list[int]) -> None:
        """An append filled ``blocks``, consecutive blocks of ``seq``, in order."""
        chain = self._keys[seq]
        digests = block_digests(self.slots[blocks], self._multipliers).tolist()
        salt = int(self._seq_salt[seq])
        keys = chain_keys(digests, salt, chain[-1] if chain else ROOT_KEY)
        self._extend_chains([seq] * len(blocks), blocks, keys)

    def _extend_chains(self, seqs: list[int], blocks: list[int], keys: list[int]) -> None:
        """``blocks[i]`` just became full as the next block of ``seqs[i]``, with prefix key
        ``keys[i]``: extend the sequence's key chain and publish the key, unless the
        sequence still has unpublished prompt blocks before it. Up to one call per block
        of a decode step: hot names are bound locally and ``_publish`` is inlined, with
        its array stores done once for all the blocks published here."""
        chains, published = self._keys, self._published
        block_of_key, key_of_block = self._block_of_key, self._key_of_block
        newly: list[int] = []  # the blocks published here,
        owners: list[int] = []  # their sequences
        positions: list[int] = []  # and their positions in their chains
        for seq, block, key in zip(seqs, blocks, keys):
            chain = chains[seq]
            chain.append(key)
            if published[seq] == len(chain) - 1:  # not behind deferred prompt blocks
                published[seq] = len(chain)
                if key not in block_of_key:  # another block may hold this prefix already
                    block_of_key[key] = block
                    key_of_block[block] = key
                    newly.append(block)
                    owners.append(seq)
                    positions.append(len(chain) - 1)
        if newly:
            self._salt_of_block[newly] = self._seq_salt[owners]
            self._pos_of_block[newly] = positions

    def _publish_through(self, seq: int, count: int) -> None:
        """Publish the keys of ``seq``'s first ``count`` full blocks (those not yet)."""
        done, count = self._published[seq], min(count, len(self._keys[seq]))
        self._publish_blocks(seq, done, count)
        self._published[seq] = max(done, count)

    def _publish_blocks(self, seq: int, start: int, stop: int) -> None:
        """Publish the keys of ``seq``'s full blocks ``start .. stop - 1``."""
        chain, table, salt = self._keys[seq], self._tables[seq], int(self._seq_salt[seq])
        for index in range(start, stop):
            self._publish(chain[index], table[index], salt, index)

    def _publish(self, key: int, block: int, salt: int, position: int) -> None:
        if key not in self._block_of_key:
            self._block_of_key[key] = block
            self._key_of_block[block] = key
            self._salt_of_block[block] = salt
            self._pos_of_block[block] = position

    # -- prefix cache lookup -------------------------------------------------------------------
    def _prompt_keys(self, tokens: np.ndarray, salt: int) -> list[int]:
        """``_chain_keys``, remembered for the last prompt: the engine looks a prompt up
        and then allocates it, or (first-chunk admission) a prefix of it, whose full
        blocks' keys are a prefix of the whole prompt's."""
        raw = tokens.tobytes()
        if self._memo is not None and self._memo[0] == salt and self._memo[1].startswith(raw):
            return self._memo[2][: tokens.shape[0] // self.block_size]
        keys = self._chain_keys(tokens, salt)
        self._memo = (salt, raw, keys)
        return keys

    def _chain_keys(self, tokens: np.ndarray, salt: int) -> list[int]:
        """The chained keys of every full block of a prompt."""
        size = self.block_size
        full = tokens.shape[0] // size
        if not full:
            return []
        blocks = tokens[: full * size].reshape(full, size)
        return chain_keys(block_digests(blocks, self._multipliers).tolist(), salt)

    def _lookup(self, tokens: np.ndarray, salt: int) -> tuple[list[int], list[int]]:
        """The prompt's full-block keys and the longest run of cached blocks from its
        start. No mutation (besides the hash memo)."""
        if not self.enable_prefix_caching:
            return [], []
        keys = self._prompt_keys(tokens, salt)
        # The block holding the prompt's last token is never reused: its logits must be
        # computed, and recomputing that token into a shared block would rewrite KV that
        # other sequences read (vLLM caps hits the same way).
        usable = keys[: (tokens.shape[0] - 1) // self.block_size]
        size = self.block_size
        hits = self._cached_run(usable, salt, lambda n: tokens[: n * size].reshape(n, size))
        return keys, hits

    def _cached_run(self, keys: list[int], salt: int, expected_rows) -> list[int]:
        """The cached blocks of the longest run of ``keys`` (a chain from its first
        block) that is cached and verified: a key collision must not alias, so each block
        must hold exactly ``expected_rows(n)[i]`` (the tokens the chain's block i should
        hold), published under ``salt`` at position i. No mutation."""
        hits: list[int] = []
        for key in keys:
            block = self._block_of_key.get(key)
            if block is None:
                break
            hits.append(block)
        if hits:
            same = (self.slots[hits] == expected_rows(len(hits))).all(axis=1)
            same &= self._salt_of_block[hits] == salt
            same &= self._pos_of_block[hits] == self._positions(len(hits))
            if not same.all():
                hits = hits[: int(np.argmin(same))]
        return hits

    # -- allocation ---------------------------------------------------------------------------
    def _blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def can_allocate(self, token_ids, *, salt: int = 0, max_new_tokens: int = 0) -> bool:
        tokens = as_tokens(token_ids, allow_empty=False)
        _, hits = self._lookup(tokens, check_salt(salt))
        revived = self._revived(hits)
        needed = self._blocks_for(tokens.shape[0]) - len(hits)
        return needed <= self._available(revived)

    def allocate(
        self,
        seq_id,
        token_ids,
        *,
        salt: int = 0,
        max_new_tokens: int = 0,
        computed_tokens: int | None = None,
    ) -> int:
        seq = self._new_seq(seq_id)
        tokens = as_tokens(token_ids, allow_empty=False)
        salt = check_salt(salt)
        keys, hits = self._lookup(tokens, salt)
        # Hit blocks that are cached-evictable must not be counted as available: this
        # very allocation takes them back.
        revived = self._revived(hits)
        needed = self._blocks_for(tokens.shape[0]) - len(hits)
        self._require(needed, not_evictable=revived)

        self._make_room(seq)
        self._clock += 1
        if hits:
            self._reuse(hits)
        hit_tokens = len(hits) * self.block_size
        fresh = [self._take_one()] if needed == 1 else self._take(needed).tolist()
        self._write_fresh(fresh, tokens[hit_tokens:])
        self._token_slots += int(tokens.shape[0]) - hit_tokens  # hits were counted in _reuse
        table = hits + fresh
        self._tables[seq] = table
        self._keys[seq] = list(keys)
        self._seq_salt[seq] = salt
        self._published[seq] = len(hits)
        if keys:
            ready = len(keys) if computed_tokens is None else computed_tokens // self.block_size
            self._publish_through(seq, ready)
        self._set_state(seq, _ON_DEVICE)
        self._num_tokens[seq] = tokens.shape[0]
        self._last_block[seq] = table[-1]
        if self.enable_prefix_caching:
            self.prefix_queries_tokens += int(tokens.shape[0])
            self.prefix_hits_tokens += hit_tokens
        return hit_tokens

    def _revived(self, hits: list[int]) -> int:
        """How many hit blocks are cached-evictable (and would leave the evictable set)."""
        return int((self._refcount[hits] == 0).sum()) if hits else 0

    def _write_fresh(self, blocks: list[int], tokens: np.ndarray) -> None:
        """Write ``tokens`` from slot 0 of ``blocks`` (fresh, empty blocks)."""
        size = self.block_size
        full, rest = divmod(tokens.shape[0], size)
        if full:
            self.slots[blocks[:full]] = tokens[: full * size].reshape(full, size)
        if rest:
            self.slots[blocks[full], :rest] = tokens[full * size :]

    def mark_computed(self, seq_id: int, num_tokens: int) -> None:
        """The KV of ``seq_id``'s first ``num_tokens`` tokens is computed (or scheduled
        this step): publish its full blocks among them in the prefix cache."""
        seq = self._live(seq_id)
        if self._state[seq] == _ON_DEVICE:
            self._publish_through(seq, check_count("num_tokens", num_tokens, 0) // self.block_size)

    def cached_prefix_tokens(self, token_ids, *, salt: int = 0) -> int:
        if not self.enable_prefix_caching:
            return 0
        tokens = as_tokens(token_ids, allow_empty=False)
        return len(self._lookup(tokens, check_salt(salt))[1]) * self.block_size

    # -- growth ------------------------------------------------------------------------------
    def _append_need(self, seq: int, num_new: int) -> tuple[int, bool]:
        """(blocks needed, whether the first write needs copy-on-write)."""
        held = int(self._num_tokens[seq])
        size = self.block_size
        room = -held % size  # free slots left in the last block
        grown = -(-(num_new - room) // size) if num_new > room else 0
        cow = bool(room and num_new and self._num_shared)  # a shared block exists at all
        cow = cow and self._refcount[self._last_block[seq]] > 1
        return grown + int(cow), bool(cow)

    def can_append(self, seq_id: int, num_tokens: int = 1) -> bool:
        seq = self._on_device(seq_id)
        needed, _ = self._append_need(seq, check_count("num_tokens", num_tokens, 0))
        return needed <= self._available()

    def append(self, seq_id: int, token_ids) -> list[BlockMove]:
        seq = self._on_device(seq_id)
        tokens = as_tokens(token_ids, allow_empty=True)
        num_new = tokens.shape[0]
        needed, cow = self._append_need(seq, num_new)
        self._require(needed)
        if num_new == 0:
            return []

        self._clock += 1
        table = self._tables[seq]
        held = int(self._num_tokens[seq])
        moves = [self._copy_on_write(seq, table, held)] if cow else []
        grown = needed - int(cow)
        if grown:
            table.extend([self._take_one()] if grown == 1 else self._take(grown).tolist())
            self._last_block[seq] = table[-1]
        if num_new == 1:  # the decode case: one scalar write, no index arrays
            self.slots[table[-1], held % self.block_size] = tokens[0]
        else:
            self._write_at(table, held, tokens)
        self._token_slots += num_new
        self._num_tokens[seq] = held + num_new
        first, end = held // self.block_size, (held + num_new) // self.block_size
        if end > first and self.enable_prefix_caching:  # blocks filled up: seal them
            self._seal_run(seq, table[first:end])
        return moves

    def _write_at(self, table: list[int], start: int, tokens: np.ndarray) -> None:
        """Write ``tokens`` at logical positions ``start...`` of a block table."""
        size = self.block_size
        end = start + tokens.shape[0]
        first, last = start // size, (end - 1) // size
        blocks = np.asarray(table[first : last + 1], dtype=np.int64)
        offsets = np.arange(start - first * size, end - first * size)
        self.slots[blocks[offsets // size], offsets % size] = tokens

    def _copy_on_write(self, seq: int, table: list[int], num_tokens: int) -> BlockMove:
        """Give ``seq`` (holding ``num_tokens``) a private copy of its shared, partly
        filled last block."""
        shared = table[-1]
        private = self._take_one()
        self.slots[private] = self.slots[shared]
        # The same tokens now live in two in-use blocks.
        self._token_slots += num_tokens % self.block_size
        self._refcount[shared] -= 1  # still >= 1: another table keeps it
        if self._refcount[shared] == 1:
            self._num_shared -= 1
        table[-1] = private
        self._last_block[seq] = private
        return BlockMove(shared, private)

    def _check_batch(self, seq_ids, token_ids) -> tuple[np.ndarray, np.ndarray]:
        seqs = np.asarray(seq_ids)
        if seqs.ndim != 1 or np.shape(token_ids) != seqs.shape:
            raise InvalidRequest(
                f"seq_ids and token_ids must be 1-D of equal length, got {seqs.shape} "
                f"and {np.shape(token_ids)}"
            )
        tokens = as_tokens(token_ids, allow_empty=True)  # integer, in range
        if not seqs.size:
            return seqs.astype(np.int64), tokens
        if seqs.dtype.kind not in "iu":
            raise InvalidRequest(f"seq_ids must be integers, got dtype {seqs.dtype}")
        seqs = seqs.astype(np.int64, copy=False)
        ids = seqs.tobytes()
        if self._checked_ids != (ids, self._epoch):
            self._check_ids(seqs)
            self._checked_ids = (ids, self._epoch)
        return seqs, tokens

    def _check_ids(self, seqs: np.ndarray) -> None:
        """Raise unless every id of the (int64) batch is a distinct on-device sequence."""
        if seqs.min() < 0 or seqs.max() >= self._state.shape[0]:
            self._on_device(int(seqs[(seqs < 0) | (seqs >= self._state.shape[0])][0]))
        on_device = self._state[seqs] == _ON_DEVICE
        if not on_device.all():
            self._on_device(int(seqs[np.argmin(on_device)]))  # raises the precise error
        # Duplicate ids: scatter positions, the later duplicate overwrites the earlier.
        positions = self._positions(seqs.shape[0])
        self._batch_mark[seqs] = positions
        if (self._batch_mark[seqs] != positions).any():
            raise InvalidRequest("append_batch: duplicate sequence ids in one batch")

    def _positions(self, count: int) -> np.ndarray:
        """``arange(count)``, cached: the decode batch has the same size step after step."""
        if self._arange.shape[0] < count:
            self._arange = np.arange(max(count, 2 * self._arange.shape[0]))
        return self._arange[:count]

    def _batch_need(self, seqs: np.ndarray) -> _BatchNeed:
        held = self._num_tokens[seqs]
        size = self.block_size
        # int64 modulo is the slowest op of the step; a power-of-two size needs a mask.
        slot = held & (size - 1) if size & (size - 1) == 0 else held % size
        at_boundary = slot == 0
        last = self._last_block[seqs]
        crossing = int(np.count_nonzero(at_boundary))
        needed, shared = crossing, None
        # Without shared blocks (no fork, no live prefix hit) skip copy-on-write entirely.
        if self._num_shared:
            shared = (self._refcount[last] > 1) & ~at_boundary
            if shared.any():
                # k batch members sharing a block with refcount r: each copies while
                # another table still points at the block, so min(k, r - 1) copies (the
                # last writer may keep the original when every sharer is in the batch).
                blocks, members = np.unique(last[shared], return_counts=True)
                needed += int(np.minimum(members, self._refcount[blocks] - 1).sum())
            else:
                shared = None
        return _BatchNeed(held, slot, last, at_boundary, crossing, shared, needed)

    def blocks_needed_for_batch(self, seq_ids: np.ndarray) -> int:
        seqs, _ = self._check_batch(seq_ids, np.zeros(np.shape(seq_ids), np.int32))
        return self._batch_need(seqs).needed

    def append_batch(self, seq_ids: np.ndarray, token_ids: np.ndarray) -> list[BlockMove]:
        seqs, tokens = self._check_batch(seq_ids, token_ids)
        need = self._batch_need(seqs)
        self._require(need.needed)
        if seqs.size == 0:
            return []

        self._clock += 1
        moves: list[BlockMove] = []
        if need.crossing:
            crossing = seqs[need.at_boundary]
            fresh = self._take(need.crossing)
            tables = self._tables
            for seq, block in zip(crossing.tolist(), fresh.tolist()):
                tables[seq].append(block)
            self._last_block[crossing] = fresh
        sharing = seqs[need.shared].tolist() if need.shared is not None else []
        for seq in sharing:
            table = self._tables[seq]
            if self._refcount[table[-1]] > 1:  # an earlier batch member may have copied
                moves.append(self._copy_on_write(seq, table, int(self._num_tokens[seq])))
        # After the loops every batch member's last block is private, so the fancy
        # indices below are distinct and one vectorised write is exact.
        held = need.held
        last = self._last_block[seqs] if need.crossing or moves else need.last
        self.slots[last, need.slot] = tokens
        self._num_tokens[seqs] = held + 1
        self._token_slots += int(seqs.shape[0])
        if self.enable_prefix_caching:
            sealing = seqs[need.slot == self.block_size - 1]
            if sealing.size:
                self._seal_step(sealing, self._last_block[sealing])
        return moves

    # -- sharing and release ------------------------------------------------------------------
    def fork(self, parent_id: int, child_id: int) -> list[BlockMove]:
        parent = self._on_device(parent_id)
        child = self._new_seq(child_id)
        self._make_room(child)
        self._clock += 1
        table = list(self._tables[parent])
        self._add_reference(table)  # a table holds each block once, so no duplicates
        self._tables[child] = table
        self._keys[child] = list(self._keys[parent])
        self._seq_salt[child] = self._seq_salt[parent]
        self._published[child] = self._published[parent]
        self._set_state(child, _ON_DEVICE)
        self._num_tokens[child] = self._num_tokens[parent]
        self._last_block[child] = self._last_block[parent]
        return []

    def free(self, seq_id: int) -> None:
        seq = self._live(seq_id)
        self._clock += 1
        table = self._tables.pop(seq)
        if self._state[seq] == _SWAPPED:
            self._cpu_free.put(table)
        else:
            self._release(table, int(self._num_tokens[seq]))
        del self._keys[seq], self._published[seq]
        self._set_state(seq, _DEAD)
        self._num_tokens[seq] = 0

    def evict(self, num_blocks: int = 1) -> list[int]:
        """Reclaim up to ``num_blocks`` cached-evictable blocks, in the eviction policy's
        order: their keys are dropped and they go to the back of the free list.
        Returns their ids. Raises InvalidRequest for a negative count."""
        count = check_count("num_blocks", num_blocks, 0)
        self._clock += 1
        victims = self.evictor.pick_victims(count)
        for block in victims:
            self._drop_key(block)
        self._free.put(victims)
        return victims

    # -- swap ----------------------------------------------------------------------------------
    def can_swap_out(self, *seq_ids: int) -> bool:
        seqs = [self._live(seq_id) for seq_id in seq_ids]
        if any(self._state[seq] != _ON_DEVICE for seq in seqs):
            return False
        # Each sequence takes one CPU block per table entry (a shared block is copied for
        # every holder), so the sum is exact.
        return sum(len(self._tables[seq]) for seq in seqs) <= len(self._cpu_free)

    def swap_out(self, seq_id: int) -> list[BlockMove]:
        seq = self._on_device(seq_id)
        device = self._tables[seq]
        if len(device) > len(self._cpu_free):
            raise OutOfBlocks(
                f"swap out of sequence {seq} needs {len(device)} CPU blocks, "
                f"{len(self._cpu_free)} free",
                needed=len(device),
                available=len(self._cpu_free),
            )
        self._clock += 1
        cpu = self._cpu_free.take(len(device)).tolist()
        self.cpu_slots[cpu] = self.slots[device]
        self._release(device, int(self._num_tokens[seq]))
        self._tables[seq] = cpu
        self._set_state(seq, _SWAPPED)
        return [BlockMove(d, c) for d, c in zip(device, cpu)]

    def _swap_in_plan(self, seq: int) -> tuple[list[int], int, int]:
        """(device blocks to share instead of copying, blocks to take, of the shared ones
        how many are cached-evictable). Full blocks whose prefix is still cached on the
        device (a forked sibling's, or this sequence's own, not yet evicted) are shared
        again rather than copied back: swapping a fork out and in must not turn its
        shared prompt into private copies, which could need more memory than it freed."""
        cpu = self._tables[seq]
        salt = int(self._seq_salt[seq])
        hits = self._cached_run(self._keys[seq], salt, lambda n: self.cpu_slots[cpu[:n]])
        return hits, len(cpu) - len(hits), self._revived(hits)

    def can_swap_in(self, *seq_ids: int) -> bool:
        """Exact for one sequence. For several, the answer assumes no prefix hits (their
        whole tables are copied back): one swap-in can evict blocks another would have
        shared, but a hit never needs more than the copy it replaces, so a yes is safe
        (a no may be cautious)."""
        seqs = [self._live(seq_id) for seq_id in seq_ids]
        if any(self._state[seq] != _SWAPPED for seq in seqs):
            return False
        if len(seqs) == 1:
            _, needed, revived = self._swap_in_plan(seqs[0])
            return needed <= self._available(revived)
        return sum(len(self._tables[seq]) for seq in seqs) <= self._available()

    def swap_in(self, seq_id: int) -> list[BlockMove]:
        seq = self._live(seq_id)
        if self._state[seq] != _SWAPPED:
            raise InvalidRequest(f"sequence {seq} is not swapped out")
        hits, needed, revived = self._swap_in_plan(seq)
        self._require(needed, not_evictable=revived)
        self._clock += 1
        if hits:
            self._reuse(hits)
        cpu = self._tables[seq]
        copied = cpu[len(hits) :]
        device = self._take(needed).tolist()
        self.slots[device] = self.cpu_slots[copied]
        self._token_slots += int(self._num_tokens[seq]) - len(hits) * self.block_size
        self._cpu_free.put(cpu)
        table = hits + device
        self._tables[seq] = table
        # Computed full blocks become prefix-cache candidates again under their keys.
        self._publish_blocks(seq, len(hits), self._published[seq])
        self._set_state(seq, _ON_DEVICE)
        self._last_block[seq] = table[-1]
        return [BlockMove(c, d) for c, d in zip(copied, device)]

    # -- queries ---------------------------------------------------------------------------------
    def is_swapped(self, seq_id: int) -> bool:
        return self._state[self._live(seq_id)] == _SWAPPED

    def num_tokens(self, seq_id: int) -> int:
        return int(self._num_tokens[self._live(seq_id)])

    def block_table(self, seq_id: int) -> list[int]:
        return list(self._tables[self._live(seq_id)])

    def held_blocks(self, seq_id: int) -> int:
        seq = self._live(seq_id)
        return len(self._tables[seq]) if self._state[seq] == _ON_DEVICE else 0

    def read_tokens(self, seq_id: int) -> np.ndarray:
        seq = self._live(seq_id)
        pool = self.cpu_slots if self._state[seq] == _SWAPPED else self.slots
        return pool[self._tables[seq]].reshape(-1)[: self._num_tokens[seq]].copy()

    def usage(self, next_request_tokens: int = 0) -> KVUsage:
        size = self.block_size
        used = self.num_used_blocks
        cached = len(self.evictor)
        free = len(self._free)
        return KVUsage(
            total_slots=self.num_blocks * size,
            token_slots=self._token_slots,
            reserved_slots=0,
            internal_frag_slots=used * size - self._token_slots,
            external_frag_slots=0,  # any free block fits any request's next block
            free_slots=(free + cached) * size,
            cached_slots=cached * size,
            used_blocks=used,
            cached_blocks=cached,
            free_blocks=free,
        )

    def snapshot(self) -> bytes:
        """Every piece of mutable state, serialised, for bit-for-bit comparisons in
        tests (a refused command must leave it unchanged). The hash memo, the checked
        batch and the epoch are excluded: pure caches."""
        state = (
            self.slots,
            self.cpu_slots,
            self._refcount,
            self._num_shared,
            list(self._free),
            list(self._cpu_free),
            self._key_of_block,
            sorted(self._block_of_key.items()),
            self.evictor,
            self._clock,
            self._token_slots,
            self.peak_used_blocks,
            self.prefix_queries_tokens,
            self.prefix_hits_tokens,
            self._state,
            self._num_tokens,
            self._last_block,
            sorted(self._tables.items()),
            sorted(self._keys.items()),
            self._seq_salt,
            self._salt_of_block,
            self._pos_of_block,
            sorted(self._published.items()),
        )
        return pickle.dumps(state)

    # -- invariants ------------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Verify the whole state (O(pool + tokens)); AssertionError names the break."""
        on_device, swapped = self._sequences_by_state()
        self._check_partition()
        self._check_tables(on_device)
        self._check_prefix_cache(on_device)
        self._check_cpu_pool(swapped)
        # (usage()'s split sums to the pool by construction; its parts are checked above:
        # token slots against the tables, used blocks against the partition.)
        assert self.peak_used_blocks >= self.num_used_blocks
        shared = int(np.count_nonzero(self._refcount > 1))
        assert self._num_shared == shared, f"shared-block count {self._num_shared} != {shared}"

    def _sequences_by_state(self) -> tuple[list[int], list[int]]:
        live = sorted(self._tables)
        assert sorted(self._keys) == live
        assert sorted(self._published) == live
        for seq in live:
            assert 0 <= self._published[seq] <= len(self._keys[seq]), f"published of {seq}"
        assert set(np.flatnonzero(self._state).tolist()) == set(live), "state vs tables"
        on_device = [s for s in live if self._state[s] == _ON_DEVICE]
        swapped = [s for s in live if self._state[s] == _SWAPPED]
        return on_device, swapped

    def _check_partition(self) -> None:
        free = list(self._free)
        cached = self.evictor.blocks()
        assert len(set(free)) == len(free), "a block is on the free list twice"
        assert len(cached) == len(self.evictor) == len(set(cached))
        assert not set(free) & set(cached), "a block is both free and cached-evictable"
        for block in free:
            assert self._refcount[block] == 0, f"free block {block} is referenced"
            assert self._key_of_block[block] is None, f"free block {block} has a key"
        for block in cached:
            assert self._refcount[block] == 0, f"cached block {block} is referenced"
            assert self._key_of_block[block] is not None, f"cached block {block} has no key"
        idle = set(free) | set(cached)
        in_use = [b for b in range(self.num_blocks) if b not in idle]
        assert all(self._refcount[b] > 0 for b in in_use), "an unreferenced block is lost"

    def _check_tables(self, on_device: list[int]) -> None:
        size = self.block_size
        references = np.zeros(self.num_blocks, np.int64)
        fill = np.zeros(self.num_blocks, np.int64)
        for seq in on_device:
            table, held = self._tables[seq], int(self._num_tokens[seq])
            assert held > 0 and len(table) == self._blocks_for(held), f"table of {seq}"
            assert len(set(table)) == len(table), f"sequence {seq} holds a block twice"
            assert self._last_block[seq] == table[-1], f"last block of {seq}"
            np.add.at(references, table, 1)
            for index, block in enumerate(table):
                expected = min(size, held - index * size)
                assert fill[block] in (0, expected), f"sharers disagree on block {block}"
                fill[block] = expected
        assert np.array_equal(references, self._refcount), "refcount != table references"
        assert int(fill.sum()) == self._token_slots, "token slot counter"
        for block in self._block_of_key.values():  # keys are given to full blocks only
            assert fill[block] in (0, size), f"keyed block {block} is not full"

    def _check_prefix_cache(self, on_device: list[int]) -> None:
        for key, block in self._block_of_key.items():
            assert self._key_of_block[block] == key, f"key map of block {block}"
        keyed = sum(k is not None for k in self._key_of_block)
        assert keyed == len(self._block_of_key), "block -> key map has extra entries"
        if not self.enable_prefix_caching:
            assert keyed == 0 and all(not chain for chain in self._keys.values())
            return
        for seq in self._tables:
            chain = self._chain_keys(self.read_tokens(seq), int(self._seq_salt[seq]))
            assert self._keys[seq] == chain, f"key chain of sequence {seq}"
        for seq in on_device:
            for index, (key, block) in enumerate(zip(self._keys[seq], self._tables[seq])):
                own = self._key_of_block[block]
                assert own is None or own == key, f"block {block} cached under another key"
                if own == key:
                    assert self._salt_of_block[block] == self._seq_salt[seq], f"salt of {block}"
                    assert self._pos_of_block[block] == index, f"position of block {block}"

    def _check_cpu_pool(self, swapped: list[int]) -> None:
        owned = [block for seq in swapped for block in self._tables[seq]]
        free = list(self._cpu_free)
        assert len(set(owned)) == len(owned), "a CPU block belongs to two sequences"
        assert len(set(free)) == len(free), "a CPU block is on the free list twice"
        assert sorted(owned + free) == list(range(self.num_cpu_blocks)), "CPU pool leak"
        for seq in swapped:
            assert len(self._tables[seq]) == self._blocks_for(int(self._num_tokens[seq]))
