"""Dispatch of the paged KV operations to the Triton kernels or the torch fallbacks.

Triton is optional: it is imported on first use of a Triton path, so the torch paths
work on machines without it. On CPU tensors Triton kernels only run under
``TRITON_INTERPRET=1`` (the test suite sets it).
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Sequence
from types import ModuleType

import torch

from backend.real import torch_ops


@functools.cache
def triton_available() -> bool:
    """Whether ``triton`` imports on this machine."""
    try:
        importlib.import_module("triton")
    except ImportError:
        return False
    return True


def triton_usable(device: torch.device | str) -> bool:
    """Whether Triton kernels can run on tensors of ``device`` (CUDA, or the CPU under
    the interpreter)."""
    if not triton_available():
        return False
    if torch.device(device).type == "cuda":
        return True
    return os.environ.get("TRITON_INTERPRET") == "1"


def _impl(use_triton: bool) -> ModuleType:
    if not use_triton:
        return torch_ops
    if not triton_available():
        raise RuntimeError("use_triton=True but triton is not installed")
    return importlib.import_module("backend.real.triton_ops")


def write_kv(key, value, key_cache, value_cache, slot_mapping, *, use_triton=False) -> None:
    """Scatter K/V rows into their slots (slot -1 skipped). Mutates the caches."""
    _impl(use_triton).write_kv(key, value, key_cache, value_cache, slot_mapping)


def paged_decode_attention(
    query,
    key_cache,
    value_cache,
    block_tables,
    context_lens,
    scale,
    *,
    num_splits: int | None = None,
    use_triton=False,
    out: torch.Tensor | None = None,
    max_context_len: int | None = None,
) -> torch.Tensor:
    """Decode attention through block tables; ``num_splits`` (Triton only) picks split-KV,
    None lets a heuristic choose. ``max_context_len``, when the caller knows it, saves a
    device-to-host sync. Writes into ``out`` when given; no other mutation."""
    if not use_triton:
        result = torch_ops.paged_decode_attention(
            query, key_cache, value_cache, block_tables, context_lens, scale
        )
        return result if out is None else out.copy_(result)
    if max_context_len is None:
        max_context_len = int(context_lens.max())
    if num_splits is None:
        programs = query.shape[0] * key_cache.shape[2]
        num_splits = choose_num_splits(programs, max_context_len, query.device)
    return _impl(True).paged_decode_attention(
        query,
        key_cache,
        value_cache,
        block_tables,
        context_lens,
        scale,
        num_splits,
        out,
        max_context_len,
    )


def choose_num_splits(programs: int, max_len: int, device: torch.device) -> int:
    """Split-KV only pays when (sequences x KV heads) leaves SMs idle and contexts are long:
    aim for about two waves of programs, each split covering at least 512 tokens."""
    if torch.device(device).type != "cuda":
        return 1
    sms = _multiprocessors(torch.device(device))
    if programs >= sms or max_len < 1024:
        return 1
    return max(1, min(-(-2 * sms // programs), max_len // 512, 64))


@functools.cache
def _multiprocessors(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def paged_prefill_attention(
    query,
    key_cache,
    value_cache,
    block_tables,
    query_start_loc,
    context_starts,
    scale,
    *,
    use_triton=False,
    out: torch.Tensor | None = None,
    chunk_lens: Sequence[int] | None = None,
) -> torch.Tensor:
    """Chunked-prefill attention through block tables (the chunk's own K/V must already be
    written). ``chunk_lens``, when the caller knows them, saves a device-to-host sync.
    Writes into ``out`` when given; no other mutation."""
    if not use_triton:
        result = torch_ops.paged_prefill_attention(
            query, key_cache, value_cache, block_tables, query_start_loc, context_starts, scale
        )
        return result if out is None else out.copy_(result)
    if chunk_lens is None:
        chunk_lens = query_start_loc.diff().tolist()
    return _impl(True).paged_prefill_attention(
        query,
        key_cache,
        value_cache,
        block_tables,
        query_start_loc,
        context_starts,
        scale,
        out,
        tuple(chunk_lens),
    )


def copy_blocks(data, src, dst, *, use_triton=False) -> None:
    """Copy blocks src[i] -> dst[i] over all layers and K/V. Mutates the dst blocks."""
    _impl(use_triton).copy_blocks(data, src, dst)
