"""Kernels (Triton under the interpreter on tiny shapes, torch paths on larger ones)
against the float64 reference, on fresh random inputs, with poisoned outputs and caches."""

from __future__ import annotations

import pytest
import torch

from backend.real import ops
from backend.real import reference as ref

from .helpers import (
    TRITON_DEVICE,
    needs_triton,
    poisoned_like,
    relative_error,
    scattered_layout,
)

TOLERANCE = 1e-5
BLOCK_SIZES = [1, 8, 16, 32]
GROUPS = [1, 4, 8]


def _ragged_lens(rng, count: int, longest: int) -> list[int]:
    lens = rng.integers(1, longest + 1, size=count).tolist()
    lens[0] = longest  # always include one long context spread over many blocks
    return lens


def _check_decode(rng, lens, block_size, group, kv_heads, head_dim, *, use_triton, **kw):
    device = TRITON_DEVICE if use_triton else "cpu"
    layout = scattered_layout(rng, lens, block_size, kv_heads, head_dim, device=device)
    query = torch.from_numpy(rng.standard_normal((len(lens), kv_heads * group, head_dim)))
    query = query.to(torch.float32).to(device)
    context_lens = torch.tensor(lens, dtype=torch.int32, device=device)
    out = poisoned_like(query)
    ops.paged_decode_attention(
        query,
        layout.key_cache,
        layout.value_cache,
        layout.block_tables,
        context_lens,
        layout.scale,
        use_triton=use_triton,
        out=out,
        **kw,
    )
    expected = ref.reference_decode(
        query, layout.key_cache, layout.value_cache, layout.tables, lens
    )
    assert relative_error(out, expected) < TOLERANCE


def _check_prefill(rng, chunk_lens, starts, block_size, group, kv_heads, head_dim, *, use_triton):
    device = TRITON_DEVICE if use_triton else "cpu"
    kv_lens = [s + n for s, n in zip(starts, chunk_lens, strict=True)]
    layout = scattered_layout(rng, kv_lens, block_size, kv_heads, head_dim, device=device)
    tokens = sum(chunk_lens)
    query = torch.from_numpy(rng.standard_normal((tokens, kv_heads * group, head_dim)))
    query = query.to(torch.float32).to(device)
    bounds = torch.tensor([0, *torch.tensor(chunk_lens).cumsum(0).tolist()], dtype=torch.int32)
    out = poisoned_like(query)
    ops.paged_prefill_attention(
        query,
        layout.key_cache,
        layout.value_cache,
        layout.block_tables,
        bounds.to(device),
        torch.tensor(starts, dtype=torch.int32, device=device),
        layout.scale,
        use_triton=use_triton,
        out=out,
    )
    expected = ref.reference_prefill(
        query, layout.key_cache, layout.value_cache, layout.tables, chunk_lens, starts
    )
    assert relative_error(out, expected) < TOLERANCE


# -- Triton under the interpreter: tiny shapes, one launch per case --------------------------
@needs_triton
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
@pytest.mark.parametrize("group", GROUPS)
def test_triton_decode_matches_reference(rng, block_size, group):
    lens = _ragged_lens(rng, 3, 70)
    _check_decode(rng, lens, block_size, group, 2, 16, use_triton=True, num_splits=1)


@needs_triton
@pytest.mark.parametrize("block_size", [8, 16])
@pytest.mark.parametrize("num_splits", [2, 5])
def test_triton_split_kv_decode_matches_reference(rng, block_size, num_splits):
    # Short sequences beside a long one leave some splits empty; they must weigh nothing.
    lens = _ragged_lens(rng, 3, 150)
    lens[1] = 1
    _check_decode(rng, lens, block_size, 4, 2, 16, use_triton=True, num_splits=num_splits)


