"""The prefix cache's index: which device blocks hold which prefixes, and the key chain
of every live sequence.

A full block is *published* under its prefix key (see backend/blocks/prefix_hash.py) once its
KV is computed; a later prompt whose leading blocks have the same keys may then share
those blocks instead of computing them again. The index only maps keys to blocks and
verifies hits; which blocks are free, in use or evictable is the block pool's business
(backend/blocks/block_pool.py), and it tells the index which blocks it evicts (``drop``).

The index reads the device memory (the token id in every slot) to digest blocks that
fill up and to verify a hit against the cached block's tokens; it never writes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from backend.base import NULL_BLOCK, InvalidRequest, grow_arrays
from backend.blocks.prefix_hash import (
    ROOT_KEY,
    block_digests,
    chain_keys,
    next_keys,
    slot_multipliers,
)

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


def verified_run(
    keys: list[int],
    block_of_key: dict[int, int],
    placed: tuple[np.ndarray, ...],
    rows: Callable[[int], np.ndarray],
    salt: int,
    start: int = 0,
) -> list[int]:
    """The blocks of the longest run of ``keys`` (a chain's blocks ``start, start + 1,
    ...``) that ``block_of_key`` holds and that a key collision cannot alias: block i holds
    exactly ``rows(n)[i]`` (the tokens the chain's block ``start + i`` should hold, for a
    run of n) and was stored under ``salt`` at chain position ``start + i``. ``placed`` is
    (token memory, salt of each block, position of each block), the store's own arrays.
    The device's prefix index and an offload tier both answer hits with it. No mutation."""
    blocks: list[int] = []
    for key in keys:
        block = block_of_key.get(key)
        if block is None:
            break
        blocks.append(block)
    if not blocks:
        return blocks
    memory, salts, positions = placed
    same = (memory[blocks] == rows(len(blocks))).all(axis=1)
    same &= salts[blocks] == salt
    same &= positions[blocks] == np.arange(start, start + len(blocks))
    return blocks if same.all() else blocks[: int(np.argmin(same))]


