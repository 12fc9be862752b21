"""A prefix cache one level below the device pool: full blocks of computed KV kept in a
tier (CPU memory today), found again by the same chained prefix keys as the device's
prefix cache, and loaded back instead of recomputed.

The rules follow vLLM's KV offloading connector (``--kv-offloading-size``, the native
CPU backend of vLLM 0.33: ``vllm/distributed/kv_transfer/kv_connector/v1/offloading``
and ``vllm/v1/kv_offload/cpu``), each under its name here:

* **write-through**: every full block whose KV is computed is stored once, when its
  step's forward has run, not when the device evicts it; a key the tier holds already
  is not stored again (the connector's ``prepare_store`` skips stored keys, and its
  default ``store_threshold`` stores every other one);
* **one block per key**: the tier's unit is the device's block (the connector's
  ``blocks_per_chunk`` of 1);
* **lookup after the device**: a prompt's keys are looked up in the device's prefix
  cache first and the run continues in the tier from the first device miss, as the
  connector's ``get_num_new_matched_tokens`` counts tokens beyond the locally computed
  ones; the block holding the prompt's last token is never a hit, as on the device;
* **load into fresh device blocks**: a tier hit takes a new device block and is copied
  into it before the step's forward; the connector always loads a hit (it has no
  load-or-recompute rule), and so does this tier;
* **eviction by the tier's own policy** (an :class:`backend.evictor.Evictor`; the
  connector's default is LRU), where a load renews a block's recency.

Salts carry into the tier: a key is chained from the tenant salt, and a hit is verified
against the stored tokens, the salt and the chain position, as a device hit is.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from backend.blocks.freelist import FreeList
from backend.blocks.prefix_index import verified_run
from backend.evictor import Evictor
from backend.transfer import GPU, Medium, Transfer


class TierStats(NamedTuple):
    """What one tier did, ever: blocks it stored and loaded, the prompt tokens its
    loads served, and the blocks its policy evicted."""

    stored_blocks: int
    loaded_blocks: int
    hit_tokens: int
    evicted_blocks: int


class TierTransfers(NamedTuple):
    """A step's moves to and from the offload tier: ``loads`` (tier to device) run
    before the step's forward, ``stores`` (device to tier) after it."""

    loads: tuple[Transfer, ...]
    stores: tuple[Transfer, ...]


class OffloadTier:
    """``num_blocks`` blocks of ``block_size`` slots on ``medium``, each holding the
    tokens of one full device block under its prefix key. ``slots`` is its memory. Its
    blocks are numbered from ``base`` in the moves it returns: a CPU tier's blocks follow
    the CPU swap space's in the one CPU pool an executor keeps."""

    def __init__(
        self, num_blocks: int, block_size: int, medium: Medium, evictor: Evictor, *, base: int
    ):
        self.base = base
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.medium = medium
        self.evictor = evictor
        self.slots = np.zeros((num_blocks, block_size), np.int32)
        self._free = FreeList(num_blocks)
        self._block_of_key: dict[int, int] = {}
        self._key_of_block: list[int | None] = [None] * num_blocks
        self._salt_of_block = np.zeros(num_blocks, np.int64)
        self._pos_of_block = np.zeros(num_blocks, np.int64)
        self.clock = 0
        self.stored_blocks = self.loaded_blocks = self.evicted_blocks = 0

    @property
    def stats(self) -> TierStats:
        hit_tokens = self.loaded_blocks * self.block_size  # every load is a full block
        return TierStats(self.stored_blocks, self.loaded_blocks, hit_tokens, self.evicted_blocks)

    def __len__(self) -> int:
        """Blocks stored."""
        return len(self._block_of_key)

    def __contains__(self, key: object) -> bool:
        return key in self._block_of_key

    # -- lookup and load -------------------------------------------------------------------
    def saw_prompt(self, keys: list[int]) -> None:
        """An allocation looked up a prompt of these keys: the tier's policy sees the
        stream too (Belady consumes the prompt's uses)."""
        self.evictor.on_lookup(keys, self.clock)

    def cached_run(self, keys: list[int], salt: int, start: int, rows: np.ndarray) -> list[int]:
        """The tier blocks of the longest run of ``keys`` (a chain's blocks ``start,
        start + 1, ...``) stored here and verified: each block holds ``rows[i]``, stored
        under ``salt`` at chain position ``start + i``. No mutation."""
        placed = (self.slots, self._salt_of_block, self._pos_of_block)
        return verified_run(keys, self._block_of_key, placed, lambda n: rows[:n], salt, start)

    def load(self, blocks: list[int], device_blocks: list[int], device: np.ndarray):
        """Copy tier ``blocks`` into ``device_blocks`` of the ``device`` memory (fresh
        blocks the caller took); their recency is renewed. Returns the transfers."""
        device[device_blocks] = self.slots[blocks]
        self.clock += 1
        evictor = self.evictor
        for block in blocks:  # a load is a use: out of the order and back in, most recent
            evictor.on_removed(block)
            evictor.on_cached(block, self.clock, self._key_of_block[block])
            evictor.on_hit(block, self.clock)
        self.loaded_blocks += len(blocks)
        base, medium = self.base, self.medium
        return [Transfer(base + s, d, medium, GPU) for s, d in zip(blocks, device_blocks)]

    # -- store -----------------------------------------------------------------------------
    def store(self, key: int, salt: int, position: int, device_block: int, device: np.ndarray):
        """Store ``device_block`` (full, computed, published under ``key``) unless the
        key is stored already. Evicts by the tier's policy when full. Returns the
        transfer, or None."""
        if key in self._block_of_key:
            return None
        self.clock += 1
        if self._free:
            block = self._free.take_one()
        else:
            (block,) = self.evictor.pick_victims(1)
            del self._block_of_key[self._key_of_block[block]]
            self.evicted_blocks += 1
        self.slots[block] = device[device_block]
        self._block_of_key[key] = block
        self._key_of_block[block] = key
        self._salt_of_block[block] = salt
        self._pos_of_block[block] = position
        self.evictor.on_cached(block, self.clock, key)
        self.stored_blocks += 1
        return Transfer(device_block, self.base + block, GPU, self.medium)

    # -- state -----------------------------------------------------------------------------
    def snapshot_state(self) -> tuple:
        return (
            self.slots,
            list(self._free),
            sorted(self._block_of_key.items()),
            self._salt_of_block,
            self._pos_of_block,
            self.stats,
            self.evictor.blocks(),
        )

    def check_invariants(self) -> None:
        """Every block is free or stored under exactly one key, and every stored block
        is in the evictor's set (nothing in a tier is pinned between commands)."""
        stored = list(self._block_of_key.values())
        free = list(self._free)
        assert len(set(stored)) == len(stored), "a tier block holds two keys"
        assert sorted(stored + free) == list(range(self.num_blocks)), "tier block leak"
        for key, block in self._block_of_key.items():
            assert self._key_of_block[block] == key, f"tier key map of block {block}"
        assert sorted(self.evictor.blocks()) == sorted(stored), "tier evictor vs stored"

