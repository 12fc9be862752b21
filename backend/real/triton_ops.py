"""Triton kernels for the paged KV operations.

Importing this module requires triton; ``ops.py`` imports it lazily so the torch paths
work without it. Kernels gather K/V token by token through the block table
(``slot = table[pos // block_size] * block_size + pos % block_size``), so any block size
(1, 8, 16, 32, ...) works with the same tiling. Matrix products use ``tl.dot`` with every
tile dimension padded to at least 16 (the GPU's minimum); float32 inputs use IEEE
precision (no TF32) so the kernels meet the float32 accuracy target.

Supported dtypes: float32, float16, bfloat16 (the torch paths also take float64).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl


def _pow2(n: int, minimum: int = 16) -> int:
    return max(minimum, triton.next_power_of_2(int(n)))


# -- write_kv (vLLM's reshape-and-cache) --------------------------------------------------
@triton.jit
def _write_kv_kernel(
    key_ptr,
    value_ptr,
    key_cache_ptr,
    value_cache_ptr,
    slot_ptr,
    stride_key,
    stride_value,
    row_numel,
    BLOCK: tl.constexpr,
):
    token = tl.program_id(0)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    # Broadcast the slot to a vector before comparing: Triton 3.9's interpreter rejects a
    # mask built from a scalar bool & a vector bool.
    mask = (offs < row_numel) & (tl.zeros([BLOCK], tl.int64) + slot >= 0)
    k = tl.load(key_ptr + token * stride_key + offs, mask=mask)
    v = tl.load(value_ptr + token * stride_value + offs, mask=mask)
    tl.store(key_cache_ptr + slot * row_numel + offs, k, mask=mask)
    tl.store(value_cache_ptr + slot * row_numel + offs, v, mask=mask)


def write_kv(key, value, key_cache, value_cache, slot_mapping) -> None:
    """See torch_ops.write_kv. ``key``/``value`` rows must be contiguous per token."""
    tokens = key.shape[0]
    if tokens == 0:
        return
    key = key.reshape(tokens, -1).to(key_cache.dtype).contiguous()
    value = value.reshape(tokens, -1).to(value_cache.dtype).contiguous()
    row = key.shape[1]
    _write_kv_kernel[(tokens,)](
        key,
        value,
        key_cache,
        value_cache,
        slot_mapping.contiguous(),
        key.stride(0),
        value.stride(0),
        row,
        BLOCK=triton.next_power_of_2(row),
    )


# -- the shared inner loop of both attention kernels --------------------------------------
@triton.jit
def _attend_tile(
    q,
    m_i,
    l_i,
    acc,
    key_cache_ptr,
    value_cache_ptr,
    table_row_ptr,
    kv_head,
    n,
    valid,
    dims,
    dim_mask,
    block_size,
    kv_heads,
    scale,
    HEAD_DIM: tl.constexpr,
    IEEE: tl.constexpr,
):
    """One online-softmax update over key positions ``n`` (``valid``: [rows, cols] mask)."""
    col_ok = tl.max(valid.to(tl.int32), 0) > 0
    block = tl.load(table_row_ptr + n // block_size, mask=col_ok, other=0).to(tl.int64)
    slot = block * block_size + n % block_size
    offs = slot[:, None] * (kv_heads * HEAD_DIM) + kv_head * HEAD_DIM + dims[None, :]
    kv_mask = col_ok[:, None] & dim_mask[None, :]
    k = tl.load(key_cache_ptr + offs, mask=kv_mask, other=0.0)
    if IEEE:  # noqa: SIM108 (a constexpr branch, resolved at compile time)
        s = tl.dot(q, tl.trans(k), input_precision="ieee")
    else:
        s = tl.dot(q, tl.trans(k))
    s = tl.where(valid, s * scale, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    # A row whose keys are all masked so far keeps m = -inf; guard exp(-inf - -inf).
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.exp(s - m_safe[:, None])
    alpha = tl.exp(m_i - m_safe)
    v = tl.load(value_cache_ptr + offs, mask=kv_mask, other=0.0)
    if IEEE:  # noqa: SIM108
        pv = tl.dot(p, v.to(tl.float32), input_precision="ieee")
    else:
        pv = tl.dot(p.to(v.dtype), v)
    return m_new, l_i * alpha + tl.sum(p, 1), acc * alpha[:, None] + pv


# -- paged decode attention (optionally split-KV) -----------------------------------------
@triton.jit
def _decode_kernel(
    q_ptr,
    key_cache_ptr,
    value_cache_ptr,
    tables_ptr,
    lens_ptr,
    out_ptr,
    max_ptr,
    sum_ptr,
    stride_qb,
    stride_qh,
    stride_tb,
    stride_ob,
    stride_oh,
    stride_os,
    stride_mb,
    stride_mh,
    block_size,
    kv_heads,
    tokens_per_split,
    scale,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT: tl.constexpr,
    IEEE: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    start = split * tokens_per_split
    end = tl.minimum(tl.load(lens_ptr + seq), start + tokens_per_split)  # (its context)
    rows = tl.arange(0, BLOCK_G)
    dims = tl.arange(0, BLOCK_D)
    row_mask = rows < GROUP
    dim_mask = dims < HEAD_DIM
    heads = kv_head * GROUP + rows
    q_offs = seq * stride_qb + heads[:, None] * stride_qh + dims[None, :]
    out_mask = row_mask[:, None] & dim_mask[None, :]  # (the query's tile and the output's)
    q = tl.load(q_ptr + q_offs, mask=out_mask, other=0.0)
    if IEEE:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    table_row = tables_ptr + seq.to(tl.int64) * stride_tb
    for n0 in range(start, end, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        valid = (n < end)[None, :] & (rows >= 0)[:, None]
        m_i, l_i, acc = _attend_tile(
            q,
            m_i,
            l_i,
            acc,
            key_cache_ptr,
            value_cache_ptr,
            table_row,
            kv_head,
            n,
            valid,
            dims,
            dim_mask,
            block_size,
            kv_heads,
            scale,
            HEAD_DIM,
            IEEE,
        )
    if SPLIT:
        o_offs = seq * stride_ob + heads[:, None] * stride_oh + split * stride_os + dims[None, :]
        tl.store(out_ptr + o_offs, acc, mask=out_mask)
        m_offs = seq * stride_mb + heads * stride_mh + split
        tl.store(max_ptr + m_offs, m_i, mask=row_mask)
        tl.store(sum_ptr + m_offs, l_i, mask=row_mask)
    else:
        out = acc / l_i[:, None]
        o_offs = seq * stride_ob + heads[:, None] * stride_oh + dims[None, :]
        tl.store(out_ptr + o_offs, out.to(out_ptr.dtype.element_ty), mask=out_mask)


@triton.jit
def _combine_splits_kernel(
    part_ptr,
    max_ptr,
    sum_ptr,
    out_ptr,
    num_splits,
    stride_pb,
    stride_ph,
    stride_ps,
    stride_mb,
    stride_mh,
    stride_ob,
    stride_oh,
    HEAD_DIM: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Second stage of split-KV: rescale each split's partial sums to the global max."""
    seq = tl.program_id(0)
    head = tl.program_id(1)
    splits = tl.arange(0, BLOCK_S)
    dims = tl.arange(0, BLOCK_D)
    split_mask = splits < num_splits
    m_offs = seq * stride_mb + head * stride_mh + splits
    m = tl.load(max_ptr + m_offs, mask=split_mask, other=float("-inf"))
    total = tl.load(sum_ptr + m_offs, mask=split_mask, other=0.0)
    # Splits past the end of a short sequence saw no keys: m = -inf gives them weight 0.
    weight = tl.exp(m - tl.max(m, 0))
    p_offs = seq * stride_pb + head * stride_ph + splits[:, None] * stride_ps + dims[None, :]
    part_mask = split_mask[:, None] & (dims < HEAD_DIM)[None, :]
    part = tl.load(part_ptr + p_offs, mask=part_mask, other=0.0)
    out = tl.sum(part * weight[:, None], 0) / tl.sum(total * weight, 0)
    o_offs = seq * stride_ob + head * stride_oh + dims
    tl.store(out_ptr + o_offs, out.to(out_ptr.dtype.element_ty), mask=dims < HEAD_DIM)