class PrefixIndex:
    """Prefix keys of published blocks and of every live sequence's full blocks.

    ``slots`` is the device memory (``[num_blocks, block_size]`` token ids), read only.
    With ``enabled`` false nothing is hashed or published and no sequence is registered
    (vLLM hashes nothing without prefix caching either): the block manager then calls
    none of the sequence methods, and the swap-in queries find nothing published.
    """

    def __init__(self, slots: np.ndarray, *, enabled: bool):
        num_blocks, self.block_size = slots.shape
        self.enabled = enabled
        self._slots = slots
        self._multipliers = slot_multipliers(self.block_size)
        self._key_of_block: list[int | None] = [None] * num_blocks
        self._block_of_key: dict[int, int] = {}  # the block a hit on the key takes
        # Bumped whenever the block a hit on some key takes changes, so that a lookup's
        # answer can be kept until then (kv_groups.py keeps one).
        self.version = 0
        # Beside other groups' indexes over the same pool (GroupIndexes): which index
        # publishes each block, as ``_group`` there, -1 for none.
        self._owners: np.ndarray | None = None
        self._group = -1
        # An index over the same pool whose key chains this one's equal (the first KV
        # cache group's: same tokens, same salts) and which seals first: a run's keys
        # are read from it instead of hashed again.
        self._peer: PrefixIndex | None = None
        # Other blocks holding a published prefix, oldest first: two requests that compute
        # the same prefix at once each publish their copy (vLLM keeps every block under
        # its hash, so that a block table never changes); when the block a hit takes is
        # evicted, the oldest copy left takes its place.
        self._copies: dict[int, list[int]] = {}
        # The salt and chain position each published block was published under: a hit
        # checks them with the tokens, so a key collision cannot share a prefix across
        # tenants or reuse a block at another position.
        self._salt_of_block = np.zeros(num_blocks, np.int64)
        self._pos_of_block = np.zeros(num_blocks, np.int64)
        self._chains: dict[int, list[int]] = {}  # the key chain of each sequence's full blocks
        # How many leading full blocks of each sequence are published. A block is
        # published only once its KV is computed (scheduled), as vLLM does: a prompt
        # admitted whole but prefilled in chunks must not let another request "hit"
        # blocks whose KV does not exist yet.
        self._published: dict[int, int] = {}
        self._salts = np.zeros(64, np.int64)  # per sequence id (an array: the decode step
        # gathers the salts of every sealing sequence at once)
        # can_allocate then allocate of the same prompt would hash it twice; remember one.
        self._memo: tuple[int, bytes, list[int]] | None = None
        self.queries_tokens = 0
        self.hits_tokens = 0
        # Blocks published since the offload tier last took them (None: no tier).
        self.newly_published: list[int] | None = None
        # Per sequence, which of its table's positions may be published (a sliding
        # window's sparse retention, sliding_window.py); a sequence not here: all.
        self._retained: dict[int, Callable[[int], bool]] = {}

    def join_group(self, owners: np.ndarray, number: int, peer: PrefixIndex | None) -> None:
        """Serve as KV cache group ``number`` beside other groups' indexes over one pool
        (GroupIndexes): mark each block this index publishes in the shared ``owners``
        array, and read a sealed run's keys from ``peer`` (None: hash them)."""
        self._owners, self._group, self._peer = owners, number, peer

    # -- queries ---------------------------------------------------------------------------
    @property
    def stats(self) -> PrefixCacheStats:
        return PrefixCacheStats(self.queries_tokens, self.hits_tokens)

    def __len__(self) -> int:
        """Published keys (each names one block)."""
        return len(self._block_of_key)

    def keyed_blocks(self) -> list[int]:
        """The blocks published under a key, copies included (any order)."""
        blocks = list(self._block_of_key.values())
        for copies in self._copies.values():
            blocks += copies
        return blocks

    def key_of(self, block: int) -> int | None:
        """The key ``block`` is published under (None: unpublished)."""
        return self._key_of_block[block]

    def placement_of(self, block: int) -> tuple[int, int]:
        """(salt, chain position) ``block`` is published under."""
        return int(self._salt_of_block[block]), int(self._pos_of_block[block])

    def is_keyed(self, block: int) -> bool:
        return self._key_of_block[block] is not None

    def partition(self, blocks: list[int]) -> tuple[list[int], list[int], list[int]]:
        """``blocks`` split into (published, their keys, unpublished), in the given
        order."""
        key_of_block = self._key_of_block
        keyed, keys, unkeyed = [], [], []
        for block in blocks:
            key = key_of_block[block]
            if key is None:
                unkeyed.append(block)
            else:
                keyed.append(block)
                keys.append(key)
        return keyed, keys, unkeyed

    def cached_block(self, key: int, salt: int, position: int, row: np.ndarray) -> int | None:
        """The block published under ``key`` if it holds exactly ``row`` and was published
        under ``salt`` at chain ``position`` (a key collision cannot alias), else None.
        No mutation."""
        block = self._block_of_key.get(key)
        if block is None or self._salt_of_block[block] != salt:
            return None
        if self._pos_of_block[block] != position or not (self._slots[block] == row).all():
            return None
        return block

    def lookup(self, tokens: np.ndarray, salt: int) -> tuple[list[int], list[int]]:
        """The prompt's full-block keys and the blocks of the longest verified run of
        them cached from its start (both empty when disabled). Mutates only the memo."""
        if not self.enabled:
            return [], []
        keys = self._prompt_keys(tokens, salt)
        return keys, self.hits_of(keys, tokens, salt)

    def hits_of(self, keys: list[int], tokens: np.ndarray, salt: int) -> list[int]:
        """``lookup``'s blocks for a prompt whose full-block keys are known (another KV
        cache group's index hashed it). No mutation."""
        # The block holding the prompt's last token is never reused: its logits must be
        # computed, and recomputing that token into a shared block would rewrite KV that
        # other sequences read (vLLM caps hits the same way).
        size = self.block_size
        usable = keys[: (tokens.shape[0] - 1) // size]
        return self._cached_run(usable, salt, lambda n: tokens[: n * size].reshape(n, size))

    def cached_blocks_of(self, seq: int, rows: Callable[[int], np.ndarray]) -> list[int]:
        """The cached blocks of the longest verified run of live ``seq``'s own chain,
        where ``rows(n)`` are the tokens of its first ``n`` full blocks (a swapped-out
        sequence's, read from its CPU copy). The run covers only blocks whose KV ``seq``
        has computed (its published ones): the others are still to be computed in place.
        No mutation."""
        if not self.enabled:
            return []
        computed = self._chains[seq][: self._published[seq]]
        return self._cached_run(computed, int(self._salts[seq]), rows)

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
        """The chained keys of every full block of a token sequence."""
        size = self.block_size
        full = tokens.shape[0] // size
        if not full:
            return []
        blocks = tokens[: full * size].reshape(full, size)
        return chain_keys(block_digests(blocks, self._multipliers).tolist(), salt)

    def _cached_run(
        self, keys: list[int], salt: int, expected_rows: Callable[[int], np.ndarray]
    ) -> list[int]:
        """The cached blocks of the longest run of ``keys`` (a chain from its first
        block) that is cached and verified: a key collision must not alias, so each block
        must hold exactly ``expected_rows(n)[i]`` (the tokens the chain's block i should
        hold), published under ``salt`` at position i. No mutation."""
        placed = (self._slots, self._salt_of_block, self._pos_of_block)
        return verified_run(keys, self._block_of_key, placed, expected_rows, salt)

    # -- sequences -------------------------------------------------------------------------
    def add_sequence(
        self,
        seq: int,
        salt: int,
        keys: list[int],
        table: list[int],
        num_hits: int,
        computed_tokens: int | None,
    ) -> None:
        """Register new sequence ``seq`` holding ``table``, whose full blocks have
        ``keys`` (from ``lookup``) and whose first ``num_hits`` blocks are prefix hits
        (published already); publish its full blocks among the first ``computed_tokens``
        tokens (None: all). Mutates the sequence's chain, salt and published count, and
        the key maps."""
        grow_arrays(self, ("_salts",), seq + 1)
        self._chains[seq] = list(keys)
        self._salts[seq] = salt
        self._published[seq] = num_hits
        if keys:
            size = self.block_size
            ready = len(keys) if computed_tokens is None else computed_tokens // size
            self.publish_through(seq, ready, table)

    def count_lookup(self, prompt_tokens: int, hit_tokens: int) -> None:
        """Count an allocation's prompt in the hit statistics (when enabled)."""
        if self.enabled:
            self.queries_tokens += prompt_tokens
            self.hits_tokens += hit_tokens

    def fork(self, parent: int, child: int) -> None:
        """``child`` holds the same blocks as ``parent``: the same chain, salt and
        published count."""
        grow_arrays(self, ("_salts",), child + 1)
        self._chains[child] = list(self._chains[parent])
        self._salts[child] = self._salts[parent]
        self._published[child] = self._published[parent]
        if parent in self._retained:
            self._retained[child] = self._retained[parent]

    def remove(self, seq: int) -> None:
        """Forget a freed sequence. Its published blocks stay published: the pool
        decides (by their refcount) whether they are still in use or evictable."""
        del self._chains[seq], self._published[seq]
        self._retained.pop(seq, None)

    def retain(self, seq: int, keep: Callable[[int], bool] | None) -> None:
        """From now on publish only the blocks of ``seq`` at the table positions ``keep``
        accepts (None: every one); blocks passed over are never published later."""
        if keep is None:
            self._retained.pop(seq, None)
        else:
            self._retained[seq] = keep

    # -- publishing ------------------------------------------------------------------------
    def publish_through(self, seq: int, count: int, table: list[int]) -> None:
        """Publish the keys of ``seq``'s first ``count`` full blocks (of its block
        ``table``) not published yet."""
        done, count = self._published[seq], min(count, len(self._chains[seq]))
        self._publish_blocks(seq, done, count, table)
        self._published[seq] = max(done, count)

    def republish(self, seq: int, start: int, table: list[int]) -> None:
        """``seq`` is back on the device in ``table`` (swap-in), its first ``start``
        blocks shared from the cache: publish its other computed full blocks again."""
        if self.enabled:
            self._publish_blocks(seq, start, self._published[seq], table)

    def _publish_blocks(self, seq: int, start: int, stop: int, table: list[int]) -> None:
        """Publish the keys of ``seq``'s full blocks ``start .. stop - 1``."""
        keep = self._retained.get(seq)
        positions = [
            index
            for index in range(start, stop)
            # (NULL: a sliding window released it unpublished)
            if table[index] != NULL_BLOCK and (keep is None or keep(index))
        ]
        chain = self._chains[seq]
        blocks, keys = [table[i] for i in positions], [chain[i] for i in positions]
        self._publish_many([seq] * len(positions), blocks, keys, positions)

    def _publish_many(
        self, seqs: list[int], blocks: list[int], keys: list[int], positions: list[int]
    ) -> None:
        """Publish ``blocks[i]`` of ``seqs[i]`` under ``keys[i]`` at chain position
        ``positions[i]``, in order; a block published already (shared by a fork) is
        skipped, and a key another block holds already gets this one as a copy. Up to
        one call per decode step: hot names are bound locally and the array stores are
        done once for all the blocks."""
        block_of_key, key_of_block, copies = self._block_of_key, self._key_of_block, self._copies
        placed: list[int] = []  # the blocks published here,
        owners: list[int] = []  # their sequences
        placed_at: list[int] = []  # and their positions in their chains
        newly: list[int] = []  # those that are the first to hold their prefix
        for seq, block, key, position in zip(seqs, blocks, keys, positions):
            if key_of_block[block] is not None:
                continue
            key_of_block[block] = key
            placed.append(block)
            owners.append(seq)
            placed_at.append(position)
            if key in block_of_key:  # another block holds this prefix already
                copies.setdefault(key, []).append(block)
            else:
                block_of_key[key] = block
                newly.append(block)
        if newly:
            self.version += 1
        if placed:
            self._salt_of_block[placed] = self._salts[owners]
            self._pos_of_block[placed] = placed_at
            if self._owners is not None:
                self._owners[placed] = self._group
            if self.newly_published is not None:
                self.newly_published += newly

    def seal_step(self, seqs: np.ndarray, blocks: np.ndarray) -> None:
        """A decode step filled ``blocks[i]``, the newest block of ``seqs[i]`` (distinct
        sequences): the digests and keys of all of them come from one numpy pass."""
        seq_list = seqs.tolist()
        chains = self._chains
        parents = [chain[-1] if chain else ROOT_KEY for chain in map(chains.get, seq_list)]
        digests = block_digests(self._slots[blocks], self._multipliers)
        salts = self._salts[seqs].astype(np.uint64)
        keys = next_keys(np.array(parents, dtype=np.uint64), digests, salts)
        self._extend_chains(seq_list, blocks.tolist(), keys.tolist())

    def seal_run(self, seq: int, blocks: list[int]) -> None:
        """An append filled ``blocks``, consecutive blocks of ``seq``, in order: extend its
        key chain and publish them, unless it still has unpublished prompt blocks."""
        chain, count = self._chains[seq], len(blocks)
        start = len(chain)
        sealed = self._peer._chains[seq] if self._peer is not None else chain
        if len(sealed) >= start + count:  # the peer sealed them already
            keys = sealed[start : start + count]
        else:
            digests = block_digests(self._slots[blocks], self._multipliers).tolist()
            salt = int(self._salts[seq])
            keys = chain_keys(digests, salt, chain[-1] if chain else ROOT_KEY)
        chain.extend(keys)
        if self._published[seq] != start:  # behind deferred prompt blocks
            return
        self._published[seq] = start + count
        positions = list(range(start, start + count))
        keep = self._retained.get(seq)
        if keep is not None:
            kept = [i for i, position in enumerate(positions) if keep(position)]
            blocks, keys = [blocks[i] for i in kept], [keys[i] for i in kept]
            positions = [positions[i] for i in kept]
        self._publish_many([seq] * len(positions), blocks, keys, positions)

    def _extend_chains(self, seqs: list[int], blocks: list[int], keys: list[int]) -> None:
        """``blocks[i]`` just became full as the next block of ``seqs[i]`` (distinct
        sequences), with prefix key ``keys[i]``: extend the sequence's key chain and
        publish the key, unless the sequence still has unpublished prompt blocks before
        it."""
        chains, published, retained = self._chains, self._published, self._retained
        owners: list[int] = []  # the sequences, blocks, keys and positions to publish
        chosen: list[int] = []
        chosen_keys: list[int] = []
        positions: list[int] = []
        for seq, block, key in zip(seqs, blocks, keys):
            chain = chains[seq]
            position = len(chain)
            chain.append(key)
            if published[seq] != position:  # behind deferred prompt blocks
                continue
            published[seq] = position + 1
            if retained and seq in retained and not retained[seq](position):
                continue
            owners.append(seq)
            chosen.append(block)
            chosen_keys.append(key)
            positions.append(position)
        self._publish_many(owners, chosen, chosen_keys, positions)

    def drop(self, blocks: list[int]) -> None:
        """The pool evicted ``blocks`` (each published): forget their keys, in order. A
        key keeps its other copies, the oldest now the one a hit takes."""
        block_of_key, copies = self._block_of_key, self._copies
        self.version += 1
        if self._owners is not None:
            self._owners[blocks] = -1
        for block in blocks:
            key = self._key_of_block[block]
            self._key_of_block[block] = None
            others = copies.get(key)
            if block_of_key[key] == block:
                if others:
                    block_of_key[key] = others.pop(0)
                else:
                    del block_of_key[key]
            else:
                others.remove(block)
            if others is not None and not others:
                del copies[key]

    # -- state -----------------------------------------------------------------------------
    def snapshot_state(self) -> tuple:
        """Every piece of mutable state but the memo (a pure cache), for snapshots."""
        return (
            self._key_of_block,
            sorted(self._block_of_key.items()),
            sorted(self._copies.items()),
            self._salt_of_block,
            self._pos_of_block,
            sorted(self._chains.items()),
            sorted(self._published.items()),
            sorted(self._retained),
            self._salts,
            self.queries_tokens,
            self.hits_tokens,
            self.newly_published,
        )

    def check_invariants(
        self,
        tables: dict[int, list[int]],
        on_device: list[int],
        read_tokens: Callable[[int], np.ndarray] | None,
    ) -> None:
        """Verify the index against the live sequences: ``tables`` (every live one's
        block table), which of them are ``on_device``, and the tokens each holds (None:
        not readable, a sliding window dropped some; the chains are not recomputed).
        Raises AssertionError naming the break."""
        live = sorted(tables) if self.enabled else []  # (disabled: none registered)
        assert sorted(self._chains) == live, "key chains vs live sequences"
        assert sorted(self._published) == live, "published counts vs live sequences"
        for seq in live:
            assert 0 <= self._published[seq] <= len(self._chains[seq]), f"published of {seq}"
        for key, block in self._block_of_key.items():
            assert self._key_of_block[block] == key, f"key map of block {block}"
        for key, copies in self._copies.items():
            assert copies and key in self._block_of_key, f"copies of an unpublished key {key}"
            assert all(self._key_of_block[block] == key for block in copies), f"copies of {key}"
        keyed = sum(k is not None for k in self._key_of_block)
        listed = len(self._block_of_key) + sum(len(c) for c in self._copies.values())
        assert keyed == listed, "block -> key map has extra entries"
        if not self.enabled:
            assert keyed == 0, "a disabled index published a key"
            return
        for seq in live if read_tokens is not None else ():
            chain = self._chain_keys(read_tokens(seq), int(self._salts[seq]))
            assert self._chains[seq] == chain, f"key chain of sequence {seq}"
        for seq in on_device:
            for index, (key, block) in enumerate(zip(self._chains[seq], tables[seq])):
                if block == NULL_BLOCK:
                    continue
                own = self._key_of_block[block]
                assert own is None or own == key, f"block {block} cached under another key"
                if own == key:
                    assert self._salt_of_block[block] == self._salts[seq], f"salt of {block}"
                    assert self._pos_of_block[block] == index, f"position of block {block}"


class GroupIndexes:
    """The prefix indexes of several KV cache groups, answering the block pool as one:
    each group publishes its own blocks under the same keys (vLLM keys a cached block by
    hash and group), and a block of the one pool is published in at most one of them."""

    def __init__(self, indexes: list[PrefixIndex], num_blocks: int):
        self.indexes = indexes
        # Which index publishes each block (-1: none), kept by the indexes themselves:
        # the pool asks it for every block it releases.
        self._owners = np.full(num_blocks, -1, np.int64)
        for number, index in enumerate(indexes):
            index.join_group(self._owners, number, indexes[0] if number else None)

    def __len__(self) -> int:
        return sum(len(index) for index in self.indexes)

    def _owner(self, block: int) -> PrefixIndex | None:
        number = self._owners[block]
        return self.indexes[number] if number >= 0 else None

    def is_keyed(self, block: int) -> bool:
        return self._owners[block] >= 0

    def key_of(self, block: int) -> int | None:
        owner = self._owner(block)
        return owner.key_of(block) if owner is not None else None

    def keyed_blocks(self) -> list[int]:
        return [block for index in self.indexes for block in index.keyed_blocks()]

    def partition(self, blocks: list[int]) -> tuple[list[int], list[int], list[int]]:
        """``blocks`` split into (published in some group, their keys, unpublished), in
        order."""
        ids = np.asarray(blocks, dtype=np.int64)
        owners = self._owners[ids]
        keyed = ids[owners >= 0].tolist()
        maps = [index._key_of_block for index in self.indexes]
        keys = [maps[owner][block] for owner, block in zip(owners[owners >= 0].tolist(), keyed)]
        return keyed, keys, ids[owners < 0].tolist()

    def drop(self, blocks: list[int]) -> None:
        """The pool evicted ``blocks`` (each published in one group): forget their keys,
        in order within each group."""
        ids = np.asarray(blocks, dtype=np.int64)
        owners = self._owners[ids]
        for number, index in enumerate(self.indexes):
            mine = ids[owners == number]
            if mine.shape[0]:
                index.drop(mine.tolist())
