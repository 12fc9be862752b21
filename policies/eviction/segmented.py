"""Segmented and adaptive LRU: slru and arc, which protect prefixes that were reused
from a stream of prefixes seen once."""

from __future__ import annotations

import math
from collections import OrderedDict
from numbers import Integral

from backend.evictor import EvictorBase
from policies.eviction.base import EVICTORS


def _check_num_blocks(num_blocks: int) -> int:
    if isinstance(num_blocks, bool) or not isinstance(num_blocks, Integral) or num_blocks < 1:
        raise ValueError(f"num_blocks must be an integer >= 1, got {num_blocks!r}")
    return int(num_blocks)


class _ReuseHistory:
    """The blocks whose current content had a prefix hit, kept while a block is in use
    or evictable and forgotten when it is evicted. Only keyed blocks are hit, at most
    ``limit`` of them, so the bound only caps other callers."""

    def __init__(self, limit: int):
        self.limit = limit
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def add(self, block: int) -> None:
        self._blocks[block] = None
        self._blocks.move_to_end(block)
        if len(self._blocks) > self.limit:
            self._blocks.popitem(last=False)

    def forget(self, block: int) -> None:
        self._blocks.pop(block, None)

    def __contains__(self, block: object) -> bool:
        return block in self._blocks

    def __len__(self) -> int:
        return len(self._blocks)


@EVICTORS.register("slru")
class SegmentedLRU(EvictorBase):
    """Segmented LRU: blocks reused by a prefix hit are protected from blocks seen once.

    A block released without a hit on its content enters the *probationary* segment; one
    whose content had a prefix hit (while in use, or before an earlier release) enters
    the *protected* segment. The protected segment holds at most ``protected_fraction``
    of ``num_blocks`` (rounded down); overflow demotes its least recent block to the
    recent end of probation. Victims come from probation first, least recent first, then
    from protected. A hit's ``on_removed`` keeps the block's history; eviction forgets it.
    """

    def __init__(self, num_blocks: int, protected_fraction: float = 0.8):
        num_blocks = _check_num_blocks(num_blocks)
        if not 0 < protected_fraction < 1:
            raise ValueError(f"protected_fraction must be in (0, 1), got {protected_fraction!r}")
        # (the epsilon keeps e.g. 0.29 * 100 = 28.999999999999996 at 29)
        self.protected_capacity = math.floor(protected_fraction * num_blocks + 1e-9)
        self._probation: OrderedDict[int, None] = OrderedDict()
        self._protected: OrderedDict[int, None] = OrderedDict()
        self._reused = _ReuseHistory(num_blocks)

    def _protect(self, block: int) -> None:
        self._protected[block] = None
        if len(self._protected) > self.protected_capacity:
            demoted, _ = self._protected.popitem(last=False)
            self._probation[demoted] = None

    def on_cached(self, block: int, now: int, key: int) -> None:
        if block in self._reused:
            self._protect(block)
        else:
            self._probation[block] = None

    def on_hit(self, block: int, now: int) -> None:
        self._reused.add(block)
        # The block manager takes a block out of the set before reporting its hit, so
        # this is for other callers: a hit on a member promotes it, as in SLRU proper.
        if block in self._probation:
            del self._probation[block]
            self._protect(block)
        elif block in self._protected:
            self._protected.move_to_end(block)

    def on_removed(self, block: int) -> None:
        if block in self._probation:
            del self._probation[block]
        else:
            del self._protected[block]

    def pick_victims(self, num_blocks: int) -> list[int]:
        victims = []
        for segment in (self._probation, self._protected):
            while len(victims) < num_blocks and segment:
                block, _ = segment.popitem(last=False)
                self._reused.forget(block)
                victims.append(block)
        return victims

    def __len__(self) -> int:
        return len(self._probation) + len(self._protected)

    def __contains__(self, block: object) -> bool:
        return block in self._probation or block in self._protected

    def blocks(self) -> list[int]:
        return [*self._probation, *self._protected]


