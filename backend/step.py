"""What one engine step asks an executor to do.

Lives in the backend (not in sim/) so the real backend stays importable without the
simulator's dependencies.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from backend.transfer import NO_MOVES, MovedBlocks, Transfer, moved_blocks


class PrefillChunk(NamedTuple):
    """Prompt tokens ``[start, start + len(token_ids))`` of one sequence computed this step.

    ``start`` counts tokens whose KV is already in the pool (prefix-cache hit plus
    earlier chunks); the chunk attends to them and causally to itself."""

    seq_id: int
    start: int
    token_ids: np.ndarray

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)  # a 1-D array: len is its shape[0], and cheaper to read


class BatchShape(NamedTuple):
    """What a step's cost depends on: prefill chunks ``(start, num_tokens)``, each
    decode's context length (the new token included), and the blocks moved per route."""

    chunks: list[tuple[int, int]]
    decode_context_lens: np.ndarray
    moved: MovedBlocks = NO_MOVES


class Batch(NamedTuple):
    """Everything one engine step asks an executor to do, in this order: the block
    transfers (swap-outs, swap-ins, loads from an offload tier, copy-on-write copies),
    then the forward pass over prefill chunks and one decode token for each of
    ``decode_seq_ids``, then the stores to an offload tier.

    Slots for every token computed this step are already held by the allocator (the
    engine allocates/appends before it executes), so an executor only reads block tables.
    A prefill chunk that ends at the prompt's end samples the sequence's first output
    token; each decode samples the next one."""

    prefills: tuple[PrefillChunk, ...]
    decode_seq_ids: np.ndarray  # int64
    decode_context_lens: np.ndarray  # int64, KV tokens each decode attends to (incl. new)
    #: int32, the token each decode sequence feeds this step (its newest token, whose slot
    #: the allocator already holds; its K/V is written this step, at position len - 1)
    decode_token_ids: np.ndarray
    #: block moves in the order they run, each naming its route (see backend.transfer)
    transfers: tuple[Transfer, ...] = ()
    #: stores to an offload tier of KV this step computes, run after the forward; the
    #: engine does not wait for them (vLLM's connector stores asynchronously)
    stores: tuple[Transfer, ...] = ()

    @property
    def num_prefill_tokens(self) -> int:
        return sum([len(chunk.token_ids) for chunk in self.prefills]) if self.prefills else 0

    @property
    def num_decode_tokens(self) -> int:
        return len(self.decode_seq_ids)

    def shape(self, blocks_per_unit: float = 1.0) -> BatchShape:
        """The step's shape, as cost models take it (``predict(*batch.shape())``), its
        moves in blocks (``blocks_per_unit``: see :func:`backend.transfer.moved_blocks`)."""
        return BatchShape(
            [(chunk.start, chunk.num_tokens) for chunk in self.prefills],
            self.decode_context_lens,
            moved_blocks(self.transfers, blocks_per_unit) if self.transfers else NO_MOVES,
        )

    @property
    def batch_size(self) -> int:
        return len(self.prefills) + len(self.decode_seq_ids)
