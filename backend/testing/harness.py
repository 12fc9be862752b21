"""What the allocator state machine's rules share: building the allocator under test,
running its commands and queries under the checks that they change nothing when they
should not, and keeping the checker's model (shadow.py) in step.
"""

from __future__ import annotations

from typing import ClassVar

from backend.base import NULL_BLOCK, ONE_GROUP, Allocator, AllocatorFactory, OutOfBlocks
from backend.connectors.offload import OffloadConnector, TierSpec
from backend.connectors.peer import PeerConnector
from backend.connectors.seam import ConnectorSeam
from backend.testing import checks
from backend.testing.shadow import KVMemory, Seq
from backend.testing.tiers import TierModel
from backend.transfer import CPU, DISK

#: what :class:`Harness` counts across the examples it runs
STAT_NAMES = (
    "runs",  # allocators built: Hypothesis' examples, the ones it discards included
    "runs with KV cache groups",  # several groups, or a sliding window (Allocator.kv_groups)
    "runs with tiers beside KV cache groups",
    "calls",  # calls checked (each followed by every check)
    "allocations",
    "prefix hits",
    "appends",
    "writes to a shared block",
    "decode steps",
    "decode steps with a write to a shared block",
    "forks",
    "swaps out",
    "swaps in",
    "tier loads",  # blocks loaded from an offload tier (backend/connectors/offload.py)
    "tier stores",
    "tier promotions",  # blocks a disk tier's hit brought into the CPU tier
    "tier cascades",  # blocks the CPU tier's stores copied into a disk tier
    "hand-offs",  # prefill-side sequences handed to the decode side (hand_offs.py)
    "reads",  # decode-side reads started
    "reads ended",
    "reads given up",
    "refused calls",
    "misuses refused",
)


def supports_kv_connector(factory: AllocatorFactory) -> bool:
    """The factory's ``supports_kv_connector`` (an Allocator class has it; a factory
    function gets no offload tiers beside it)."""
    return bool(getattr(factory, "supports_kv_connector", False))


def supports_kv_groups(factory: AllocatorFactory) -> bool:
    """The factory's ``supports_kv_groups``: it takes ``kv_groups`` (several KV cache
    groups, sliding windows; backend.base.KVGroup)."""
    return bool(getattr(factory, "supports_kv_groups", False))


def supports_prefix_caching(factory: AllocatorFactory) -> bool:
    """The factory's ``supports_prefix_caching`` (an Allocator class has it), else that
    of a small allocator it builds without prefix caching."""
    claimed = getattr(factory, "supports_prefix_caching", None)
    if claimed is None:
        probe = factory(num_blocks=4, block_size=1, num_cpu_blocks=0, enable_prefix_caching=False)
        claimed = getattr(probe, "supports_prefix_caching", False)
    return bool(claimed)


