"""Prefix caches below the device pool, a KV connector (contract.py): full blocks of
computed KV kept in tiers (CPU memory, then local disk or a remote store), found again
by the same chained prefix keys as the device's prefix cache, and loaded back instead of
recomputed. The allocator beside it knows no tier; it hands over its prompts' keys and
its computed blocks, and allocates for the blocks a tier supplies.

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

Tiers below the first (local disk, a remote store) follow vLLM 0.33's tiering manager
(``vllm/v1/kv_offload/tiering/manager.py``): the CPU tier is the **gateway** and the
others are **secondary**:

* **cascade**: a block stored to the CPU tier is stored to every secondary tier too,
  from the CPU copy, after the device-to-CPU store (``complete_store`` cascades to all);
  a key the CPU tier held already is not stored again anywhere;
* **lookup in order**: a key missing from the CPU tier is looked up in the secondary
  tiers in order, and the first that holds it serves it;
* **staged promotion**: a secondary tier never reaches the device; its hit is copied
  into a CPU tier block first (which may evict there) and loaded from that. vLLM's
  request waits in a loading state while the promotion runs; here the step that
  admits it carries both copies (see sim/engine/planning/planner.py for the pricing).

Salts carry into every tier: a key is chained from the tenant salt, and a hit is
verified against the stored tokens, the salt and the chain position, as a device hit is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from backend.base import NULL_BLOCK, ONE_GROUP, InvalidRequest, KVGroup, check_count
from backend.blocks.freelist import FreeList
from backend.blocks.prefix_hash import chain_keys
from backend.blocks.prefix_index import verified_run
from backend.connectors.contract import ComputedBlock, ConnectorTransfers, KVConnector
from backend.evictor import Evictor, LeastRecentlyUsed
from backend.transfer import CPU, GPU, REMOTE, Medium, Transfer


class TierSpec(NamedTuple):
    """One offload tier: its medium (the CPU tier first, then disk or a remote store),
    its size in blocks and its eviction policy (None: LRU, the connector's default).
    ``shared``: the tier object another connector built (``offload_tier(medium)``), for
    a store the replicas of a cluster share; None builds one."""

    medium: Medium
    num_blocks: int
    evictor: Evictor | None = None
    shared: object | None = None


class TierStats(NamedTuple):
    """What one tier did, ever: blocks stored into it (from the device, or cascaded
    from the CPU tier), blocks whose hit it served and the prompt tokens they hold, and
    the blocks its policy evicted. A block promoted from a lower tier counts as that
    tier's hit, not the CPU tier's. With several KV cache groups each group's block is
    one block here, and the tokens are counted once, in the first full-attention group
    (a model of windows only: the tokens of the blocks its first group loaded)."""

    medium: Medium
    stored_blocks: int
    loaded_blocks: int
    hit_tokens: int
    evicted_blocks: int


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
        self.hit_blocks = 0  # loaded blocks of the group that counts the hit's tokens

    @property
    def stats(self) -> TierStats:
        hit_tokens = self.hit_blocks * self.block_size  # every load is a full block
        return TierStats(
            self.medium, self.stored_blocks, self.loaded_blocks, hit_tokens, self.evicted_blocks
        )

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

    def read(self, blocks: list[int], *, hits: int | None = None) -> np.ndarray:
        """The rows of ``blocks``, their recency renewed (a read is a use: out of the
        order and back in, most recent), counted as loads this tier served; ``hits``: how
        many of them count their tokens (None: all)."""
        self.clock += 1
        evictor = self.evictor
        for block in blocks:
            evictor.on_removed(block)
            evictor.on_cached(block, self.clock, self._key_of_block[block])
            evictor.on_hit(block, self.clock)
        self.loaded_blocks += len(blocks)
        self.hit_blocks += len(blocks) if hits is None else hits
        return self.slots[blocks]

    def placement(self, block: int) -> tuple[int, int, int]:
        """(key, salt, chain position) block ``block`` is stored under."""
        key = self._key_of_block[block]
        assert key is not None, f"tier block {block} is free"
        return key, int(self._salt_of_block[block]), int(self._pos_of_block[block])

    # -- store -----------------------------------------------------------------------------
    def put(self, key: int, salt: int, position: int, row: np.ndarray, *, count: bool = True):
        """Store ``row`` (a full block's tokens) under ``key`` unless the key is stored
        already; evicts by the tier's policy when full. ``count`` counts it as stored (a
        promotion from a lower tier is not). Returns the tier block, or None."""
        if key in self._block_of_key:
            return None
        self.clock += 1
        if self._free:
            block = self._free.take_one()
        else:
            (block,) = self.evictor.pick_victims(1)
            del self._block_of_key[self._key_of_block[block]]
            self.evicted_blocks += 1
        self.slots[block] = row
        self._block_of_key[key] = block
        self._key_of_block[block] = key
        self._salt_of_block[block] = salt
        self._pos_of_block[block] = position
        self.evictor.on_cached(block, self.clock, key)
        self.stored_blocks += count
        return block

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


class OffloadTiers:
    """The tiers below the device, nearest first: the CPU tier (the gateway), then the
    secondary tiers. Blocks in the moves are numbered per medium (``OffloadTier.base``).
    Raises ValueError for an empty list, a first tier not in CPU memory, or two tiers
    on one medium."""

    def __init__(self, tiers: list[OffloadTier]):
        if not tiers or tiers[0].medium is not CPU:
            raise ValueError("the first offload tier is the CPU tier (the gateway)")
        media = [tier.medium for tier in tiers]
        if len(set(media)) != len(media):
            raise ValueError(f"one offload tier per medium, not {[m.value for m in media]}")
        self.tiers = tiers
        self.primary = tiers[0]

    @classmethod
    def build(cls, specs: list[TierSpec], block_size: int, *, cpu_base: int) -> OffloadTiers:
        """The tiers ``specs`` (the CPU tier's blocks numbered from ``cpu_base``, after the
        swap space's in the one CPU pool; each tier below from 0); a spec's ``shared``
        tier, another allocator's, serves as it is. Raises InvalidRequest."""
        tiers = []
        for n, spec in enumerate(specs):
            blocks = check_count(f"offload tier {n}'s num_blocks", spec.num_blocks, 1)
            if spec.shared is not None:  # another allocator's: one store for both
                shared = spec.shared
                if not isinstance(shared, OffloadTier) or (
                    shared.medium,
                    shared.num_blocks,
                    shared.block_size,
                ) != (spec.medium, blocks, block_size):
                    raise InvalidRequest(f"offload tier {n}: the shared tier does not match")
                tiers.append(shared)
                continue
            evictor = spec.evictor if spec.evictor is not None else LeastRecentlyUsed()
            base = cpu_base if spec.medium is CPU else 0
            tiers.append(OffloadTier(blocks, block_size, spec.medium, evictor, base=base))
        try:
            return cls(tiers)
        except ValueError as error:
            raise InvalidRequest(str(error)) from None

    @property
    def stats(self) -> tuple[TierStats, ...]:
        return tuple(tier.stats for tier in self.tiers)

    def prompt_hits(self, keys: list[int], start: int, tokens: np.ndarray, salt: int, own=False):
        """``cached_run`` of a prompt's chain (``keys`` of ``tokens``) from block ``start``
        (the device's first miss) on, never the block holding its last token."""
        size = self.primary.block_size
        usable = (tokens.shape[0] - 1) // size
        if usable <= start:
            return []
        rows = tokens[start * size : usable * size].reshape(-1, size)
        return self.cached_run(keys[start:usable], salt, start, rows, own=own)

    def saw_prompt(self, keys: list[int]) -> None:
        for tier in self.tiers:
            tier.saw_prompt(keys)

    def cached_run(
        self, keys: list[int], salt: int, start: int, rows: np.ndarray, *, own: bool = False
    ):
        """The longest run of ``keys`` (chain blocks ``start, start + 1, ...``) held in
        some tier, each key served by the first tier in order that holds it verified:
        ``[(tier index, tier block), ...]``; ``own``: in the tiers of this instance only,
        not a remote store the cluster shares. No mutation."""
        tiers = [(n, t) for n, t in enumerate(self.tiers) if not (own and t.medium is REMOTE)]
        found: list[tuple[int, int]] = []
        while len(found) < len(keys):
            i = len(found)
            for index, tier in tiers:
                run = tier.cached_run(keys[i:], salt, start + i, rows[i:])
                if index:  # a key the CPU tier holds is served by it, not from below
                    run = run[: self._cpu_tier_holds(keys[i : i + len(run)])]
                if run:
                    found += [(index, block) for block in run]
                    break
            else:
                break
        return found

    def _cpu_tier_holds(self, keys: list[int]) -> int:
        """How many of ``keys`` (a lower tier's run, whose first the CPU tier lacks) that
        tier serves: up to the first key the CPU tier holds, or all of them."""
        return next((j for j in range(1, len(keys)) if keys[j] in self.primary), len(keys))

    def find(self, key: int, salt: int, position: int, row: np.ndarray, own: bool = False):
        """``(tier index, tier block)`` of the first tier in order holding ``key`` verified
        (``row`` under ``salt`` at chain ``position``), or None; ``own``: not a remote
        store the cluster shares. No mutation."""
        for index, tier in enumerate(self.tiers):
            if own and tier.medium is REMOTE:
                continue
            run = tier.cached_run([key], salt, position, row[None])
            if run:
                return index, run[0]
        return None

    def load(
        self,
        found: list[tuple[int, int]],
        device_blocks: list[int],
        counted: list[bool] | None = None,
        groups: list[int] | None = None,
    ) -> list[Transfer]:
        """Load the ``found`` blocks (``(tier index, tier block)`` each) into
        ``device_blocks``, fresh blocks the allocator took and wrote the prompt's tokens
        into (what a verified hit holds); a secondary tier's hit goes through a CPU tier
        block (staged promotion). ``counted``: which loads count their tokens as hit
        tokens (None: all); ``groups``: the KV cache group of each device block (None:
        0). Returns the transfers, in the order they must run: the CPU
        tier's own hits first, so that no promotion evicts one of them before it is
        read."""
        primary = self.primary
        counted = [True] * len(found) if counted is None else counted
        groups = [0] * len(found) if groups is None else groups
        loads = list(zip(found, device_blocks, counted, groups))
        own = [(b, d, c, g) for (t, b), d, c, g in loads if not t]
        moves = []
        if own:
            primary.read([b for b, _, _, _ in own], hits=sum(c for _, _, c, _ in own))
            moves += [Transfer(primary.base + b, d, CPU, GPU, g) for b, d, _, g in own]
        for (index, block), target, count, group in loads:
            if not index:
                continue
            tier = self.tiers[index]
            row = tier.read([block], hits=int(count))[0]
            staged = primary.put(*tier.placement(block), row, count=False)
            src, dst = tier.base + block, primary.base + staged
            moves.append(Transfer(src, dst, tier.medium, CPU, group))
            moves.append(Transfer(primary.base + staged, target, CPU, GPU, group))
        return moves

    def store(self, computed: ComputedBlock) -> list[Transfer]:
        """Store ``computed`` in the CPU tier unless it holds the key, and cascade it to
        every secondary tier that does not. Returns the transfers (device to CPU first,
        then CPU to each tier below)."""
        key, salt, position, row = computed.key, computed.salt, computed.position, computed.row
        block = self.primary.put(key, salt, position, row)
        if block is None:
            return []
        source, group = self.primary.base + block, computed.group
        moves = [Transfer(computed.block, source, GPU, CPU, group)]
        for tier in self.tiers[1:]:
            lower = tier.put(key, salt, position, row)
            if lower is not None:
                moves.append(Transfer(source, tier.base + lower, CPU, tier.medium, group))
        return moves

    def snapshot_state(self) -> tuple:
        return tuple(tier.snapshot_state() for tier in self.tiers)

    def check_invariants(self) -> None:
        for tier in self.tiers:
            tier.check_invariants()


def group_key(key: int, group: int) -> int:
    """The tier key of KV cache group ``group``'s block under prefix ``key``: each group's
    block is stored on its own (vLLM's offload keys join the block hash and the group),
    group 0's under the prefix key itself."""
    return key if not group else chain_keys([group], 0, key)[0]


class OffloadConnector(KVConnector):
    """The offload tiers beside an allocator (the module docstring's rules): a prompt's
    run continues in the tiers from the device's first miss, its tier hits are loaded
    into the blocks the allocator took for them, and every computed block is written
    through once its step's forward has run.

    With several KV cache groups (``attach``: the allocator's), each group's blocks
    are stored under keys of their own (``group_key``), and a hit is the longest run
    every group serves, as vLLM 0.33's offloading connector looks one up: from the
    device's hit, a full-attention group needs every block of the run, a sliding window
    only the ``ceil((W - 1) / block_size)`` blocks before its end (searched from the
    right, else a run from the device's hit), the groups asked in turn until no group
    shortens it; a window loads only those last blocks."""

    def __init__(self, tiers: OffloadTiers):
        self.tiers = tiers
        self._match: list[list[tuple[int, int]]] = []  # the last match: per group, in order
        self._matched_end = 0  # (with groups: where the last match ends, in blocks)
        self._loads: list[Transfer] = []
        self.attach(ONE_GROUP)

    def attach(self, kv_groups: Sequence[KVGroup]) -> None:
        size = self.tiers.primary.block_size
        # blocks a hit needs before its end in each group (None: every block)
        self._needs = [
            None if g.sliding_window is None else -(-(g.sliding_window - 1) // size)
            for g in kv_groups
        ]
        # groups asked in turn: full attention first, then windows, widest first
        needs = self._needs
        self._order = sorted(
            range(len(needs)), key=lambda n: (needs[n] is not None, -(needs[n] or 0))
        )
        # the group whose loads count the hit's tokens
        self._lead = next((n for n, need in enumerate(self._needs) if need is None), 0)
        self._plain = tuple(kv_groups) == ONE_GROUP

    @classmethod
    def build(
        cls, specs: Sequence[TierSpec], block_size: int, *, cpu_base: int
    ) -> OffloadConnector:
        """The connector over tiers ``specs``, nearest first, the CPU tier's blocks
        numbered from ``cpu_base`` (after the swap space's in the one CPU pool). Raises
        InvalidRequest (see ``OffloadTiers.build``)."""
        return cls(OffloadTiers.build(list(specs), block_size, cpu_base=cpu_base))

    def matched_blocks(self, keys, device_blocks, tokens, salt, *, own=False) -> int:
        if self._plain:
            self._match = [self.tiers.prompt_hits(keys, device_blocks, tokens, salt, own)]
            return len(self._match[0])
        self._match = self._group_match(keys, device_blocks, tokens, salt, own)
        return self._matched_end - device_blocks

    def _group_match(self, keys, start, tokens, salt, own) -> list[list[tuple[int, int]]]:
        """Each group's ``(tier, block)`` loads for the longest run from block ``start``
        every group serves (the class docstring); sets ``_matched_end``."""
        size = self.tiers.primary.block_size
        end = limit = max((tokens.shape[0] - 1) // size, start)
        probes: dict[tuple[int, int], tuple[int, int] | None] = {}

        def probe(group: int, position: int):
            if (group, position) not in probes:
                row = tokens[position * size : (position + 1) * size]
                key = group_key(keys[position], group)
                probes[group, position] = self.tiers.find(key, salt, position, row, own)
            return probes[group, position]

        settled = False
        while not settled and end > start:
            settled = True
            for group in self._order:
                reach = self._reach(group, start, end, probe)
                if reach < end:
                    end, settled = reach, False
        self._matched_end = end if end > start else start
        if end <= start or limit <= start:
            return [[] for _ in self._needs]
        return [
            [probe(g, p) for p in range(start if need is None else max(start, end - need), end)]
            for g, need in enumerate(self._needs)
        ]

    def _reach(self, group: int, start: int, end: int, probe) -> int:
        """The end of the run group ``group`` serves from ``start``, at most ``end``."""
        need = self._needs[group]
        if need is None:  # every block from the start
            position = start
            while position < end and probe(group, position) is not None:
                position += 1
            return position
        # The window: the rightmost run of ``need`` held blocks (one at least, as on the
        # device: a window of one token still ends its hit at a held block), else a run
        # from the start.
        need, run = max(need, 1), 0
        for position in range(end - 1, start - 1, -1):
            run = run + 1 if probe(group, position) is not None else 0
            if run == need:
                return position + need
        return start + run

    def loaded(self, keys: list[int], tables: list[list[int]]) -> None:
        if keys:  # the tiers' policies see the stream too (Belady consumes its uses)
            self.tiers.saw_prompt(keys)
            for group in range(1, len(self._needs)):
                self.tiers.saw_prompt([group_key(key, group) for key in keys])
        found, targets, counted, groups = [], [], [], []
        for group, (match, table) in enumerate(zip(self._match, tables)):
            blocks = [block for block in table if block != NULL_BLOCK]
            loads = min(len(match), len(blocks))
            found += match[:loads]
            targets += blocks[:loads]
            counted += [group == self._lead] * loads
            groups += [group] * loads
        if found:
            self._loads += self.tiers.load(found, targets, counted, groups)

    def take_transfers(self, computed: list[ComputedBlock]) -> ConnectorTransfers:
        """The loads since the last call, and a store of every block in ``computed``
        whose key the CPU tier lacks (mutates the tiers: they may evict)."""
        loads, self._loads = tuple(self._loads), []
        stores = []
        for block in computed:
            if block.group:
                block = block._replace(key=group_key(block.key, block.group))
            stores += self.tiers.store(block)
        return ConnectorTransfers(loads, tuple(stores))

    # -- what the run reports and shares ---------------------------------------------------
    def offload_tier(self, medium: Medium) -> OffloadTier | None:
        """The tier on ``medium`` (None: none), for another connector to share
        (``TierSpec.shared``)."""
        return next((tier for tier in self.tiers.tiers if tier.medium is medium), None)

    @property
    def tier_stats(self) -> tuple[TierStats, ...]:
        """What each tier did, ever, nearest first."""
        return self.tiers.stats

    @property
    def tier_blocks(self) -> dict[Medium, int]:
        """Each tier's size in blocks, by medium: what an executor that performs the
        moves keeps (the CPU tier's after the swap space's in one CPU pool)."""
        return {tier.medium: tier.num_blocks for tier in self.tiers.tiers}

    def snapshot_state(self) -> tuple:
        return self.tiers.snapshot_state(), self._loads

    def check_invariants(self) -> None:
        self.tiers.check_invariants()