@needs_triton
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
@pytest.mark.parametrize("group", GROUPS)
def test_triton_prefill_matches_reference(rng, block_size, group):
    # A fresh prompt, a chunk after a cached prefix, and a one-token chunk.
    chunk_lens = [int(rng.integers(1, 20)), int(rng.integers(1, 20)), 1]
    starts = [0, int(rng.integers(1, 40)), int(rng.integers(1, 40))]
    _check_prefill(rng, chunk_lens, starts, block_size, group, 2, 16, use_triton=True)


# -- torch paths: larger shapes --------------------------------------------------------------
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
@pytest.mark.parametrize("group", GROUPS)
def test_torch_decode_matches_reference(rng, block_size, group):
    lens = _ragged_lens(rng, 6, 400)
    _check_decode(rng, lens, block_size, group, 2, 64, use_triton=False)


@pytest.mark.parametrize("block_size", BLOCK_SIZES)
@pytest.mark.parametrize("group", [1, 4])
def test_torch_prefill_matches_reference(rng, block_size, group):
    chunk_lens = [int(rng.integers(1, 80)) for _ in range(3)]
    starts = [0, int(rng.integers(1, 200)), int(rng.integers(1, 200))]
    _check_prefill(rng, chunk_lens, starts, block_size, group, 2, 32, use_triton=False)


# -- write_kv -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "use_triton", [False, pytest.param(True, marks=needs_triton)], ids=["torch", "triton"]
)
@pytest.mark.parametrize("block_size", [1, 16])
def test_write_kv_scatters_to_slots_and_touches_nothing_else(rng, use_triton, block_size):
    device = TRITON_DEVICE if use_triton else "cpu"
    num_blocks, kv_heads, head_dim = 6, 2, 8
    total = num_blocks * block_size
    slots = rng.choice(total, size=min(total - 1, 10), replace=False)
    mapping = torch.tensor([*slots.tolist(), -1], dtype=torch.int64, device=device)
    key = torch.from_numpy(rng.standard_normal((mapping.numel(), kv_heads, head_dim)))
    key = key.float().to(device)
    value = -key
    caches = [
        torch.full((num_blocks, block_size, kv_heads, head_dim), float("nan"), device=device)
        for _ in range(2)
    ]
    ops.write_kv(key, value, caches[0], caches[1], mapping, use_triton=use_triton)
    for cache, rows in zip(caches, (key, value), strict=True):
        flat = cache.view(total, kv_heads, head_dim).cpu()
        assert torch.equal(flat[torch.from_numpy(slots)], rows[:-1].cpu())
        untouched = torch.ones(total, dtype=torch.bool)
        untouched[torch.from_numpy(slots)] = False
        assert flat[untouched].isnan().all()  # including the -1 (skipped) token


@needs_triton
@pytest.mark.parametrize(
    "dtype",
    [
        pytest.param(
            torch.bfloat16,
            marks=pytest.mark.skipif(
                TRITON_DEVICE == "cpu",
                reason="Triton's interpreter gets bfloat16 tl.dot wrong (checked: plain "
                "16x16 bf16 dot off by 1e10); bf16 is tested on CUDA in test_gpu.py",
            ),
        ),
        torch.float16,
    ],
    ids=["bf16", "fp16"],
)
def test_triton_half_precision_decode(rng, dtype):
    # The GPU path: half-precision tensor-core dots, float32 accumulation. The reference
    # sees the same rounded inputs, so the error is the kernel's own (probabilities
    # rounded to the half type before the PV product).
    device = TRITON_DEVICE
    lens = [40, 3]
    layout = scattered_layout(rng, lens, 16, 2, 16, dtype=dtype, device=device)
    query = torch.from_numpy(rng.standard_normal((2, 8, 16))).to(dtype).to(device)
    context_lens = torch.tensor(lens, dtype=torch.int32, device=device)
    out = ops.paged_decode_attention(
        query,
        layout.key_cache,
        layout.value_cache,
        layout.block_tables,
        context_lens,
        layout.scale,
        use_triton=True,
        num_splits=1,
    )
    expected = ref.reference_decode(
        query, layout.key_cache, layout.value_cache, layout.tables, lens
    )
    assert out.dtype == dtype
    assert relative_error(out, expected) < 2e-2
