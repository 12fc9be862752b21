"""The checker's model of an offload tier (backend.capabilities.OffloadsPrefixes): the
executor performs the tier's moves on the shadow memory (shadow.py), loads before the
step's forward and stores after it, and the checker holds them to the tier's contract:

* a load reads a tier block and writes a device block of the sequence just admitted,
  so the prefix hit it serves reads back the prompt's own KV (the machine's read-back);
* a store copies a device block whose KV is computed into a tier block;
* nothing is stored twice: no two tier blocks hold the same prefix under one salt;
* every move names its route and stays within the tier's blocks (its capacity).

Tenants: a hit served from the tier is checked like any hit (only KV computed under the
prompt's salt); the tier adds no way around that check.
"""

from __future__ import annotations

from backend.base import Allocator
from backend.capabilities import OffloadsPrefixes
from backend.testing.shadow import UNWRITTEN, KVMemory, Seq
from backend.transfer import SWAP_IN, SWAP_OUT, Transfer


class TierModel:
    """What each block of ``alloc``'s offload tier holds: the (salt, prefix tokens) of
    the device block it was stored from."""

    def __init__(self, alloc: Allocator, memory: KVMemory):
        assert isinstance(alloc, OffloadsPrefixes), "an offload tier without its moves"
        self.alloc = alloc
        self.memory = memory
        self.first = alloc.num_cpu_blocks  # tier blocks follow the swap space's
        self.stop = self.first + alloc.num_offload_blocks
        self.holds: dict[int, tuple[int, tuple[int, ...]]] = {}

    def before_forward(self) -> tuple[int, tuple[Transfer, ...]]:
        """Take the tier's moves and perform the loads; returns how many, and the
        stores, for after the step's forward (the KV they copy is computed then)."""
        loads, stores = self.alloc.take_tier_transfers()
        self._in_tier(loads, "load", source=True)
        return self.memory.move(loads, route=SWAP_IN, what="a tier load"), tuple(stores)

    def after_forward(self, stores, seqs: dict[int, Seq], tables: dict[int, list[int]]) -> None:
        """Perform ``stores``, each of a computed device block, never a prefix twice."""
        self._in_tier(stores, "store", source=False)
        size = self.memory.block_size
        for move in stores:
            computed = self.memory.device[int(move.src)]
            assert (computed != UNWRITTEN).all(), (
                f"a tier store {move} copies device block {move.src}, whose KV is not computed"
            )
            self.holds.pop(int(move.dst), None)  # what the tier evicted for it
            held = _prefix_of(int(move.src), seqs, tables, size)
            if held is not None:
                assert held not in self.holds.values(), (
                    f"a tier store {move} stores {list(held[1])} under salt {held[0]} twice"
                )
                self.holds[int(move.dst)] = held
        self.memory.move(stores, route=SWAP_OUT, what="a tier store")

    def _in_tier(self, moves, what: str, *, source: bool) -> None:
        for move in moves:
            block = int(move.src if source else move.dst)
            assert self.first <= block < self.stop, (
                f"a tier {what} {move} names CPU block {block}, outside the tier's blocks "
                f"{self.first}..{self.stop - 1}"
            )


def _prefix_of(block: int, seqs: dict[int, Seq], tables: dict[int, list[int]], size: int):
    """(salt, tokens through ``block``) of a live sequence holding ``block`` with its KV
    computed, or None (no live holder: a cached block's sequence is gone)."""
    for sid, table in tables.items():
        seq = seqs[sid]
        if block in table:
            end = (table.index(block) + 1) * size
            if seq.computed >= end:
                return seq.salt, tuple(seq.tokens[:end])
    return None
