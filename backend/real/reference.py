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
    query,
    key_cache,
    value_cache,
    block_tables,
    chunk_lens: Sequence[int],
    context_starts: Sequence[int],
) -> torch.Tensor:
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


class ContiguousRunner:
    """The contiguous baseline: the same model, one dense KV tensor per sequence, no
    block tables, attention by torch's own ``scaled_dot_product_attention``.

    Tokens are fed one sequence at a time; each sequence's K/V lives in
    ``[layers, 2, max_model_len, kv_heads, head_dim]`` at positions 0..len-1.
    """

    def __init__(self, model):
        self.model = model
        self.kv: dict[int, torch.Tensor] = {}
        self.lengths: dict[int, int] = {}

    def feed(self, seq_id: int, token_ids) -> torch.Tensor:
        """Append tokens to a sequence (creating it if new) and return the logits of its
        last new token. Mutates the sequence's dense K/V."""
        model, s = self.model, self.model.shape
        if seq_id not in self.kv:
            dims = (s.num_layers, 2, s.max_model_len, s.num_kv_heads, s.head_dim)
            self.kv[seq_id] = torch.zeros(dims, dtype=model.dtype, device=model.device)
            self.lengths[seq_id] = 0
        start = self.lengths[seq_id]
        tokens = torch.as_tensor(token_ids, dtype=torch.int64, device=model.device).reshape(-1)
        positions = torch.arange(start, start + tokens.numel(), device=model.device)
        dense = self.kv[seq_id]

        def attend(layer, query, key, value):
            end = start + key.shape[0]
            dense[layer, 0, start:end] = key
            dense[layer, 1, start:end] = value
            return _dense_sdpa(query, dense[layer, 0, :end], dense[layer, 1, :end], start)

        hidden = model.forward(tokens, positions, attend)
        self.lengths[seq_id] = start + tokens.numel()
        return model.logits(hidden[-1:])[0]

    def fork(self, parent_id: int, child_id: int) -> None:
        """The child gets its own dense copy of the parent's K/V (no sharing)."""
        self.kv[child_id] = self.kv[parent_id].clone()
        self.lengths[child_id] = self.lengths[parent_id]

    def drop(self, seq_id: int) -> None:
        del self.kv[seq_id], self.lengths[seq_id]

    def generate(self, seq_id: int, prompt, num_tokens: int) -> tuple[list[int], torch.Tensor]:
        """Greedy generation: the prompt, then ``num_tokens`` tokens. Returns the tokens
        and their logits ``[num_tokens, vocab]``."""
        logits = self.feed(seq_id, prompt)
        tokens, all_logits = [], []
        for step in range(num_tokens):
            tokens.append(int(logits.argmax()))
            all_logits.append(logits)
            if step + 1 < num_tokens:
                logits = self.feed(seq_id, [tokens[-1]])
        return tokens, torch.stack(all_logits)


def _dense_sdpa(query, key, value, query_start: int) -> torch.Tensor:
    """Causal grouped-query attention over dense K/V via torch SDPA: ``[n, heads, dim]``."""
    n, kv_len = query.shape[0], key.shape[0]
    q_pos = torch.arange(query_start, query_start + n, device=query.device)
    mask = torch.arange(kv_len, device=query.device)[None, :] <= q_pos[:, None]
    out = torch.nn.functional.scaled_dot_product_attention(
        query.transpose(0, 1),
        key.transpose(0, 1),
        value.transpose(0, 1),
        attn_mask=mask,
        enable_gqa=True,
    )
    return out.transpose(0, 1)
