"""Full-size checks on a CUDA device (bench/gpu_check.sh runs them); skipped, visibly,
without one. Llama-3-8b head shapes (32 query heads, 8 KV heads, head_dim 128)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from backend.real import KVCache, ModelShape, ops
from backend.real import reference as ref
from backend.real.model import LlamaModel
from backend.real.reference import ContiguousRunner
from backend.step import Batch
from backend.transfer import CPU, GPU, Transfer

from .harness import PagedHarness
from .helpers import relative_error, scattered_layout

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128


def _decode_case(rng, lens, dtype, num_splits):
    layout = scattered_layout(rng, lens, 16, KV_HEADS, HEAD_DIM, dtype=dtype, device="cuda")
    query = torch.randn(len(lens), HEADS, HEAD_DIM, device="cuda").to(dtype)
    context_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    out = torch.full_like(query, float("nan"))
    ops.paged_decode_attention(
        query,
        layout.key_cache,
        layout.value_cache,
        layout.block_tables,
        context_lens,
        layout.scale,
        use_triton=True,
        num_splits=num_splits,
        out=out,
    )
    expected = ref.reference_decode(
        query.cpu(), layout.key_cache.cpu(), layout.value_cache.cpu(), layout.tables, lens
    )
    return relative_error(out, expected)


@pytest.mark.parametrize("num_splits", [1, 8, None])
def test_decode_float32_full_size(rng, num_splits):
    lens = [4096, 1, 777, 2500]
    assert _decode_case(rng, lens, torch.float32, num_splits) < 1e-5


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_decode_half_precision_full_size(rng, dtype):
    # Inputs are rounded to the half type; the kernel accumulates in float32.
    assert _decode_case(rng, [2048, 300, 33], dtype, None) < 2e-2


def test_prefill_float32_full_size(rng):
    chunk_lens, starts = [256, 1, 97], [0, 1500, 640]
    kv_lens = [s + n for s, n in zip(starts, chunk_lens, strict=True)]
    layout = scattered_layout(rng, kv_lens, 16, KV_HEADS, HEAD_DIM, device="cuda")
    query = torch.randn(sum(chunk_lens), HEADS, HEAD_DIM, device="cuda")
    bounds = torch.tensor([0, 256, 257, 354], dtype=torch.int32, device="cuda")
    out = torch.full_like(query, float("nan"))
    ops.paged_prefill_attention(
        query,
        layout.key_cache,
        layout.value_cache,
        layout.block_tables,
        bounds,
        torch.tensor(starts, dtype=torch.int32, device="cuda"),
        layout.scale,
        use_triton=True,
        out=out,
    )
    expected = ref.reference_prefill(
        query.cpu(),
        layout.key_cache.cpu(),
        layout.value_cache.cpu(),
        layout.tables,
        chunk_lens,
        starts,
    )
    assert relative_error(out, expected) < 1e-5


def test_block_moves_on_device_and_pinned_pool(rng):
    shape = ModelShape(4, 64, HEADS, KV_HEADS, HEAD_DIM, 64, 64, 64)
    cache = KVCache(shape, 32, 16, num_cpu_blocks=8, device="cuda", use_triton=True)
    assert cache.cpu_data.is_pinned()
    cache.data.normal_()
    before = cache.data.clone()
    cache.copy_blocks([Transfer(3, 30), Transfer(4, 31)])
    assert torch.equal(cache.data[:, :, 30], before[:, :, 3])
    cache.transfer([Transfer(30, 0, GPU, CPU), Transfer(7, 5, GPU, CPU)])
    cache.data.zero_()
    cache.transfer([Transfer(0, 1, CPU, GPU), Transfer(5, 2, CPU, GPU)])
    assert torch.equal(cache.data[:, :, 1], before[:, :, 3])
    assert torch.equal(cache.data[:, :, 2], before[:, :, 7])


def test_paged_generation_on_gpu_equals_contiguous(rng):
    shape = ModelShape(4, 512, 8, 2, 64, 1024, 2000, 1024)
    prompts = [rng.integers(0, shape.vocab_size, size=n).tolist() for n in (300, 17, 129)]
    harness = PagedHarness(
        num_blocks=200,
        block_size=16,
        dtype=torch.float32,
        use_triton=True,
        shape=shape,
        device="cuda",
    )
    runner = ContiguousRunner(LlamaModel(shape, dtype=torch.float32, device="cuda"))
    for s, prompt in enumerate(prompts):
        harness.admit(s, prompt)
        first, _ = harness.prefill(s, prompt, chunk=128)
        rest, _ = harness.decode(s, first, 31)
        expected, _ = runner.generate(s, prompt, 32)
        assert [first, *rest] == expected
    # A step with only block moves and no tokens is timed too.
    empty = np.zeros(0, dtype=np.int64)
    seconds = harness.executor.execute(Batch((), empty, empty, empty.astype(np.int32)))
    assert math.isfinite(seconds) and seconds >= 0