def paged_decode_attention(
    query,
    key_cache,
    value_cache,
    block_tables,
    context_lens,
    scale,
    num_splits,
    out,
    max_len,
) -> torch.Tensor:
    """See torch_ops.paged_decode_attention (called through ``ops``, which fills in the
    defaults). ``num_splits > 1`` splits each sequence's context into that many ranges
    computed in parallel, then combined (split-KV). ``max_len`` is ``context_lens.max()``
    on the host; ``out`` the result tensor (or None)."""
    batch, num_heads, head_dim = query.shape
    _, block_size, kv_heads, _ = key_cache.shape
    group = num_heads // kv_heads
    query = query.contiguous()
    out = torch.empty_like(query) if out is None else out
    block_n = 64 if block_size >= 16 else 32
    tokens_per_split = -(-max_len // num_splits)
    tokens_per_split = -(-tokens_per_split // block_n) * block_n
    common = dict(
        GROUP=group,
        HEAD_DIM=head_dim,
        BLOCK_G=_pow2(group),
        BLOCK_D=_pow2(head_dim),
        BLOCK_N=block_n,
        IEEE=query.dtype == torch.float32,
    )
    grid = (batch, kv_heads, num_splits)
    if num_splits == 1:  # the kernel writes the result itself
        targets, strides = (out, out, out), (out.stride(0), out.stride(1), 0, 0, 0)
    else:  # each split writes its part, its row maxima and sums; then they are combined
        shape = (batch, num_heads, num_splits)
        part = torch.empty(*shape, head_dim, dtype=torch.float32, device=query.device)
        maxes = torch.empty(*shape, dtype=torch.float32, device=query.device)
        targets = (part, maxes, torch.empty_like(maxes))
        strides = (*part.stride()[:3], *maxes.stride()[:2])
    _decode_kernel[grid](
        query,
        key_cache,
        value_cache,
        block_tables,
        context_lens,
        *targets,
        query.stride(0),
        query.stride(1),
        block_tables.stride(0),
        *strides,
        block_size,
        kv_heads,
        tokens_per_split,
        scale,
        SPLIT=num_splits > 1,
        **common,
    )
    if num_splits > 1:
        _combine_splits(*targets, out, num_splits)
    return out


def _combine_splits(part, maxes, sums, out, num_splits: int) -> None:
    """The result of split-KV decode attention from its splits' parts, maxima and sums."""
    batch, num_heads, _, head_dim = part.shape
    _combine_splits_kernel[(batch, num_heads)](
        part,
        maxes,
        sums,
        out,
        num_splits,
        *part.stride()[:3],
        *maxes.stride()[:2],
        out.stride(0),
        out.stride(1),
        HEAD_DIM=head_dim,
        BLOCK_S=triton.next_power_of_2(num_splits),
        BLOCK_D=triton.next_power_of_2(head_dim),
    )


# -- paged prefill attention ----------------------------------------------------------------
@triton.jit
def _prefill_kernel(
    q_ptr,
    key_cache_ptr,
    value_cache_ptr,
    tables_ptr,
    qsl_ptr,
    ctx_ptr,
    tile_chunk_ptr,
    tile_offset_ptr,
    out_ptr,
    stride_qt,
    stride_qh,
    stride_tb,
    stride_ot,
    stride_oh,
    block_size,
    kv_heads,
    scale,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IEEE: tl.constexpr,
):
    tile = tl.program_id(0)
    head = tl.program_id(1)
    kv_head = head // GROUP
    chunk = tl.load(tile_chunk_ptr + tile)
    first = tl.load(tile_offset_ptr + tile)
    q_lo = tl.load(qsl_ptr + chunk)
    chunk_len = tl.load(qsl_ptr + chunk + 1) - q_lo
    ctx_start = tl.load(ctx_ptr + chunk)
    rows = first + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    row_mask = rows < chunk_len
    dim_mask = dims < HEAD_DIM
    q_offs = (q_lo + rows)[:, None].to(tl.int64) * stride_qt + head * stride_qh + dims[None, :]
    q = tl.load(q_ptr + q_offs, mask=row_mask[:, None] & dim_mask[None, :], other=0.0)
    if IEEE:
        q = q.to(tl.float32)
    q_pos = ctx_start + rows
    # The last key any row of this tile may see: its last real query's position.
    kv_end = ctx_start + tl.minimum(first + BLOCK_M, chunk_len)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    table_row = tables_ptr + chunk.to(tl.int64) * stride_tb
    for n0 in range(0, kv_end, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        valid = (n[None, :] <= q_pos[:, None]) & (n < kv_end)[None, :]
        m_i, l_i, acc = _attend_tile(
            q,
            m_i,
            l_i,
            acc,
            key_cache_ptr,
            value_cache_ptr,
            table_row,
            kv_head,
            n,
            valid,
            dims,
            dim_mask,
            block_size,
            kv_heads,
            scale,
            HEAD_DIM,
            IEEE,
        )
    out = acc / l_i[:, None]
    o_offs = (q_lo + rows)[:, None].to(tl.int64) * stride_ot + head * stride_oh + dims[None, :]
    out_mask = row_mask[:, None] & dim_mask[None, :]
    tl.store(out_ptr + o_offs, out.to(out_ptr.dtype.element_ty), mask=out_mask)


@functools.lru_cache(maxsize=16)
def _prefill_tiles(
    chunk_lens: tuple[int, ...], block_m: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """(chunk, first query row) of every BLOCK_M tile; cached so the layers of one step
    share one host-to-device copy."""
    tile_chunk, tile_offset = [], []
    for chunk, length in enumerate(chunk_lens):
        for first in range(0, length, block_m):
            tile_chunk.append(chunk)
            tile_offset.append(first)
    as_tensor = functools.partial(torch.tensor, dtype=torch.int32, device=device)
    return as_tensor(tile_chunk), as_tensor(tile_offset)


def paged_prefill_attention(
    query,
    key_cache,
    value_cache,
    block_tables,
    query_start_loc,
    context_starts,
    scale,
    out,
    chunk_lens,
) -> torch.Tensor:
    """See torch_ops.paged_prefill_attention (called through ``ops``, which fills in the
    defaults); ``chunk_lens`` are the chunks' lengths as host ints."""
    tokens, num_heads, head_dim = query.shape
    _, block_size, kv_heads, _ = key_cache.shape
    query = query.contiguous()
    out = torch.empty_like(query) if out is None else out
    block_m = 16 if tokens <= 64 else 64
    tile_chunk, tile_offset = _prefill_tiles(tuple(chunk_lens), block_m, query.device)
    if tile_chunk.numel() == 0:
        return out
    _prefill_kernel[(tile_chunk.numel(), num_heads)](
        query,
        key_cache,
        value_cache,
        block_tables,
        query_start_loc,
        context_starts,
        tile_chunk,
        tile_offset,
        out,
        query.stride(0),
        query.stride(1),
        block_tables.stride(0),
        out.stride(0),
        out.stride(1),
        block_size,
        kv_heads,
        scale,
        GROUP=num_heads // kv_heads,
        HEAD_DIM=head_dim,
        BLOCK_M=block_m,
        BLOCK_D=_pow2(head_dim),
        BLOCK_N=32,
        IEEE=query.dtype == torch.float32,
    )
    return out


# -- copy_blocks ------------------------------------------------------------------------------
@triton.jit
def _copy_blocks_kernel(data_ptr, src_ptr, dst_ptr, plane_numel, block_numel, BLOCK: tl.constexpr):
    move = tl.program_id(0)
    plane = tl.program_id(1).to(tl.int64)
    piece = tl.program_id(2)
    src = tl.load(src_ptr + move).to(tl.int64)
    dst = tl.load(dst_ptr + move).to(tl.int64)
    offs = piece * BLOCK + tl.arange(0, BLOCK)
    mask = offs < block_numel
    base = data_ptr + plane * plane_numel
    vals = tl.load(base + src * block_numel + offs, mask=mask)
    tl.store(base + dst * block_numel + offs, vals, mask=mask)


def copy_blocks(data, src, dst) -> None:
    """See torch_ops.copy_blocks: every move, every layer, K and V, in one launch."""
    layers, two, num_blocks = data.shape[:3]
    block_numel = data[0, 0, 0].numel()
    piece = min(4096, triton.next_power_of_2(block_numel))
    grid = (src.numel(), layers * two, triton.cdiv(block_numel, piece))
    _copy_blocks_kernel[grid](
        data,
        src.contiguous(),
        dst.contiguous(),
        num_blocks * block_numel,
        block_numel,
        BLOCK=piece,
    )
