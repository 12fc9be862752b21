"""How long one GPU kernel takes: the building blocks of the analytic cost model.

Every kernel pays a floor (:attr:`CostParams.kernel_floor_s`: a kernel occupies the GPU
for a few microseconds however little it does) plus the time of its work on the
datasheet's peak FLOP/s and the *sustained* memory bandwidth
(:attr:`~sim.hardware.HardwareSpec.sustained_bandwidth_fraction` of the datasheet figure,
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
* **All-reduce** (tensor parallelism): a ring moves ``2 (tp-1)/tp`` of the message over
  the interconnect at ``interconnect_efficiency`` after ``allreduce_latency_s``.

Each constant's source is on its field below. Immutable; every method is pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated

from pydantic import Field

from sim.hardware import HardwareSpec
from sim.schema import StrictModel

__all__ = ["CostParams", "GpuKernels"]

Fraction = Annotated[float, Field(gt=0.0, le=1.0)]
Seconds = Annotated[float, Field(ge=0.0)]


class CostParams(StrictModel):
    """Constants of the analytic model, each with its source. The defaults describe a
    tuned engine (vLLM V1-like: cuBLAS GEMMs, FlashAttention prefill, paged decode
    attention) on a datacenter GPU."""

    #: Fraction of an SM's dense tensor peak a GEMM tile's main loop sustains. cuBLAS
    #: reaches 87 % (A100 SXM) and 80 % (H100 SXM) of peak at its best BF16 shape
    #: (stas00/ml-engineering, "Maximum Achievable Matmul FLOPS"); "optimized GEMM can
    #: reach up to 80-90 %" (FlashAttention-2 paper, Dao 2023).
    gemm_efficiency: Fraction = 0.8
    #: Output tile of one CTA, rows x columns: cuBLAS's 128 x 128 class (NVIDIA, "Matrix
    #: Multiplication Background User's Guide", tile and wave quantisation).
    gemm_tile: tuple[Annotated[int, Field(ge=16)], Annotated[int, Field(ge=16)]] = (128, 128)
    #: Exponent of the smooth roofline combining a GEMM's compute and memory time; 3
    #: reproduces the memory-to-compute transition (64-256 tokens) of Vidur's A100 GEMM
    #: profiles and is checked on its H100 and A40 ones (bench/costmodel_vs_profiles.py).
    roofline_sharpness: float = Field(default=3.0, ge=1.0)
    #: Fraction of the sustained read bandwidth that weight-streaming GEMVs, KV reads and
    #: writes and copies reach. Vidur's profiles stream large weight matrices at 1-16
    #: tokens at 0.75-0.78 of the datasheet bandwidth on A100 (0.87-0.91 of its measured
    #: 0.86) and 0.83-0.87 on H100 (0.87-0.92 of its 0.95).
    memory_efficiency: Fraction = 0.89
    #: Fraction of the sustained bandwidth of norm, rotary, activation and sampling
    #: kernels: 0.33-0.6 of the datasheet bandwidth in Vidur's A100 and H100 profiles
    #: at 512+ tokens (RMSNorm lowest, SiLU-and-multiply highest).
    elementwise_efficiency: Fraction = 0.5
    #: Time any kernel occupies the GPU: 2.6-2.7 us per back-to-back small kernel on
    #: A100 and H200 (te42kyfo/gpu-benches, gpu-small-kernels).
    kernel_floor_s: Seconds = 2.5e-6
    #: Fraction of the SM's tensor peak FlashAttention's main loop reaches on long
    #: sequences: FA2 forward "up to 73 %" on A100 (Dao 2023); FA3 causal, head dim
    #: 128, 62 % of H100's peak at 16k tokens (Shah et al. 2024, Fig. 5).
    attention_efficiency: Fraction = 0.6
    #: Query rows (and KV columns) of one attention tile; FA3 uses 128 x 128 tiles for
    #: head dim 128 on Hopper.
    attention_tile: int = Field(default=128, ge=16)
    #: Fixed cost of one attention CTA in KV tiles. FA3's causal head-dim-128 curve
    #: reaches 0.30, 0.43 and 0.53 of peak at 0.5k, 1k and 2k tokens against 0.62 at 16k:
    #: a CTA visiting k tiles on average runs at k / (k + ~2) of its long-sequence speed.
    attention_cta_overhead_tiles: float = Field(default=2.0, ge=0.0)
    #: Fraction of the sustained read bandwidth that paged decode attention reaches on
    #: long contexts: FlashInfer's batch decode uses 88 % of H100's datasheet bandwidth at
    #: 1k tokens (flashinfer.ai blog, 2024-02-02), 0.97 of its 0.95 once the per-sequence
    #: cost below is counted.
    decode_attention_efficiency: Fraction = 0.97
    #: Fixed cost of one decoding sequence in KV tokens read: FlashInfer's batch decode
    #: (batch 64, H100) uses 41 / 64 / 83 / 88 % of the bandwidth at 32 / 128 / 512 /
    #: 1k-token contexts, i.e. each sequence costs like ~45 more tokens.
    decode_seq_overhead_tokens: float = Field(default=45.0, ge=0.0)
    #: Floor of the decode attention in a layer: a split-KV kernel and the kernel merging
    #: its partial results (Vidur's A100 FlashInfer profiles: 10 us for one sequence of
    #: 160 tokens).
    decode_attention_floor_s: Seconds = 10e-6
    #: Fraction of the interconnect's bandwidth a ring all-reduce reaches: nccl-tests
    #: bus bandwidth 232 of 300 GB/s on 8 x A100 and ~370 of 450 on 8 x H100 (NCCL
    #: maintainers, nccl-tests#212).
    interconnect_efficiency: Fraction = 0.8
    #: Start-up latency of one small all-reduce inside a CUDA graph: ~6 us on two H100
    #: (NVIDIA/nccl#1259); vLLM's custom all-reduce is of that order.
    allreduce_latency_s: Seconds = 1e-5
    #: CPU time per step not hidden behind the GPU (schedule, prepare inputs, process
    #: outputs): a vLLM 0.27 engine loop profiled at 541 us per step amortised
    #: (openfabric-systems/simllm#204).
    cpu_step_overhead_s: Seconds = 5e-4
    #: CPU time per sequence in the step: the same study's scheduler cost, 12.7 us per
    #: running request at the cap.
    cpu_per_seq_overhead_s: Seconds = 12e-6


class GpuKernels:
    """Kernel times (seconds) on one GPU of ``hardware`` for ``dtype_bytes`` elements.

    Raises ValueError if the GPU has no FLOP/s figure for that element size."""

    def __init__(self, hardware: HardwareSpec, params: CostParams, dtype_bytes: int):
        self.params = params
        self.dtype_bytes = dtype_bytes
        self.peak_flops = hardware.peak_flops(dtype_bytes)
        self.num_sms = hardware.num_sms
        self._stream_bytes_s = hardware.sustained_bandwidth_bytes_s * params.memory_efficiency
        self._decode_bytes_s = (
            hardware.sustained_bandwidth_bytes_s * params.decode_attention_efficiency
        )
        self._elementwise_bytes_s = (
            hardware.sustained_bandwidth_bytes_s * params.elementwise_efficiency
        )
        self._link_bytes_s = hardware.interconnect_bytes_s * params.interconnect_efficiency
        self._gemm_flops = self.peak_flops * params.gemm_efficiency
        self._attention_flops = self.peak_flops * params.attention_efficiency

    # -- dense ------------------------------------------------------------------------
    def gemm(self, tokens: int, k: int, n: int) -> float:
        """``tokens x k`` activations times a ``k x n`` weight (read once)."""
        if tokens <= 0:
            return 0.0
        compute = self._gemm_compute_s(tokens, k, n)
        memory = (k * n + tokens * (k + n)) * self.dtype_bytes / self._stream_bytes_s
        return self.params.kernel_floor_s + _smooth_max(
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
        self, chunks: Sequence[tuple[int, int]], heads: int, head_dim: int
    ) -> float:
        """Causal attention of prefill ``chunks`` (``(cached, new)`` tokens) over
        ``heads`` query heads of ``head_dim`` (module doc). 0 for no chunk."""
        if not chunks:
            return 0.0
        tile = self.params.attention_tile
        overhead = self.params.attention_cta_overhead_tiles
        work = longest = 0.0
        for cached, new in chunks:
            q_tiles = math.ceil(new / tile)
            first = math.ceil(cached / tile)
            # q-tile j visits ceil((cached + (j+1) tile) / tile) = first + j + 1 KV tiles,
            # the last one ceil((cached + new) / tile)
            last = math.ceil((cached + new) / tile)
            visits = (q_tiles - 1) * first + (q_tiles - 1) * q_tiles // 2 + last
            work += visits + overhead * q_tiles
            longest = max(longest, last + overhead)
        tile_flops = 4 * tile * tile * head_dim
        if self.num_sms is None:  # one big processor: only the total work counts
            return self.params.kernel_floor_s + heads * work * tile_flops / self._attention_flops
        tile_on_one_sm_s = tile_flops * self.num_sms / self._attention_flops
        busiest = max(heads * work / self.num_sms, longest)
        return self.params.kernel_floor_s + busiest * tile_on_one_sm_s

    def decode_attention(
        self, num_seqs: int, context_tokens: int, kv_bytes_per_token: int
    ) -> float:
        """``num_seqs`` decodes reading ``context_tokens`` KV tokens in total, each of
        ``kv_bytes_per_token`` (K and V of one layer on this GPU). 0 for no sequence."""
        if num_seqs <= 0:
            return 0.0
        tokens = context_tokens + self.params.decode_seq_overhead_tokens * num_seqs
        return self.params.decode_attention_floor_s + tokens * kv_bytes_per_token / (
            self._decode_bytes_s
        )

    # -- communication ------------------------------------------------------------------
    def allreduce(self, nbytes: float, tensor_parallel: int) -> float:
        """A ring all-reduce of ``nbytes`` over ``tensor_parallel`` GPUs (0 for one)."""
        if tensor_parallel <= 1:
            return 0.0
        ring = 2 * (tensor_parallel - 1) / tensor_parallel * nbytes
        return self.params.allreduce_latency_s + ring / self._link_bytes_s


def _smooth_max(a: float, b: float, p: float) -> float:
    """``(a**p + b**p)**(1/p)`` for ``a, b >= 0``, scaled so large ``p`` cannot
    underflow (it tends to ``max(a, b)``)."""
    top = max(a, b)
    if top <= 0.0:
        return 0.0
    return top * ((a / top) ** p + (b / top) ** p) ** (1.0 / p)
