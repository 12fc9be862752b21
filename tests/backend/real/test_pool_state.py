"""A Hypothesis state machine drives the block manager and the real KV pool together:
after every step, each live sequence's K/V read back through its block table (device or
CPU pool) equals a shadow copy of what was computed for it.

Sequences are admitted whole (their prompt's K/V computed at once) or, as the engine
admits them, with ``computed_tokens=0``: their prompt is then computed in chunks
(``prefill``: ``mark_computed``, then the K/V written through the block table), and they
may be swapped out and back in mid-prefill. Every K/V write carries the number of the
pass that computed it (a real backend's K/V of one prefix can differ in its low bits from
one batch to another), so a write into a block that another sequence reads shows up in
that sequence's read back even when the two computed the same prefix.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from backend.blocks import BlockManager
from backend.real import KVCache, ModelShape, ops

POOL_SHAPE = ModelShape(
    num_layers=2,
    hidden_size=8,
    num_heads=1,
    num_kv_heads=1,
    head_dim=2,
    intermediate_size=8,
    vocab_size=4,
    max_model_len=64,
)
ROW = (POOL_SHAPE.num_layers, 2, POOL_SHAPE.num_kv_heads, POOL_SHAPE.head_dim)
# A tiny vocabulary makes equal prefixes, hence prefix-cache hits, common.
TOKENS = st.lists(st.integers(0, 2), min_size=1, max_size=12)
#: a K/V value is a prefix digest (below PASS) plus PASS times the pass that wrote it
PASS = 2.0**16


def kv_rows(tokens: list[int], salt: int, first: int = 0, stop: int | None = None) -> np.ndarray:
    """The K/V "a model would compute" for positions ``first..stop - 1``, up to the pass
    number (see ``PASS``): a function of the salt and the whole prefix up to each
    position, as real K/V is (that is what makes a prefix-cache hit reuse correct
    values). Shape ``[n, layers, 2, kv_heads, head_dim]``."""
    rows = []
    for pos in range(first, len(tokens) if stop is None else stop):
        digest = hashlib.blake2b(bytes([salt, *tokens[: pos + 1]]), digest_size=16).digest()
        rows.append(np.frombuffer(digest, dtype=np.uint16)[: np.prod(ROW)].astype(np.float64))
    return np.asarray(rows, dtype=np.float64).reshape(-1, *ROW)


class PagedPoolMachine(RuleBasedStateMachine):
    @initialize(
        block_size=st.sampled_from([1, 2, 4]),
        num_blocks=st.integers(4, 12),
        prefix_caching=st.sampled_from([True, True, True, False]),
    )
    def setup(self, block_size, num_blocks, prefix_caching):
        self.alloc = BlockManager(
            num_blocks, block_size, num_cpu_blocks=6, enable_prefix_caching=prefix_caching
        )
        self.kv = KVCache(POOL_SHAPE, num_blocks, block_size, num_cpu_blocks=6, dtype=torch.float64)
        self.kv.data.fill_(float("nan"))  # nothing is valid until written
        # seq -> the K/V of its computed tokens (their number is its length), as it
        # must read back
        self.shadow: dict[int, np.ndarray] = {}
        self.tokens: dict[int, list[int]] = {}
        self.salt: dict[int, int] = {}
        self.next_id = 0
        self.passes = 0  # K/V writes so far (each is one pass of the model)

    # -- helpers -------------------------------------------------------------------------------
    def _on_device(self) -> list[int]:
        return [s for s in sorted(self.shadow) if not self.alloc.is_swapped(s)]

    def _swapped(self) -> list[int]:
        return [s for s in sorted(self.shadow) if self.alloc.is_swapped(s)]

    def _prefilled(self) -> list[int]:
        """On the device with the K/V of all its tokens computed (it may decode)."""
        return [s for s in self._on_device() if len(self.shadow[s]) == len(self.tokens[s])]

    def _prefilling(self) -> list[int]:
        """On the device with prompt tokens whose K/V is not computed yet."""
        return [s for s in self._on_device() if len(self.shadow[s]) < len(self.tokens[s])]

    def _read(self, seq: int, count: int) -> np.ndarray:
        """The K/V of ``seq``'s first ``count`` tokens through its block table,
        ``[count, layers, 2, heads, dim]``."""
        swapped = self.alloc.is_swapped(seq)
        got = self.kv.read_sequence(self.alloc.block_table(seq), count, on_cpu=swapped)
        return got.permute(2, 0, 1, 3, 4).numpy()  # [layers, 2, n, ...] -> [n, layers, 2, ...]

    def _adopt_shared(self, seq: int, count: int) -> None:
        """``seq``'s first ``count`` tokens now read blocks another pass computed (a prefix
        hit, or blocks a swap-in shared from the cache): they must hold the K/V of
        ``seq``'s own prefix, written by whichever pass; from now on it reads those."""
        if not count:
            return
        got = self._read(seq, count)
        expected = kv_rows(self.tokens[seq], self.salt[seq], 0, count)
        np.testing.assert_array_equal(np.mod(got, PASS), expected, "K/V of another prefix")
        self.shadow[seq] = np.concatenate([got, self.shadow[seq][count:]])

    def _write(self, seq: int, first: int, stop: int | None = None) -> None:
        """Compute the K/V of positions ``first..stop - 1`` (default: to the end) and write
        it through the block table, as the executor does (slot mapping + write_kv, one
        layer at a time)."""
        stop = len(self.tokens[seq]) if stop is None else stop
        assert first == len(self.shadow[seq]), "the K/V is computed in order"
        self.passes += 1
        rows = kv_rows(self.tokens[seq], self.salt[seq], first, stop) + PASS * self.passes
        table = self.alloc.block_table(seq)
        size = self.alloc.block_size
        positions = np.arange(first, stop)
        slots = torch.as_tensor(
            np.asarray(table)[positions // size] * size + positions % size, dtype=torch.int64
        )
        data = torch.from_numpy(rows)
        for layer in range(POOL_SHAPE.num_layers):
            ops.write_kv(
                data[:, layer, 0],
                data[:, layer, 1],
                self.kv.key_cache(layer),
                self.kv.value_cache(layer),
                slots,
            )
        self.shadow[seq] = np.concatenate([self.shadow[seq], rows])

    def _admit(self, tokens: list[int], salt: int, computed_tokens: int | None) -> int | None:
        """Allocate a new sequence (None: it does not fit); its hit is adopted."""
        if not self.alloc.can_allocate(tokens, salt=salt):
            return None
        seq, self.next_id = self.next_id, self.next_id + 1
        hit = self.alloc.allocate(seq, tokens, salt=salt, computed_tokens=computed_tokens)
        self.tokens[seq], self.salt[seq] = list(tokens), salt
        self.shadow[seq] = np.zeros((0, *ROW))
        self._adopt_shared(seq, hit)  # hits are already in the pool
        return seq

    # -- rules ---------------------------------------------------------------------------------
    @rule(tokens=TOKENS, salt=st.integers(0, 1))
    def allocate(self, tokens, salt):
        """A prompt whose K/V is computed at once (``computed_tokens`` None)."""
        seq = self._admit(tokens, salt, None)
        if seq is not None:
            self._write(seq, len(self.shadow[seq]))

    @rule(tokens=TOKENS, salt=st.integers(0, 1))
    def allocate_for_prefill(self, tokens, salt):
        """A prompt admitted as the engine admits it: ``computed_tokens=0``, its K/V
        computed by later ``prefill`` steps (the prefix hit's is there already)."""
        self._admit(tokens, salt, 0)

    @precondition(lambda self: self.shadow)
    @rule(data=st.data(), extra=st.lists(st.integers(0, 2), max_size=4), whole=st.booleans())
    def allocate_same_prefix(self, data, extra, whole):
        """A live sequence's tokens (cut or extended) again, under its salt: a request
        sharing its prefix, admitted whole or for prefill."""
        other = data.draw(st.sampled_from(sorted(self.shadow)))
        tokens = self.tokens[other][: data.draw(st.integers(1, len(self.tokens[other])))]
        seq = self._admit(tokens + extra, self.salt[other], None if whole else 0)
        if seq is not None and whole:
            self._write(seq, len(self.shadow[seq]))

    @precondition(lambda self: self._prefilling())
    @rule(data=st.data())
    def prefill(self, data):
        """The engine's next prompt chunk: ``mark_computed`` through its end when the
        step is planned, then the executor computes it into the block table."""
        seq = data.draw(st.sampled_from(self._prefilling()))
        done, total = len(self.shadow[seq]), len(self.tokens[seq])
        stop = data.draw(st.integers(done + 1, total))
        self.alloc.mark_computed(seq, stop)
        self._write(seq, done, stop)

    @precondition(lambda self: self._prefilled())
    @rule(data=st.data(), tokens=TOKENS)
    def append(self, data, tokens):
        seq = data.draw(st.sampled_from(self._prefilled()))
        if not self.alloc.can_append(seq, len(tokens)):
            return
        self.kv.copy_blocks(self.alloc.append(seq, tokens))
        first = len(self.tokens[seq])
        self.tokens[seq] += tokens
        self._write(seq, first)

    @precondition(lambda self: self._prefilled())
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(st.sampled_from(self._prefilled()))
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
            self.kv.transfer(self.alloc.swap_out(seq))

    @precondition(lambda self: self._swapped())
    @rule(data=st.data())
    def swap_in(self, data):
        self._swap_in(data.draw(st.sampled_from(self._swapped())))

    @precondition(lambda self: self._prefilling())
    @rule(data=st.data())
    def swap_out_and_in_mid_prefill(self, data):
        """A request preempted mid-prefill is swapped out, then resumed (the engine puts
        it back among the prefills with the tokens it had computed)."""
        seq = data.draw(st.sampled_from(self._prefilling()))
        if self.alloc.can_swap_out(seq):
            self.kv.transfer(self.alloc.swap_out(seq))
            self._swap_in(seq)

    def _swap_in(self, seq: int) -> None:
        if not self.alloc.can_swap_in(seq):
            return
        moves = self.alloc.swap_in(seq)
        self.kv.transfer(moves)
        # The leading blocks that came back without a move are shared from the cache.
        shared = len(self.alloc.block_table(seq)) - len(moves)
        self._adopt_shared(seq, min(shared * self.alloc.block_size, len(self.shadow[seq])))

    @rule(count=st.integers(1, 3))
    def evict(self, count):
        self.alloc.evict(count)

    # -- invariants ----------------------------------------------------------------------------
    @invariant()
    def every_sequence_reads_back_what_was_computed_for_it(self):
        if not hasattr(self, "alloc"):
            return
        self.alloc.check_invariants()
        for seq, rows in self.shadow.items():
            np.testing.assert_array_equal(self._read(seq, len(rows)), rows, f"sequence {seq}")
            assert self.alloc.read_tokens(seq).tolist() == self.tokens[seq]


TestPagedPool = PagedPoolMachine.TestCase
