"""Ground truth for the paged kernels, and a contiguous (unpaged) baseline.

The float64 reference is written for clarity, not speed: it walks each sequence's block
table in Python to gather K/V into a dense tensor, then computes attention in float64
with explicit loops over heads. It shares no code with the kernels it checks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def gather_through_table(
    cache: torch.Tensor, block_table: Sequence[int], num_tokens: int
) -> torch.Tensor:
    """Rows ``0..num_tokens-1`` of one sequence, block by block: ``[num_tokens, heads, dim]``
    in float64."""
    block_size = cache.shape[1]
    rows = []
    for pos in range(num_tokens):
        block = int(block_table[pos // block_size])
        rows.append(cache[block, pos % block_size].to(torch.float64))
    return torch.stack(rows)


def attention_f64(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, query_positions: Sequence[int]
) -> torch.Tensor:
    """Float64 causal grouped-query attention: query row ``i`` (``[n, heads, dim]``) at
    position ``query_positions[i]`` sees keys ``0..query_positions[i]``."""
    n, num_heads, dim = query.shape
    group = num_heads // keys.shape[1]
    scale = 1.0 / math.sqrt(dim)
    out = torch.empty(n, num_heads, dim, dtype=torch.float64)
    q64 = query.to(torch.float64).cpu()
    for i, pos in enumerate(query_positions):
        for head in range(num_heads):
            k = keys[: pos + 1, head // group]
            v = values[: pos + 1, head // group]
            scores = (k @ q64[i, head]) * scale
            weights = torch.exp(scores - scores.max())
            out[i, head] = (weights / weights.sum()) @ v
    return out


def reference_decode(
    query, key_cache, value_cache, block_tables: Sequence[Sequence[int]], context_lens
) -> torch.Tensor:
    """Float64 decode attention: sequence b's query at position ``context_lens[b] - 1``."""
    outs = []
    for b, length in enumerate(int(x) for x in context_lens):
        keys = gather_through_table(key_cache.cpu(), block_tables[b], length)
        values = gather_through_table(value_cache.cpu(), block_tables[b], length)
        outs.append(attention_f64(query[b : b + 1], keys, values, [length - 1])[0])
    return torch.stack(outs)


def reference_prefill(
    query, key_cache, value_cache, block_tables, chunk_lens: Sequence[int],
    context_starts: Sequence[int],
) -> torch.Tensor:  # fmt: skip
    """Float64 chunked prefill: chunk c has ``chunk_lens[c]`` query rows (concatenated in
    ``query``) at positions ``context_starts[c]...``."""
    outs, row = [], 0
    for c, (n, start) in enumerate(zip(chunk_lens, context_starts, strict=True)):
        keys = gather_through_table(key_cache.cpu(), block_tables[c], start + n)
        values = gather_through_table(value_cache.cpu(), block_tables[c], start + n)
        positions = list(range(start, start + n))
        outs.append(attention_f64(query[row : row + n], keys, values, positions))
        row += n
    return torch.cat(outs)
