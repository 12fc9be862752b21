"""A miniature engine for the end-to-end tests: drives the block manager and the paged
executor the way the simulator's engine does (allocate/append before each step, moves
carried in the batch), so paged generation can be compared with the contiguous baseline."""

from __future__ import annotations

import numpy as np
import torch

from backend.blocks import BlockManager
from backend.connectors.offload import OffloadConnector
from backend.connectors.seam import ConnectorSeam
from backend.real import ModelShape
from backend.real.paged_executor import PagedExecutor
from backend.step import Batch, PrefillChunk
from backend.transfer import Transfer

TINY = ModelShape(
    num_layers=2,
    hidden_size=64,
    num_heads=8,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=128,
    vocab_size=128,
    max_model_len=256,
)


class PagedHarness:
    """Block manager + paged executor, stepped explicitly by a test."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        num_cpu_blocks: int = 0,
        prefix_caching: bool = False,
        dtype=torch.float64,
        use_triton=False,
        seed=0,
        shape: ModelShape = TINY,
        device="cpu",
        tiers=(),
    ):
        self.alloc = BlockManager(
            num_blocks,
            block_size,
            num_cpu_blocks=num_cpu_blocks,
            enable_prefix_caching=prefix_caching,
        )
        # the offload tiers ``tiers`` (TierSpecs, the CPU one first) beside the manager
        self.seam = None
        if tiers:
            connector = OffloadConnector.build(tiers, block_size, cpu_base=num_cpu_blocks)
            self.seam = ConnectorSeam(self.alloc, connector)
        self.executor = PagedExecutor(
            shape,
            self.alloc,
            dtype=dtype,
            use_triton=use_triton,
            seed=seed,
            device=device,
            cpu_threads=1,
            tier_blocks=self.seam.connector.tier_blocks if self.seam is not None else {},
        )
        self.copies: list[Transfer] = []
        self.copies_done = 0  # copy-on-write moves executed so far
        self.swap_out_moves: list[Transfer] = []
        self.swap_in_moves: list[Transfer] = []

    def admit(self, seq_id: int, prompt) -> int:
        """Allocate a prompt; returns how many leading tokens need no compute (a cache
        hit, capped so the last prompt token is always computed, as the engine does)."""
        tokens = np.asarray(prompt, dtype=np.int32)
        if self.seam is not None:
            hit = self.seam.allocate(seq_id, tokens, 0)
        else:
            hit = self.alloc.allocate(seq_id, tokens)
        return min(hit, len(prompt) - 1)

    def swap_out(self, seq_id: int) -> None:
        self.swap_out_moves += self.alloc.swap_out(seq_id)

    def swap_in(self, seq_id: int) -> None:
        self.swap_in_moves += self.alloc.swap_in(seq_id)

    def fork(self, parent: int, child: int) -> None:
        self.copies += self.alloc.fork(parent, child)

    def step(
        self, prefills: list[tuple[int, int, list[int]]] = (), decodes: dict[int, int] | None = None
    ) -> tuple[dict[int, int], dict[int, torch.Tensor]]:
        """One engine step: ``prefills`` as (seq, start, tokens); ``decodes`` maps each
        decoding sequence to the token it feeds. Returns (sampled, logits) by sequence."""
        decodes = decodes or {}
        ids = np.array(list(decodes), dtype=np.int64)
        tokens = np.array(list(decodes.values()), dtype=np.int32)
        if ids.size:
            self.copies += self.alloc.append_batch(ids, tokens)
        loads, stores = self.seam.take_transfers() if self.seam is not None else ((), ())
        batch = Batch(
            prefills=tuple(
                PrefillChunk(s, start, np.asarray(t, dtype=np.int32)) for s, start, t in prefills
            ),
            decode_seq_ids=ids,
            decode_context_lens=np.array([self.alloc.num_tokens(int(s)) for s in ids], np.int64),
            decode_token_ids=tokens,
            transfers=(*self.swap_out_moves, *self.swap_in_moves, *loads, *self.copies),
            stores=stores,
        )
        self.copies_done += len(self.copies)
        self.copies, self.swap_out_moves, self.swap_in_moves = [], [], []
        seconds = self.executor.execute(batch)
        assert seconds > 0
        self.alloc.check_invariants()
        return self.executor.last_sampled, self.executor.last_logits

    def prefill(self, seq_id: int, prompt, start: int = 0, chunk: int | None = None):
        """Prefill ``prompt[start:]`` in chunks; returns the last chunk's (token, logits)."""
        chunk = chunk or len(prompt)
        for lo in range(start, len(prompt), chunk):
            sampled, logits = self.step([(seq_id, lo, list(prompt[lo : lo + chunk]))])
        return sampled[seq_id], logits[seq_id]

    def decode(self, seq_id: int, first_token: int, num_tokens: int):
        """Greedy decode from ``first_token`` (already sampled, not yet fed)."""
        tokens, logits, token = [], [], first_token
        for _ in range(num_tokens):
            sampled, step_logits = self.step(decodes={seq_id: token})
            token = sampled[seq_id]
            tokens.append(token)
            logits.append(step_logits[seq_id])
        return tokens, logits