@EVICTORS.register("arc")
class AdaptiveReplacement(EvictorBase):
    """Adaptive Replacement Cache (Megiddo & Modha, FAST 2003) over the evictable set.

    ARC keeps two LRU lists, T1 (content seen once) and T2 (seen at least twice), ghost
    lists B1 and B2 of content recently evicted from each, and a target size p for T1
    that a ghost hit in B1 raises and one in B2 lowers; the victim comes from T1 while T1
    is over p. Here the cache is the evictable set, and a *request* for a block's content
    is a use of it by a sequence: the sequence that computes it, then each prefix hit.

    - ``on_hit``: a request reuses the content; the block is marked as seen twice (kept
      across ``on_removed``, forgotten at eviction). ARC's move to the recent end of T2
      happens at the next ``on_cached``, since a block in use is not evictable.
    - ``on_cached``: the block enters at the recent end of T2 if its content was reused
      or is a ghost hit, else of T1. ``on_removed``: a hit took it back into use.
    - ``pick_victims``: ARC's REPLACE per victim: T1's least recent block if |T1| > p
      (or T2 is empty), else T2's. Its prefix key goes to B1 or B2. (The paper's tie rule
      needs the requested page, which a victim request does not have: left out.)

    Ghosts are prefix keys, not block ids (the block manager reuses an evicted block for
    unrelated content at once): a *ghost hit* is a prefix evicted and then computed and
    cached again, exactly the miss ARC learns from. Ghosts keep the paper's bounds,
    |T1| + |B1| <= c and |T1| + |T2| + |B1| + |B2| <= 2c with c = ``num_blocks``,
    dropping the oldest first.
    """

    def __init__(self, num_blocks: int):
        self.capacity = _check_num_blocks(num_blocks)
        self.target = 0.0  # p: the size T1 should have
        self._t1: OrderedDict[int, None] = OrderedDict()  # evictable, content used once
        self._t2: OrderedDict[int, None] = OrderedDict()  # evictable, content reused
        self._b1: OrderedDict[int, None] = OrderedDict()  # keys evicted from T1
        self._b2: OrderedDict[int, None] = OrderedDict()  # keys evicted from T2
        self._key_of: dict[int, int] = {}  # evictable block -> its prefix key
        self._reused = _ReuseHistory(num_blocks)

    def on_cached(self, block: int, now: int, key: int) -> None:
        ghost = key in self._b1 or key in self._b2
        if key in self._b1:
            step = max(len(self._b2) / len(self._b1), 1.0)
            self.target = min(float(self.capacity), self.target + step)
            del self._b1[key]
        elif key in self._b2:
            step = max(len(self._b1) / len(self._b2), 1.0)
            self.target = max(0.0, self.target - step)
            del self._b2[key]
        self._key_of[block] = key
        (self._t2 if ghost or block in self._reused else self._t1)[block] = None
        self._bound_ghosts()

    def on_hit(self, block: int, now: int) -> None:
        self._reused.add(block)
        # The block manager takes a block out of the set before reporting its hit; for
        # other callers a hit on a member is ARC's case I: to the recent end of T2.
        if block in self._t1:
            del self._t1[block]
            self._t2[block] = None
        elif block in self._t2:
            self._t2.move_to_end(block)

    def on_removed(self, block: int) -> None:
        if block in self._t1:
            del self._t1[block]
        else:
            del self._t2[block]
        del self._key_of[block]

    def pick_victims(self, num_blocks: int) -> list[int]:
        victims = []
        while len(victims) < num_blocks and (self._t1 or self._t2):
            # ARC's REPLACE: T1 gives the victim while it is over its target p.
            if self._t1 and (len(self._t1) > self.target or not self._t2):
                block, _ = self._t1.popitem(last=False)
                self._b1[self._key_of.pop(block)] = None
            else:
                block, _ = self._t2.popitem(last=False)
                self._b2[self._key_of.pop(block)] = None
            self._reused.forget(block)
            victims.append(block)
        self._bound_ghosts()
        return victims

    def _bound_ghosts(self) -> None:
        """The paper's directory bounds: |T1| + |B1| <= c and |T1|+|T2|+|B1|+|B2| <= 2c,
        dropping the oldest ghosts."""
        c = self.capacity
        while self._b1 and len(self._t1) + len(self._b1) > c:
            self._b1.popitem(last=False)
        while (self._b1 or self._b2) and len(self) + len(self._b1) + len(self._b2) > 2 * c:
            (self._b2 or self._b1).popitem(last=False)

    def __len__(self) -> int:
        return len(self._t1) + len(self._t2)

    def __contains__(self, block: object) -> bool:
        return block in self._t1 or block in self._t2

    def blocks(self) -> list[int]:
        return [*self._t1, *self._t2]
