"""Deliberately broken block managers, for the tests of the allocator checker
(``backend.testing``): each breaks one part of the contract in backend/base.py; and
broken offload connectors (``Tier*``) and peer connectors of prefill/decode hand-offs
(``Peer*``), each beside a sound manager.

``Unchecked*`` variants also turn their own ``check_invariants`` off, as a user's
allocator with a weak self-check would be, so that only the checker's own model can
catch them.
"""

from __future__ import annotations

import numpy as np

from backend.base import KVGroup
from backend.blocks import BlockManager
from backend.blocks.full_attention import FullAttention
from backend.blocks.sliding_window import SlidingWindow
from backend.connectors.offload import OffloadConnector, OffloadTiers
from backend.connectors.peer import PeerConnector
from backend.transfer import GPU, SWAP_IN, Transfer


class _FullAttentionWithoutCopies(FullAttention):
    """A full-attention group that never sees its partly filled last block shared."""

    def append_need(self, seq, held, num_new):
        needed, cow = super().append_need(seq, held, num_new)
        return needed - int(cow), False

    def batch_need(self, seqs, held):
        need = super().batch_need(seqs, held)
        return need if need.shared is None else need._replace(shared=None, needed=need.crossing)


class NoCopyOnWrite(BlockManager):
    """Appending to a shared, partly filled last block (after a fork) writes into it in
    place: no private copy, no Transfer, the sibling's next token lands on top."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for group in self._coord.groups:
            if type(group) is FullAttention:  # (each full-attention group, not a window)
                group.__class__ = _FullAttentionWithoutCopies


class LeakyFree(BlockManager):
    """``free`` forgets the sequence but never drops its blocks' references: they are
    never free again (a leak)."""

    def free(self, seq_id):
        seq = self._seqs.live(seq_id)
        self._seqs.remove(seq)
        self._first.remove(seq)
        self._index.remove(seq)


class FreePublishesUncomputed(BlockManager):
    """``free`` keeps the prefix cache "warm" by publishing every full block of the
    sequence first, including blocks whose KV was never computed (a prompt freed
    mid-prefill): a later prompt hits KV that does not exist."""

    def free(self, seq_id):
        self.mark_computed(seq_id, self.num_tokens(seq_id))
        super().free(seq_id)


class FreeKeepsKeys(BlockManager):
    """``free`` sends released blocks straight to the free list, still keyed in the
    prefix index: a block whose content is about to be overwritten stays cached."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._index.partition = lambda blocks: ([], [], list(blocks))


class SharedAcrossTenants(BlockManager):
    """The prefix cache ignores the tenant salt: one tenant's prompt hits another's KV."""

    def can_allocate(self, token_ids, *, salt=0, **kwargs):
        return super().can_allocate(token_ids, **kwargs)

    def allocate(self, seq_id, token_ids, *, salt=0, **kwargs):
        return super().allocate(seq_id, token_ids, **kwargs)

    def allocate_trusted(self, seq, tokens, salt, *args):
        return super().allocate_trusted(seq, tokens, 0, *args)

    def cached_prefix_tokens(self, token_ids, *, salt=0):
        return super().cached_prefix_tokens(token_ids)


class CountsRefusedLookups(BlockManager):
    """``allocate`` counts the prompt in the prefix-cache statistics before it knows the
    prompt fits: a refused allocate has changed the state (seen by ``snapshot()``)."""

    def allocate_trusted(self, seq, tokens, salt, *args):  # (allocate's too)
        self._index.queries_tokens += 1
        return super().allocate_trusted(seq, tokens, salt, *args)


class SwapInSharesUncomputed(BlockManager):
    """``swap_in`` shares every full block whose prefix is cached on the device, also
    blocks whose KV the returning sequence has not computed (a prompt swapped out
    mid-prefill): its prefill then writes into KV another sequence reads (issue 14, the
    block manager's behaviour before it was fixed; its own invariants hold)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        swap, index = self._swap, self._index

        def swap_in_plan(seq):
            cpu = self._first.tables[seq]
            if not index.enabled:
                return [], len(cpu), 0
            chain, salt = index._chains[seq], int(index._salts[seq])
            hits = index._cached_run(chain, salt, lambda n: swap.slots[cpu[:n]])
            return hits, len(cpu) - len(hits), self._pool.revived(hits)

        swap.swap_in_plan = swap_in_plan


def unchecked(cls: type[BlockManager]) -> type[BlockManager]:
    """``cls`` with its own check_invariants turned off."""

    def check_invariants(self) -> None:
        pass

    return type(f"Unchecked{cls.__name__}", (cls,), {"check_invariants": check_invariants})


UncheckedNoCopyOnWrite = unchecked(NoCopyOnWrite)
UncheckedLeakyFree = unchecked(LeakyFree)
UncheckedFreePublishesUncomputed = unchecked(FreePublishesUncomputed)
UncheckedFreeKeepsKeys = unchecked(FreeKeepsKeys)
UncheckedSharedAcrossTenants = unchecked(SharedAcrossTenants)


class SwapOutWithoutRoute(BlockManager):
    """``swap_out`` moves the right blocks but returns them as device copies (the route
    an allocator written before transfers named their media would give): an executor
    would copy device blocks into device blocks and the CPU pool would stay empty."""

    def swap_out(self, seq_id):
        return [Transfer(move.src, move.dst) for move in super().swap_out(seq_id)]


class GroupTableDisagrees(BlockManager):
    """``block_tables`` (one table per KV cache group) gives group 0 a table that is not
    ``block_table``'s: its last block is left out."""

    def block_tables(self, seq_id):
        return (self.block_table(seq_id)[:-1],)


