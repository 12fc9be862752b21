"""Shared builders for the paged-backend tests: scattered block tables, poisoned caches."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from backend.real import ops

TRITON_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
needs_triton = pytest.mark.skipif(
    not ops.triton_usable(TRITON_DEVICE),
    reason="Triton kernels need triton plus CUDA or TRITON_INTERPRET=1",
)


@dataclass
class PagedLayout:
    """Sequences of ``lens`` tokens whose blocks are scattered, in random order, over a
    pool with spare blocks; caches hold random K/V and NaN in every slot no sequence owns
    (so a kernel that reads past a context, or a wrong block, produces NaN)."""

    lens: list[int]
    tables: list[list[int]]
    block_tables: torch.Tensor  # [seqs, max_blocks] int32, padded with block 0
    key_cache: torch.Tensor
    value_cache: torch.Tensor

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.key_cache.shape[-1])


def scattered_layout(
    rng: np.random.Generator,
    lens: list[int],
    block_size: int,
    kv_heads: int,
    head_dim: int,
    *,
    dtype=torch.float32,
    device="cpu",
) -> PagedLayout:
    blocks_per_seq = [-(-n // block_size) for n in lens]
    num_blocks = sum(blocks_per_seq) + 3
    order = rng.permutation(num_blocks).tolist()
    tables, used = [], 0
    for count in blocks_per_seq:
        tables.append(order[used : used + count])
        used += count
    width = max(blocks_per_seq)
    padded = [t + [0] * (width - len(t)) for t in tables]
    shape = (num_blocks, block_size, kv_heads, head_dim)
    caches = []
    for _ in range(2):
        cache = torch.full(shape, float("nan"), dtype=torch.float64)
        for table, n in zip(tables, lens, strict=True):
            flat_rows = torch.from_numpy(rng.standard_normal((n, kv_heads, head_dim)))
            for pos in range(n):
                cache[table[pos // block_size], pos % block_size] = flat_rows[pos]
        caches.append(cache.to(dtype).to(device))
    return PagedLayout(
        lens, tables, torch.tensor(padded, dtype=torch.int32, device=device), *caches
    )


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """max |actual - expected| / max |expected|; NaN anywhere gives inf."""
    diff = (actual.detach().cpu().to(torch.float64) - expected).abs().max().item()
    if math.isnan(diff):
        return math.inf
    return diff / expected.abs().max().item()


def poisoned_like(x: torch.Tensor) -> torch.Tensor:
    return torch.full_like(x, float("nan"))
