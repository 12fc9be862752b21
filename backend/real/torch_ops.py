"""Torch implementations of the paged KV operations (the fallback when Triton is off).

Vectorised, in the cache dtype promoted to at least float32, so they are usable on
moderately large shapes; the float64 ground truth lives in ``reference.py``.
Shapes: caches ``[num_blocks, block_size, num_kv_heads, head_dim]``; queries
``[tokens, num_heads, head_dim]``; block tables ``[seqs, max_blocks]`` int (padding
entries must still be valid block ids, e.g. 0, since they are gathered then masked).
"""

from __future__ import annotations

import torch


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


def write_kv(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Scatter token ``i``'s K/V into flat slot ``slot_mapping[i]``; slot -1 is skipped.
    Mutates the caches only at the given slots."""
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    heads, dim = key_cache.shape[-2:]
    key_cache.view(-1, heads, dim).index_copy_(0, slots, key[keep].to(key_cache.dtype))
    value_cache.view(-1, heads, dim).index_copy_(0, slots, value[keep].to(value_cache.dtype))


def dense_causal_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, query_start: int, scale: float
) -> torch.Tensor:
    """Attention of ``n`` queries at positions ``query_start..query_start+n-1`` over dense
    ``key``/``value`` ``[kv_len, num_kv_heads, head_dim]`` (positions 0..kv_len-1), each
    query seeing keys at positions up to its own. Grouped-query: query head ``h`` reads
    KV head ``h // group``. Returns ``[n, num_heads, head_dim]`` in the query dtype."""
    n, num_heads, dim = query.shape
    kv_len, kv_heads, _ = key.shape
    group = num_heads // kv_heads
    acc = _acc_dtype(query.dtype)
    q = query.to(acc).view(n, kv_heads, group, dim)
    scores = torch.einsum("nhgd,khd->hgnk", q, key.to(acc)) * scale
    q_pos = torch.arange(n, device=query.device) + query_start
    k_pos = torch.arange(kv_len, device=query.device)
    scores = scores.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.einsum("hgnk,khd->nhgd", probs, value.to(acc))
    return out.reshape(n, num_heads, dim).to(query.dtype)


def _gather(cache: torch.Tensor, table: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """The first ``num_tokens`` rows of a sequence through its block table(s)."""
    block_size = cache.shape[1]
    num_blocks = -(-num_tokens // block_size)
    blocks = cache[table[..., :num_blocks].long()]
    lead = blocks.shape[:-4]
    flat = blocks.reshape(*lead, num_blocks * block_size, *cache.shape[2:])
    return flat[..., :num_tokens, :, :]


def paged_decode_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """One query token per sequence (``[batch, num_heads, head_dim]``) attending to its
    ``context_lens[b]`` cached tokens through ``block_tables[b]``. Returns the output in
    the query dtype. No mutation."""
    batch, num_heads, dim = query.shape
    kv_heads = key_cache.shape[2]
    group = num_heads // kv_heads
    max_len = int(context_lens.max())
    acc = _acc_dtype(query.dtype)
    keys = _gather(key_cache, block_tables, max_len).to(acc)  # [B, N, Hkv, D]
    values = _gather(value_cache, block_tables, max_len).to(acc)
    q = query.to(acc).view(batch, kv_heads, group, dim)
    scores = torch.einsum("bhgd,bnhd->bhgn", q, keys) * scale
    beyond = torch.arange(max_len, device=query.device)[None, :] >= context_lens[:, None]
    scores = scores.masked_fill(beyond[:, None, None, :], float("-inf"))
    # Slots past a sequence's end hold stale (possibly non-finite) data: zero them so a
    # zero probability times garbage cannot become NaN.
    values = values.masked_fill(beyond[:, :, None, None], 0.0)
    out = torch.einsum("bhgn,bnhd->bhgd", torch.softmax(scores, dim=-1), values)
    return out.reshape(batch, num_heads, dim).to(query.dtype)


def paged_prefill_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    context_starts: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Chunked prefill: chunk ``c`` is query rows ``query_start_loc[c]:query_start_loc[c+1]``
    at positions ``context_starts[c]...``; it attends to its cached context and causally
    to itself (whose K/V must already be written). Returns ``[tokens, heads, dim]``."""
    out = torch.empty_like(query)
    bounds = query_start_loc.tolist()
    starts = context_starts.tolist()
    for c, ctx_start in enumerate(starts):
        lo, hi = bounds[c], bounds[c + 1]
        kv_len = ctx_start + hi - lo
        keys = _gather(key_cache, block_tables[c], kv_len)
        values = _gather(value_cache, block_tables[c], kv_len)
        out[lo:hi] = dense_causal_attention(query[lo:hi], keys, values, ctx_start, scale)
    return out


def copy_blocks(data: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> None:
    """``data[:, :, dst[i]] = data[:, :, src[i]]`` for all i (all reads before writes).
    ``data`` is the whole pool ``[layers, 2, num_blocks, ...]``; mutates the dst blocks."""
    data.index_copy_(2, dst.long(), data.index_select(2, src.long()))
