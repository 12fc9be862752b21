"""How long one GPU kernel takes: the building blocks of the analytic cost model.

Every kernel pays a floor (:attr:`CostParams.kernel_floor_s`: a kernel occupies the GPU
for a few microseconds however little it does) plus the time of its work on the
datasheet's peak FLOP/s and the *sustained* memory bandwidth
(:attr:`~sim.catalog.hardware.HardwareSpec.sustained_bandwidth_fraction` of the datasheet figure,
as a read-bound STREAM kernel measures it), each scaled by how well that kind of kernel
uses them.

* **GEMM** ``(T x K) @ (K x N)``: compute and memory time combined by a smooth roofline,
  ``(t_c**p + t_m**p)**(1/p)`` (``p`` = :attr:`CostParams.roofline_sharpness`), because
  near the ridge point loads and tensor-core math do not overlap perfectly and a GEMM
  takes longer than either bound. Compute time is tile- and wave-quantised: the output
  is cut into ``gemm_tile`` tiles (for a short batch, rows shrink to the next power of
  two of its tokens, at least 16, as cuBLAS picks smaller tiles for skinny GEMMs), each
  SM runs one tile at a time at
  ``gemm_efficiency`` of its share of the peak, so time grows in whole waves of
  ``num_sms`` tiles. With fewer tiles than SMs, split-K spreads the reduction over the
  idle SMs and the whole GPU works on it.
* **Streaming** kernels (weight reads inside GEMVs, KV-cache writes, residual adds, block
  copies) move bytes at ``memory_efficiency`` of the sustained
  bandwidth; **elementwise** kernels with reductions or transcendental math (RMSNorm,
  rotary embedding, SiLU-and-multiply, sampling) at ``elementwise_efficiency``.
* **Prefill attention** (FlashAttention-style, causal): one CTA per (head, 128-query
  tile); a CTA's work is the KV tiles it visits plus a fixed
  ``attention_cta_overhead_tiles`` (load Q, rescale, write O). CTAs share the SMs, but no
  step is shorter than its longest CTA, so a single short prompt cannot use the GPU.
  A KV tile costs ``4 x tile^2 x head_dim`` FLOPs at ``attention_efficiency`` of the SM's
  peak.
* **Decode attention** reads each sequence's KV (``decode_seq_overhead_tokens`` more per
  sequence for its page-table walk, query load and output write) at
  ``decode_attention_efficiency``, after a floor of ``decode_attention_floor_s`` (a
  split-KV kernel plus the kernel merging its partial results).
* **All-reduce** (tensor parallelism): ``2 (tp-1)/tp`` of the message at the bus
  bandwidth nccl-tests measured on the hardware's kind of link, or, for a message vLLM's
  custom kernel takes, the bus bandwidth that kernel was measured at on this card, after
  that link's latency (:mod:`sim.catalog.links`; ``interconnect_efficiency`` and
  ``allreduce_latency_s`` override them); outside a CUDA graph vLLM's custom kernel pays
  its eager floor.

Each constant's source is on its field of :class:`sim.catalog.cost_params.CostParams`. Immutable;
every method is pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from sim.catalog.cost_params import CostParams
from sim.catalog.hardware import HardwareSpec
from sim.catalog.links import (
    EAGER_LATENCY_S,
    busbw_fraction,
    custom_kernel_runs,
    link_bytes_s,
    link_latency_s,
    measured_at,
)


class GpuKernels:
    """Kernel times (seconds) on one GPU of ``hardware`` for ``dtype_bytes`` elements.

    Raises ValueError if the GPU has no FLOP/s figure for that element size."""

    def __init__(self, hardware: HardwareSpec, params: CostParams, dtype_bytes: int):
        self.params = params
        self.dtype_bytes = dtype_bytes
        self.peak_flops = hardware.peak_flops(dtype_bytes)
        self.num_sms = hardware.num_sms
        self._stream_bytes_s = hardware.sustained_bandwidth_bytes_s * params.memory_efficiency
        if (
            hardware.streaming_fraction is not None
            and "memory_efficiency" not in params.model_fields_set
        ):
            self._stream_bytes_s = hardware.mem_bandwidth_bytes_s * hardware.streaming_fraction
        self._decode_bytes_s = (
            hardware.sustained_bandwidth_bytes_s * params.decode_attention_efficiency
        )
        self._elementwise_bytes_s = (
            hardware.sustained_bandwidth_bytes_s * params.elementwise_efficiency
        )
        self._link = hardware.link_kind
        self._custom_allreduce_busbw = hardware.custom_allreduce_busbw
        self._link_bandwidth = link_bytes_s(
            self._link, hardware.interconnect_bytes_s, hardware.host_link_bytes_s
        )
        peak = self.peak_flops
        self._gemm_flops = peak * _measured(params, hardware, "gemm_efficiency")
        self._attention_flops = peak * _measured(params, hardware, "attention_efficiency")
        # The attention kernels run every step: their parameters read once here.
        self._floor_s = params.kernel_floor_s
        self._attention_tile = params.attention_tile
        self._cta_overhead_tiles = params.attention_cta_overhead_tiles
        self._decode_floor_s = params.decode_attention_floor_s
        self._decode_seq_tokens = params.decode_seq_overhead_tokens

    # -- dense ------------------------------------------------------------------------
    def gemm(self, tokens: int, k: int, n: int) -> float:
        """``tokens x k`` activations times a ``k x n`` weight (read once)."""
        if tokens <= 0:
            return 0.0
        compute = self._gemm_compute_s(tokens, k, n)
        memory = (k * n + tokens * (k + n)) * self.dtype_bytes / self._stream_bytes_s
        return self.params.kernel_floor_s + smooth_max(
            compute, memory, self.params.roofline_sharpness
        )

    def _gemm_compute_s(self, tokens: int, k: int, n: int) -> float:
        tile_rows, tile_cols = self.params.gemm_tile
        # Skinny GEMMs run on shorter tiles: the next power of two of the rows, >= 16.
        tile_rows = min(tile_rows, max(16, 1 << (tokens - 1).bit_length()))
        row_tiles = math.ceil(tokens / tile_rows)
        padded_flops = 2 * row_tiles * tile_rows * n * k  # tile quantisation
        tiles = row_tiles * math.ceil(n / tile_cols)
        if self.num_sms is None or tiles < self.num_sms:
            return padded_flops / self._gemm_flops  # split-K keeps every SM busy
        waves = math.ceil(tiles / self.num_sms)
        tile_flops = 2 * tile_rows * tile_cols * k
        return waves * tile_flops * self.num_sms / self._gemm_flops

    def streaming(self, nbytes: float) -> float:
        """A kernel that moves ``nbytes`` at streaming speed (KV write, residual add)."""
        return self.params.kernel_floor_s + nbytes / self._stream_bytes_s

    def elementwise(self, nbytes: float) -> float:
        """A norm, rotary, activation or sampling kernel moving ``nbytes``."""
        return self.params.kernel_floor_s + nbytes / self._elementwise_bytes_s

    def copy_bytes_s(self) -> float:
        """Bytes per second of a device-to-device copy (read and write counted)."""
        return self._stream_bytes_s

    # -- attention ----------------------------------------------------------------------
    def prefill_attention(
        self,
        chunks: Sequence[tuple[int, int]],
        heads: int,
        head_dim: int,
        window: int | None = None,
    ) -> float:
        """Causal attention of prefill ``chunks`` (``(cached, new)`` tokens) over
        ``heads`` query heads of ``head_dim`` (module doc); ``window``: a sliding window
        of that many tokens, so a q-tile visits at most the KV tiles the window spans
        (one more where it straddles a tile edge). 0 for no chunk."""
        if not chunks:
            return 0.0
        tile, overhead, ceil = self._attention_tile, self._cta_overhead_tiles, math.ceil
        work = longest = 0.0
        for cached, new in chunks:
            q_tiles = ceil(new / tile)
            first = ceil(cached / tile)
            # q-tile j visits ceil((cached + (j+1) tile) / tile) = first + j + 1 KV tiles,
            # the last one ceil((cached + new) / tile)
            last = ceil((cached + new) / tile)
            if window is None:
                visits = (q_tiles - 1) * first + (q_tiles - 1) * q_tiles // 2 + last
            else:
                cap = ceil(window / tile) + 1
                last = min(last, cap)
                visits = capped_sum(first + 1, first + q_tiles - 1, cap) + last
            work += visits + overhead * q_tiles
            longest = max(longest, last + overhead)
        tile_flops = 4 * tile * tile * head_dim
        if self.num_sms is None:  # one big processor: only the total work counts
            return self._floor_s + heads * work * tile_flops / self._attention_flops
        tile_on_one_sm_s = tile_flops * self.num_sms / self._attention_flops
        busiest = max(heads * work / self.num_sms, longest)
        return self._floor_s + busiest * tile_on_one_sm_s

    def decode_attention(
        self, num_seqs: int, context_tokens: int, kv_bytes_per_token: int
    ) -> float:
        """``num_seqs`` decodes reading ``context_tokens`` KV tokens in total, each of
        ``kv_bytes_per_token`` (K and V of one layer on this GPU). 0 for no sequence."""
        if num_seqs <= 0:
            return 0.0
        tokens = context_tokens + self._decode_seq_tokens * num_seqs
        return self._decode_floor_s + tokens * kv_bytes_per_token / self._decode_bytes_s

    def decode_attentions(
        self, num_seqs: int, context_tokens: np.ndarray, kv_bytes_per_token: int
    ) -> np.ndarray:
        """:meth:`decode_attention` for each total of ``context_tokens`` (int64), with
        the same operations elementwise (so equal bit for bit)."""
        if num_seqs <= 0:
            return np.zeros(context_tokens.shape[0])
        tokens = context_tokens + self._decode_seq_tokens * num_seqs
        return self._decode_floor_s + tokens * kv_bytes_per_token / self._decode_bytes_s

    # -- communication ------------------------------------------------------------------
    def allreduce(self, nbytes: float, tensor_parallel: int, *, graphed: bool = True) -> float:
        """An all-reduce of ``nbytes`` over ``tensor_parallel`` GPUs (0 for one) on the
        hardware's link (sim.catalog.links); ``graphed`` False: outside a CUDA graph, where
        vLLM's custom kernel pays its eager floor."""
        if tensor_parallel <= 1:
            return 0.0
        params, link = self.params, self._link
        latency = params.allreduce_latency_s
        if latency is None:
            latency = link_latency_s(link, tensor_parallel)
            if not graphed and custom_kernel_runs(link, tensor_parallel, nbytes):
                latency += EAGER_LATENCY_S
        fraction = params.interconnect_efficiency or self._busbw_fraction(nbytes, tensor_parallel)
        ring = 2 * (tensor_parallel - 1) / tensor_parallel * nbytes
        return latency + ring / (self._link_bandwidth * fraction)

    def _busbw_fraction(self, nbytes: float, gpus: int) -> float:
        """The bus bandwidth fraction of an all-reduce of ``nbytes`` over ``gpus`` GPUs:
        the card's measured custom-kernel figure where that kernel takes the message,
        else nccl-tests' figure for the link (sim.catalog.links)."""
        custom = self._custom_allreduce_busbw
        if custom and custom_kernel_runs(self._link, gpus, nbytes):
            return measured_at(custom, gpus)
        return busbw_fraction(self._link, gpus)


def _measured(params: CostParams, hardware: HardwareSpec, field: str) -> float:
    """An efficiency: the scenario's own setting, else the card's measured figure, else
    the default of :class:`CostParams`."""
    measured = getattr(hardware, field)
    if field in params.model_fields_set or measured is None:
        return getattr(params, field)
    return measured


def smooth_max(a: float, b: float, p: float) -> float:
    """``(a**p + b**p)**(1/p)`` for ``a, b >= 0``, scaled so large ``p`` cannot
    underflow (it tends to ``max(a, b)``)."""
    top = max(a, b)
    if top <= 0.0:
        return 0.0
    return top * ((a / top) ** p + (b / top) ** p) ** (1.0 / p)


def capped_sum(low: int, high: int, cap: int) -> int:
    """``sum(min(x, cap) for x in range(low, high + 1))`` (0 when ``high < low``)."""
    if high < low:
        return 0
    if cap >= high:
        return (low + high) * (high - low + 1) // 2
    if cap <= low:
        return cap * (high - low + 1)
    return (low + cap) * (cap - low + 1) // 2 + cap * (high - cap)