class Harness:
    """Mixin of the state machine: the allocator under test (``alloc``), the model of
    its live sequences (``seqs``, by id), the executor's KV memory (``memory``) and the
    prefixes computed so far under each salt (``computed``)."""

    #: builds the allocator under test (set by ``for_factory``)
    factory: ClassVar[AllocatorFactory | None] = None
    #: the offload tiers built beside the allocator (set by ``for_factory``)
    connector_class: ClassVar[type[OffloadConnector]] = OffloadConnector
    #: the peer connector of prefill/decode hand-offs (set by ``for_factory``)
    peer_class: ClassVar[type[PeerConnector]] = PeerConnector
    #: counts across the examples run (``for_factory`` gives each bound class its own)
    stats: ClassVar[dict[str, int]] = dict.fromkeys(STAT_NAMES, 0)

    def build(
        self,
        num_blocks,
        block_size,
        num_cpu_blocks,
        prefix_caching,
        num_offload_blocks=0,
        num_disk_blocks=0,
        kv_groups=(),
        hand_offs=False,
    ) -> None:
        """Build the allocator under test, with the KV cache groups ``kv_groups`` if
        any; beside it, through a connector seam, an offload tier of
        ``num_offload_blocks`` blocks if any, and below it a disk tier of
        ``num_disk_blocks`` if any; with ``hand_offs``, the peer connector of
        prefill/decode hand-offs (hand_offs.py) where the tables allow them."""
        assert self.factory is not None, "bind the machine first: for_factory(factory)"
        self.alloc: Allocator = self.factory(
            num_blocks=num_blocks,
            block_size=block_size,
            num_cpu_blocks=num_cpu_blocks,
            enable_prefix_caching=prefix_caching,
            **({"kv_groups": kv_groups} if kv_groups else {}),
        )
        assert isinstance(self.alloc, Allocator), f"the factory built {self.alloc!r}"
        groups = self.alloc.kv_groups
        assert groups == (tuple(kv_groups) or ONE_GROUP), f"built {kv_groups}, has {groups}"
        self.caching = prefix_caching
        self.seam: ConnectorSeam | None = None
        if num_offload_blocks:
            specs = [TierSpec(CPU, num_offload_blocks)]
            specs += [TierSpec(DISK, num_disk_blocks)] if num_disk_blocks else []
            first = self.alloc.num_cpu_blocks  # (tier blocks follow the swap space's)
            connector = self.connector_class.build(specs, block_size, cpu_base=first)
            self.seam = ConnectorSeam(self.alloc, connector)
        tiers = self.seam.connector.tier_blocks if self.seam is not None else {}
        self.memory = KVMemory(self.alloc, tiers)
        self.tier = TierModel(self.seam, self.memory) if self.seam is not None else None
        self.seqs: dict[int, Seq] = {}
        self.gone: dict[int, Seq] = {}  # freed sequences, as they were
        # Hand-offs between a prefill and a decode side (hand_offs.py), on an allocator of
        # block tables with one group, as the engine runs them.
        plain = self.alloc.block_table_layout == "blocks" and self.alloc.kv_groups == ONE_GROUP
        self.peer = self.peer_class(block_size) if plain and hand_offs else None
        self.hand_offs: dict = {}
        self.outside: dict[int, Seq] = {}
        self.next_id = 0
        self.peak = self.alloc.peak_used_blocks
        # (salt, tokens of whole blocks from the start) whose KV was computed at some
        # time: the only prefixes a hit may offer under that salt
        self.computed: set[tuple[int, tuple[int, ...]]] = set()
        self.count("runs")
        if self.alloc.kv_groups != ONE_GROUP:
            self.count("runs with KV cache groups")
            if self.seam is not None:
                self.count("runs with tiers beside KV cache groups")

    def count(self, name: str) -> None:
        self.stats[name] += 1

    # -- calls under checks ----------------------------------------------------------------
    def attempt(self, what: str, command, *args, **kwargs):
        """(True, result), or (False, None) for a command refused with OutOfBlocks,
        after checking that the refusal changed nothing."""
        before = checks.observe(self.alloc, self.everything())
        try:
            return True, command(*args, **kwargs)
        except OutOfBlocks:
            after = checks.observe(self.alloc, self.everything())
            windows = any(group.sliding_window for group in self.alloc.kv_groups)
            same = checks.unchanged_but_released if windows else checks.unchanged
            same(before, after, f"refused {what}")
            self.count("refused calls")
            return False, None

    def query(self, what: str, call):
        """A query's answer, after checking that asking changed nothing."""
        before = checks.observe(self.alloc, self.everything())
        answer = call()
        checks.unchanged(before, checks.observe(self.alloc, self.everything()), f"asking {what}")
        return answer

    def misuse(self, what: str, call) -> None:
        checks.expect_misuse(self.alloc, self.everything(), what, call)
        self.count("misuses refused")

    # -- the model ---------------------------------------------------------------------------
    def new_seq(self, tokens, salt: int, computed: int) -> int:
        sid = self.next_id
        self.next_id += 1
        self.seqs[sid] = Seq(f"seq_{sid}", list(tokens), salt, computed)
        return sid

    def held(self, sid: int) -> tuple[list[int], int]:
        """The tokens and salt of a sequence, live (in a hand-off too) or (as it was when)
        freed."""
        seq = self.seqs.get(sid) or self.outside.get(sid) or self.gone[sid]
        return list(seq.tokens), seq.salt

    def blocks(self, sid: int) -> list[list[int]]:
        """``sid``'s block table in each KV cache group, checked (shadow.py)."""
        return self.memory.tables_of(self.alloc, sid, self.everything()[sid])

    def compute_through(self, sid: int, count: int) -> None:
        """The KV of ``sid``'s first ``count`` tokens now exists: the executor writes
        what was not computed yet, and those whole blocks become legitimate hits."""
        seq = self.seqs[sid]
        count = min(count, len(seq.tokens))
        if count > seq.computed:
            self.memory.compute(self.blocks(sid), seq.computed, seq.tokens[seq.computed : count])
            seq.computed = count
        size = self.alloc.block_size
        for end in range(size, seq.computed + 1, size):
            self.computed.add((seq.salt, tuple(seq.tokens[:end])))

    def check_uncomputed_private(self, sid: int) -> None:
        """``sid`` is back from the CPU pool: the blocks holding the positions whose KV it
        has not computed are in no other live sequence's table. The executor computes
        them in place, so a block shared there (say, a cached block of the same prefix)
        would be written while another sequence reads it."""
        seq = self.seqs[sid]
        pending = self.memory.positions(self.blocks(sid)[0], seq.computed, len(seq.tokens))
        for other in self.holders():  # (swap is of allocators with one group)
            if other == sid:
                continue
            theirs = set(self.blocks(other)[0])
            shared = next(((b, p) for p, (b, _) in enumerate(pending) if b in theirs), None)
            assert shared is None, (
                f"swap_in gave {seq.name} block {shared[0]}, which {self.everything()[other].name} "
                f"holds, for position {seq.computed + shared[1]}, whose KV {seq.name} has "
                f"not computed: computing it writes into {self.everything()[other].name}'s KV"
            )

    def tier_loads(self) -> tuple:
        """The step's forward is next: the executor performs the offload tier's loads.
        Returns its stores, due once the forward has run."""
        if self.tier is None:
            return ()
        loads, promotions, stores = self.tier.before_forward()
        self.stats["tier loads"] += loads
        self.stats["tier promotions"] += promotions
        return stores

    def tier_step_done(self) -> None:
        """The step is over: the tier's stores are due (and no load outside an allocate)."""
        if self.seam is not None:
            loads, stores = self.seam.take_transfers()
            assert not loads, f"tier loads {loads} outside an allocate"
            self.tier_stores(stores)

    def tier_stores(self, stores) -> None:
        """The step's forward has run: the executor performs the tier's ``stores``."""
        if self.tier is not None and stores:
            tables = {sid: self.blocks(sid) for sid in self.holders()}  # (every group's)
            cascades = self.tier.after_forward(stores, self.everything(), tables)
            self.stats["tier stores"] += len(stores) - cascades
            self.stats["tier cascades"] += cascades

    def on_device(self) -> list[int]:
        return sorted(sid for sid, s in self.seqs.items() if not s.swapped)

    def everything(self) -> dict[int, Seq]:
        """Every sequence the allocator holds: the rules' and those in hand-offs
        (hand_offs.py), which the other rules leave alone."""
        return {**self.seqs, **self.outside} if self.outside else self.seqs

    def holders(self) -> list[int]:
        """Every sequence holding device blocks, those in hand-offs too."""
        return sorted(sid for sid, s in self.everything().items() if not s.swapped)

    def shares_last_block(self, sid: int) -> bool:
        """Whether ``sid``'s partly filled last block is in another table (writing to it
        needs copy-on-write)."""
        seq, size = self.seqs[sid], self.alloc.block_size
        if len(seq.tokens) % size == 0 or self.memory.layout == "region":
            return False
        last = (len(seq.tokens) - 1) // size
        others = [self.blocks(o) for o in self.holders() if o != sid]
        return any(
            table[last] in other[group]
            for group, table in enumerate(self.blocks(sid))
            for other in others
        )

    def check_prefix_hit(self, prompt: list[int], salt: int, hit, promised: int) -> None:
        """What ``allocate`` returned is a legitimate hit: the one promised, whole
        blocks, short of the last token, of KV computed under ``salt``."""
        assert hit == promised, f"allocate hit {hit} tokens, cached_prefix_tokens said {promised}"
        assert hit == 0 or self.caching, f"a prefix hit of {hit} tokens without prefix caching"
        assert 0 <= hit < len(prompt), f"a hit of {hit} tokens of a {len(prompt)}-token prompt"
        assert hit % self.alloc.block_size == 0, f"a hit of {hit} tokens is not whole blocks"
        assert hit == 0 or (salt, tuple(prompt[:hit])) in self.computed, (
            f"a hit on {prompt[:hit]} under salt {salt}: never computed under that salt"
        )

    def check_hit_blocks(self, sid: int, prompt: list[int], hit: int) -> None:
        """The blocks a prefix hit of ``hit`` tokens gave new sequence ``sid`` hold the
        prompt's KV, in every group (where the group holds a block at all)."""
        for table in self.blocks(sid):
            shared = self.memory.read(table, hit, swapped=False)
            assert shared == self.memory.expected(table, prompt[:hit]), (
                f"a prefix hit of {hit} tokens on blocks holding the KV of {shared}, "
                f"not {prompt[:hit]}"
            )

    def blocks_taken(self, before: tuple[int, dict]) -> int:
        """Blocks the pool gave out since ``before`` (``pool_use()``): for block tables,
        each new entry and each entry now naming another block (a copy), but no released
        one (NULL_BLOCK), as a window may give a block back and take it again at once;
        for regions, the used slots' change."""
        used, tables = before
        if self.memory.layout == "region":
            return self.alloc.usage().used_blocks - used
        taken = 0
        for sid, groups in tables.items():
            if sid in self.seqs:
                for old, new in zip(groups, self.alloc.block_tables(sid)):
                    changed = [n for o, n in zip(old, new) if n not in (o, NULL_BLOCK)]
                    taken += len(changed) + max(0, len(new) - len(old))
        return taken

    def pool_use(self) -> tuple[int, dict]:
        """The used blocks and every live sequence's tables, for ``blocks_taken``."""
        tables = {sid: self.alloc.block_tables(sid) for sid in self.seqs}
        return self.alloc.usage().used_blocks, tables