class ClaimsTwoGroups(BlockManager):
    """Says it keeps two KV cache groups whatever it was built with, and keeps one
    table: the checker must hold it to the groups it asked for."""

    @property
    def kv_groups(self):
        return (KVGroup(), KVGroup())

    @kv_groups.setter
    def kv_groups(self, built) -> None:  # (what it was built with is ignored)
        pass


class _EagerWindow(SlidingWindow):
    """A window that releases one block too many: the block holding the oldest tokens
    the next token still reads (an off-by-one a real kernel would read garbage from)."""

    def skipped_blocks(self, computed):
        return max(0, computed - self.window + 1 + self.block_size) // self.block_size

    def skipped_blocks_of(self, computed):
        return np.maximum(computed - self.window + 1 + self.block_size, 0) // self.block_size


class WindowReleasesTooEarly(BlockManager):
    """Its sliding windows release a block still inside the window."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for group in self._coord.groups:
            if group.releases_behind:
                group.__class__ = _EagerWindow


class FreeHangs(BlockManager):
    """``free`` never returns (a plug-in stuck in a loop)."""

    def free(self, seq_id):
        import time

        while True:
            time.sleep(0.05)


class AppendExits(BlockManager):
    """``append`` ends the process (``sys.exit`` inside a plug-in)."""

    def append(self, seq_id, token_ids):
        import sys

        sys.exit(3)


class ConstructorExits(BlockManager):
    """The constructor itself calls ``sys.exit``."""

    def __init__(self, **kwargs):
        import sys

        sys.exit("no")


# -- broken offload tiers: connectors beside a sound manager ---------------------------
class _TiersStoringAgain(OffloadTiers):
    def store(self, computed):
        cpu = self.primary
        old = cpu._block_of_key.pop(computed.key, None)
        if old is not None:  # drops the copy it holds, to store the same KV again
            cpu._key_of_block[old] = None
            cpu.evictor.on_removed(old)
            cpu._free.put([old])
        return super().store(computed)


class _Broken(OffloadConnector):
    """An offload connector whose tiers are of the class ``tiers`` (set by subclasses)."""

    tiers_class: type[OffloadTiers] = OffloadTiers

    def __init__(self, tiers: OffloadTiers):
        tiers.__class__ = self.tiers_class
        super().__init__(tiers)


class TierStoresTwice(_Broken):
    """The offload tier stores again a prefix it holds (a store nothing needed: the
    link carries the block twice). Its own invariants hold."""

    tiers_class = _TiersStoringAgain


def _neighbour(move: Transfer, tier: range) -> Transfer:
    """``move`` reading the tier block after its own (the last reads itself)."""
    return move._replace(src=min(move.src + 1, tier.stop - 1))


class _TiersLoadingTheNeighbour(OffloadTiers):
    def load(self, found, device_blocks, *args):
        cpu = range(self.primary.base, self.primary.base + self.primary.num_blocks)
        moves = super().load(found, device_blocks, *args)
        return [_neighbour(m, cpu) if m.route == SWAP_IN else m for m in moves]


class TierLoadsTheWrongBlock(_Broken):
    """The offload tier's loads name the tier block after the one that holds the hit:
    the executor copies another prefix's KV (the allocator's own memory is right)."""

    tiers_class = _TiersLoadingTheNeighbour


class _TiersCascadingTheNeighbour(OffloadTiers):
    def store(self, computed):
        cpu = range(self.primary.base, self.primary.base + self.primary.num_blocks)
        moves = super().store(computed)
        return [m if m.src_medium is GPU else _neighbour(m, cpu) for m in moves]


class TierCascadesTheWrongBlock(_Broken):
    """The CPU tier's cascade to the disk tier copies the CPU block after the one it
    stored: the disk holds another prefix's KV under this key, and a promotion serves
    it (the allocator's own memory is right)."""

    tiers_class = _TiersCascadingTheNeighbour


class TierLoadsTheWindowOneOff(OffloadConnector):
    """Beside a sliding window, the tiers load each block of the window's hit into the
    table position before its own: the next token reads KV of the wrong positions."""

    def loaded(self, keys, tables):
        self._match = [
            match[1:] if need is not None else match
            for match, need in zip(self._match, self._needs)
        ]
        super().loaded(keys, tables)


UncheckedWindowReleasesTooEarly = unchecked(WindowReleasesTooEarly)


class PeerFreesAtFinish(PeerConnector):
    """Holds nothing for the reader: a prefill's blocks go back to the pool when it
    finishes, and another sequence may write into them before the decode side reads."""

    def request_finished(self, req_id):
        super().request_finished(req_id)
        return False


class PeerReadsOneBlockShort(PeerConnector):
    """Reads every block of a hand-off but the last: the decode side's last prompt
    block holds no KV when the prompt is marked computed."""

    def start_load(self, req_id, local_tokens, prompt_len):
        load = super().start_load(req_id, local_tokens, prompt_len)
        return load._replace(blocks=load.blocks - 1)


class PeerForgetsTheSource(PeerConnector):
    """Forgets a request given up before its read without saying where its KV is held:
    the prefill side's blocks stay held for nobody."""

    def forget(self, req_id):
        super().forget(req_id)
        return None


class RaisesOnFork(BlockManager):
    """Raises something that is not an assertion (its own bug) when it forks."""

    def fork(self, parent_id, child_id):
        raise KeyError(child_id)
