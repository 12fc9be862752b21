"""A Hypothesis state machine drives the block manager and the real KV pool together:
after every step, each live sequence's K/V read back through its block table (device or
CPU pool) equals a shadow copy of what was written for it."""

from __future__ import annotations

import hashlib

import numpy as np
import torch
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from backend.blocks import BlockManager
from backend.paged import KVCache, ModelShape, ops

POOL_SHAPE = ModelShape(
    num_layers=2, hidden_size=8, num_heads=1, num_kv_heads=1, head_dim=2,
    intermediate_size=8, vocab_size=4, max_model_len=64,
)  # fmt: skip
ROW = (POOL_SHAPE.num_layers, 2, POOL_SHAPE.num_kv_heads, POOL_SHAPE.head_dim)
# A tiny vocabulary makes equal prefixes, hence prefix-cache hits, common.
TOKENS = st.lists(st.integers(0, 2), min_size=1, max_size=12)


def kv_rows(tokens: list[int], salt: int, first: int = 0) -> np.ndarray:
    """The K/V "a model would compute" for positions ``first..``: a function of the salt and
    the whole prefix up to each position, as real K/V is (that is what makes a prefix-cache
    hit reuse correct values). Shape ``[n, layers, 2, kv_heads, head_dim]``."""
    rows = []
    for pos in range(first, len(tokens)):
        digest = hashlib.blake2b(bytes([salt, *tokens[: pos + 1]]), digest_size=16).digest()
        rows.append(np.frombuffer(digest, dtype=np.uint16)[: np.prod(ROW)].astype(np.float64))
    return np.asarray(rows, dtype=np.float64).reshape(-1, *ROW)


class PagedPoolMachine(RuleBasedStateMachine):
    @initialize(
        block_size=st.sampled_from([1, 2, 4]),
        num_blocks=st.integers(4, 12),
        prefix_caching=st.booleans(),
    )
    def setup(self, block_size, num_blocks, prefix_caching):
        self.alloc = BlockManager(
            num_blocks, block_size, num_cpu_blocks=6, enable_prefix_caching=prefix_caching
        )
        self.kv = KVCache(POOL_SHAPE, num_blocks, block_size, num_cpu_blocks=6, dtype=torch.float64)
        self.kv.data.fill_(float("nan"))  # nothing is valid until written
        self.shadow: dict[int, np.ndarray] = {}  # seq -> rows it must read back
        self.tokens: dict[int, list[int]] = {}
        self.salt: dict[int, int] = {}
        self.next_id = 0

    # -- helpers -------------------------------------------------------------------------------
    def _on_device(self) -> list[int]:
        return [s for s in sorted(self.shadow) if not self.alloc.is_swapped(s)]

    def _swapped(self) -> list[int]:
        return [s for s in sorted(self.shadow) if self.alloc.is_swapped(s)]

    def _write(self, seq: int, first: int) -> None:
        """Write the K/V of positions ``first..`` through the block table, as the executor
        does (slot mapping + write_kv, one layer at a time)."""
        rows = kv_rows(self.tokens[seq], self.salt[seq], first)
        table = self.alloc.block_table(seq)
        size = self.alloc.block_size
        positions = np.arange(first, len(self.tokens[seq]))
        slots = torch.as_tensor(
            np.asarray(table)[positions // size] * size + positions % size, dtype=torch.int64
        )
        data = torch.from_numpy(rows)
        for layer in range(POOL_SHAPE.num_layers):
            ops.write_kv(
                data[:, layer, 0], data[:, layer, 1],
                self.kv.key_cache(layer), self.kv.value_cache(layer), slots,
            )  # fmt: skip
        self.shadow[seq] = np.concatenate([self.shadow[seq][:first], rows])

    # -- rules ---------------------------------------------------------------------------------
    @rule(tokens=TOKENS, salt=st.integers(0, 1))
    def allocate(self, tokens, salt):
        if not self.alloc.can_allocate(tokens, salt=salt):
            return
        seq, self.next_id = self.next_id, self.next_id + 1
        hit = self.alloc.allocate(seq, tokens, salt=salt)
        self.tokens[seq], self.salt[seq] = list(tokens), salt
        self.shadow[seq] = kv_rows(tokens, salt)[:hit]  # hits are already in the pool
        self._write(seq, hit)

    @precondition(lambda self: self._on_device())
    @rule(data=st.data(), tokens=TOKENS)
    def append(self, data, tokens):
        seq = data.draw(st.sampled_from(self._on_device()))
        if not self.alloc.can_append(seq, len(tokens)):
            return
        self.kv.copy_blocks(self.alloc.append(seq, tokens))
        first = len(self.tokens[seq])
        self.tokens[seq] += tokens
        self._write(seq, first)

    @precondition(lambda self: self._on_device())
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(st.sampled_from(self._on_device()))
        child, self.next_id = self.next_id, self.next_id + 1
        self.kv.copy_blocks(self.alloc.fork(parent, child))
        self.tokens[child] = list(self.tokens[parent])
        self.salt[child] = self.salt[parent]
        self.shadow[child] = self.shadow[parent].copy()

    @precondition(lambda self: self.shadow)
    @rule(data=st.data())
    def free(self, data):
        seq = data.draw(st.sampled_from(sorted(self.shadow)))
        self.alloc.free(seq)
        del self.shadow[seq], self.tokens[seq], self.salt[seq]

    @precondition(lambda self: self._on_device())
    @rule(data=st.data())
    def swap_out(self, data):
        seq = data.draw(st.sampled_from(self._on_device()))
        if self.alloc.can_swap_out(seq):
            self.kv.swap_out(self.alloc.swap_out(seq))

    @precondition(lambda self: self._swapped())
    @rule(data=st.data())
    def swap_in(self, data):
        seq = data.draw(st.sampled_from(self._swapped()))
        if self.alloc.can_swap_in(seq):
            self.kv.swap_in(self.alloc.swap_in(seq))

    @rule(count=st.integers(1, 3))
    def evict(self, count):
        self.alloc.evict(count)

    # -- invariants ----------------------------------------------------------------------------
    @invariant()
    def every_sequence_reads_back_what_was_written(self):
        if not hasattr(self, "alloc"):
            return
        self.alloc.check_invariants()
        for seq, rows in self.shadow.items():
            swapped = self.alloc.is_swapped(seq)
            got = self.kv.read_sequence(self.alloc.block_table(seq), len(rows), on_cpu=swapped)
            # [layers, 2, n, heads, dim] -> [n, layers, 2, heads, dim]
            np.testing.assert_array_equal(got.permute(2, 0, 1, 3, 4).numpy(), rows)
            assert self.alloc.read_tokens(seq).tolist() == self.tokens[seq]


TestPagedPool = PagedPoolMachine.TestCase
