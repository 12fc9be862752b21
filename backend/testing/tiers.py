"""The checker's model of the offload tiers beside an allocator (a KV connector,
backend/connectors/offload.py, through its seam): the executor performs the tier's
moves on the shadow memory (shadow.py), loads before the step's forward and stores
after it, and the checker holds them to the tier's contract:

* a load reads a tier block and writes a device block of the sequence just admitted,
  so the prefix hit it serves reads back the prompt's own KV (the machine's read-back);
* a store copies a device block whose KV is computed into a tier block;
* nothing is stored twice: no two tier blocks hold the same prefix under one salt;
* every move names its route and stays within the tier's blocks (its capacity).

Tenants: a hit served from the tier is checked like any hit (only KV computed under the
prompt's salt); the tier adds no way around that check.
"""

from __future__ import annotations

from backend.connectors.seam import ConnectorSeam
from backend.testing.shadow import UNWRITTEN, KVMemory, Seq
from backend.transfer import CPU, GPU, Medium, Transfer


class TierModel:
    """What each block of the offload tiers beside ``seam``'s allocator holds: the
    (salt, prefix tokens) of the device block it was stored from, per medium (the CPU
    tier's blocks follow the swap space's; a lower tier numbers its own from 0)."""

    def __init__(self, seam: ConnectorSeam, memory: KVMemory):
        self.seam = seam
        self.memory = memory
        first = seam.alloc.num_cpu_blocks  # tier blocks follow the swap space's
        sizes = seam.connector.tier_blocks
        self.ranges = {
            m: range(first, first + n) if m is CPU else range(n) for m, n in sizes.items()
        }
        self.holds: dict[Medium, dict[int, tuple[int, int, tuple[int, ...]]]] = {
            medium: {} for medium in self.ranges
        }

    def before_forward(self) -> tuple[int, int, tuple[Transfer, ...]]:
        """Take the tiers' moves and perform the loads (promotions into the CPU tier,
        CPU tier to device); returns how many of each, and the stores, for after the
        step's forward (the KV they copy is computed then)."""
        loads, stores = self.seam.take_transfers()
        promotions = 0
        for move in loads:
            src, dst = move.route
            if dst is GPU:
                assert src is CPU, f"a tier load {move} reaches the device from {src.value}"
                self._in(move, src, move.src, "load")
            else:  # staged promotion: from a lower tier into the CPU tier
                assert dst is CPU and src in self.ranges and src is not CPU, (
                    f"a tier load {move} goes {src.value} -> {dst.value}, neither a load "
                    "to the device nor a promotion into the CPU tier"
                )
                self._in(move, src, move.src, "promotion")
                self._in(move, CPU, move.dst, "promotion")
                self._hold(move, CPU, move.dst, self.holds[src].get(int(move.src)))
                promotions += 1
            self.memory.move([move], route=move.route, what="a tier load")
        return len(loads) - promotions, promotions, tuple(stores)

    def after_forward(
        self, stores, seqs: dict[int, Seq], tables: dict[int, list[list[int]]]
    ) -> int:
        """Perform ``stores`` in order: a computed device block into the CPU tier, or a
        CPU tier block cascaded below; never one prefix of one KV cache group twice in a
        tier (``tables``: each live sequence's table in every group). Returns how many
        were cascades."""
        size = self.memory.block_size
        cascades = 0
        for move in stores:
            src, dst = move.route
            if src is GPU:
                assert dst is CPU, f"a tier store {move} goes from the device to {dst.value}"
                computed = self.memory.device[int(move.src)]
                assert (computed != UNWRITTEN).all(), (
                    f"a tier store {move} copies device block {move.src}, whose KV is not computed"
                )
                held = _prefix_of(int(move.src), seqs, tables, size)
            else:
                assert src is CPU and dst in self.ranges and dst is not CPU, (
                    f"a tier store {move} goes {src.value} -> {dst.value}, neither a store "
                    "from the device nor a cascade from the CPU tier"
                )
                self._in(move, CPU, move.src, "cascade")
                held = self.holds[CPU].get(int(move.src))
                cascades += 1
            self._in(move, dst, move.dst, "store")
            self._hold(move, dst, move.dst, held)
            self.memory.move([move], route=move.route, what="a tier store")
        return cascades

    def _hold(self, move: Transfer, medium: Medium, block: int, held) -> None:
        """Tier block ``block`` of ``medium`` now holds ``held``; what it held before was
        evicted for it. Asserts the tier holds no other copy of it."""
        holds = self.holds[medium]
        holds.pop(int(block), None)
        if held is not None:
            group, salt, tokens = held
            assert held not in holds.values(), (
                f"{move} stores {list(tokens)} under salt {salt} twice in the "
                f"{medium.value} tier" + (f" (KV cache group {group})" if group else "")
            )
            holds[int(block)] = held

    def _in(self, move: Transfer, medium: Medium, block: int, what: str) -> None:
        tier = self.ranges[medium]
        assert int(block) in tier, (
            f"a tier {what} {move} names {medium.value} block {block}, outside the tier's "
            f"blocks {tier.start}..{tier.stop - 1}"
        )


def _prefix_of(block: int, seqs: dict[int, Seq], tables: dict[int, list[list[int]]], size: int):
    """(KV cache group, salt, tokens through ``block``) of a live sequence holding
    ``block`` with its KV computed, or None (no live holder: a cached block's sequence
    is gone)."""
    for sid, groups in tables.items():
        seq = seqs[sid]
        for group, table in enumerate(groups):
            if block in table:
                end = (table.index(block) + 1) * size
                if seq.computed >= end:
                    return group, seq.salt, tuple(seq.tokens[:end])
    return None
