"""Analytic (roofline) step-time model: the default :class:`~sim.types.Executor`.

Notation, all per GPU of a tensor-parallel (TP) group of size ``tp``: ``L`` layers,
``H`` query heads, ``d`` head dim, ``h`` hidden size, ``b`` bytes per element,
``W`` matmul weights of the decoder layers, ``V`` LM-head weights (vocab x h),
``kv = 2 L Hkv d b`` KV bytes per token, ``F = peak FLOP/s x flops_efficiency``,
``B = HBM bytes/s x bandwidth_efficiency``. A step computes ``T`` new tokens for ``S``
sequences: prefill chunks ``(s_i, n_i)`` (``s_i`` tokens already cached, ``n_i`` new) and
decodes with context ``c_j`` (tokens attended to, the new one included).

Three parts, each ``max(compute, memory)``, summed::

    linear     = max( (2 W T + 2 V S) / tp / F,        (W + V) b / tp / B )
    prefill    = max( 4 L H d sum_i(n_i s_i + n_i (n_i+1)/2) / tp / F,
                      kv sum_i(s_i + 2 n_i) / tp / B )      # read context, write chunk
    decode     = max( 4 L H d sum_j c_j / tp / F,  kv sum_j (c_j + 1) / tp / B )
    allreduce  = 2 L [2 (tp-1)/tp  T h b / link + latency]   # ring, after attn and MLP
    moves      = swapped_blocks x block_bytes / host_link + copied_blocks x 2 block_bytes / B
    step       = linear + prefill + decode + allreduce + moves
                 + step_overhead + per_seq_overhead x S

Why this split:

* The linear layers run once on the concatenated tokens of the whole batch, so the
  weights are read once per step however the batch mixes prefill and decode. Attention
  runs per sequence (separate prefill and decode kernels) and is bound by its own
  roofline: prefill attention is compute bound, decode attention reads the KV cache.
* The LM head runs once per sequence (the engine samples from the last position only),
  not once per token. A non-final prefill chunk is charged one too; it is < 0.1 % of a
  chunk's FLOPs.
* Causal attention is charged only for the unmasked half (FlashAttention skips masked
  tiles). Activations' own memory traffic, norms, rotary and sampling are left out:
  they are small next to weights and KV, and part of what the efficiencies absorb.
* KV heads are sharded across TP ranks, but never below one head per rank (vLLM
  replicates KV heads when ``tp > Hkv``), so ``kv`` per GPU is ``max(1, Hkv/tp)`` heads.
* Swaps and copy-on-write copies run before the forward pass and block it (vLLM v0 does
  them synchronously), so they add rather than overlap.

The hot path (:meth:`AnalyticCostModel.execute`) does one numpy sum over the decode
context lengths and O(1) Python per prefill chunk; every constant is folded in
``__init__``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, NamedTuple

import numpy as np
from pydantic import Field

from backend.step import Batch
from sim.hardware import HardwareSpec, ModelSpec
from sim.schema import StrictModel

__all__ = [
    "AnalyticCostModel",
    "CostParams",
    "StepCost",
    "default_activation_reserve_bytes",
    "kv_pool_blocks",
]

Fraction = Annotated[float, Field(gt=0.0, le=1.0)]
Seconds = Annotated[float, Field(ge=0.0)]


class CostParams(StrictModel):
    """Knobs of the analytic model. Defaults describe a tuned engine on a datacenter GPU."""

    #: Fraction of dense peak FLOP/s that large bf16 GEMMs and FlashAttention reach;
    #: 0.6 is typical of cuBLAS/FlashAttention-2 on A100/H100 at serving shapes.
    flops_efficiency: Fraction = 0.6
    #: Fraction of datasheet HBM bandwidth a weight-streaming GEMV or paged-attention
    #: kernel sustains; STREAM-like copies reach ~0.9, whole decode steps ~0.8.
    bandwidth_efficiency: Fraction = 0.8
    #: Fixed CPU cost per step (schedule, build inputs, launch a CUDA graph, sample).
    #: 1 ms closes the gap between the bandwidth-bound ideal of a batch-1 Llama-3-8B decode
    #: on H100 (~6 ms at 0.8 efficiency) and the ~7 ms/token reported by vLLM users.
    step_overhead_s: Seconds = 1e-3
    #: CPU cost per sequence in the batch (block tables, sampling params, detokenise);
    #: about 10 us in a Python engine, so it matters at a batch of hundreds.
    per_seq_overhead_s: Seconds = 1e-5
    #: Start-up latency of one small NCCL/custom all-reduce over NVLink.
    allreduce_latency_s: Seconds = 1e-5


class StepCost(NamedTuple):
    """One step's predicted time split by cause (seconds); ``total_s`` is their sum."""

    linear_s: float
    prefill_attention_s: float
    decode_attention_s: float
    allreduce_s: float
    data_movement_s: float
    overhead_s: float

    @property
    def total_s(self) -> float:
        return sum(self)


class AnalyticCostModel:
    """Predicts step time from the model's shape and the GPU's datasheet (module doc).

    Immutable after construction; ``execute`` and ``predict`` mutate nothing."""

    def __init__(
        self,
        model: ModelSpec,
        hardware: HardwareSpec,
        *,
        tensor_parallel: int = 1,
        params: CostParams | None = None,
        block_size: int = 16,
    ):
        """Raises ValueError if ``tensor_parallel`` cannot split the heads evenly, if
        ``block_size`` is not positive, or if the GPU has no rate for the model's dtype."""
        _check_tensor_parallel(model, tensor_parallel)
        if block_size < 1:
            raise ValueError(f"block_size must be a positive number of tokens, got {block_size}")
        self.model, self.hardware = model, hardware
        self.tensor_parallel, self.block_size = tensor_parallel, block_size
        self.params = params = params or CostParams()
        tp = tensor_parallel
        flops = hardware.peak_flops(model.dtype_bytes) * params.flops_efficiency
        bandwidth = hardware.mem_bandwidth_bytes_s * params.bandwidth_efficiency
        kv_per_token = model.kv_bytes_per_token(tp)
        block_bytes = block_size * kv_per_token
        # seconds per unit of work, per GPU
        self._s_per_linear_token = 2 * model.layer_linear_params / tp / flops
        self._s_per_lm_head_seq = 2 * model.lm_head_params / tp / flops
        self._s_weights = (
            (model.layer_linear_params + model.lm_head_params) * model.dtype_bytes / tp / bandwidth
        )
        heads_per_gpu = model.num_heads // tp
        self._s_per_attention_pair = 4 * model.num_layers * heads_per_gpu * model.head_dim / flops
        self._s_per_kv_token = kv_per_token / bandwidth
        num_allreduces = 2 * model.num_layers if tp > 1 else 0
        ring_bytes_per_token = 2 * (tp - 1) / tp * model.hidden_size * model.dtype_bytes
        self._s_allreduce_per_token = (
            num_allreduces * ring_bytes_per_token / hardware.interconnect_bytes_s
        )
        self._s_allreduce_fixed = num_allreduces * params.allreduce_latency_s
        self._s_per_swapped_block = block_bytes / hardware.host_link_bytes_s
        self._s_per_copied_block = 2 * block_bytes / bandwidth

    def execute(self, batch: Batch) -> float:
        """Predicted seconds for ``batch`` (the Executor seam); an empty batch takes 0."""
        return self.predict(*batch.shape())

    def predict(
        self,
        prefill_chunks: Sequence[tuple[int, int]],
        decode_context_lens: np.ndarray,
        swap_blocks: int = 0,
        copy_blocks: int = 0,
    ) -> float:
        """Predicted seconds for prefill chunks ``(start, num_tokens)`` plus one decode
        token per entry of ``decode_context_lens`` (each counting the new token), plus
        ``swap_blocks`` host<->device and ``copy_blocks`` device copies.

        Raises ValueError for a chunk with a negative start or no tokens. Decode
        lengths are trusted (the engine builds them; checking costs a second pass)."""
        return self.breakdown(
            prefill_chunks, decode_context_lens, swap_blocks=swap_blocks, copy_blocks=copy_blocks
        ).total_s

    def breakdown(
        self,
        prefill_chunks: Sequence[tuple[int, int]],
        decode_context_lens: np.ndarray,
        *,
        swap_blocks: int = 0,
        copy_blocks: int = 0,
    ) -> StepCost:
        """Like :meth:`predict`, split by cause."""
        prefill_tokens = prefill_pairs = prefill_kv = 0
        for start, num_tokens in prefill_chunks:
            if start < 0 or num_tokens < 1:
                raise ValueError(
                    f"prefill chunk needs start >= 0 and num_tokens >= 1, "
                    f"got ({start}, {num_tokens})"
                )
            prefill_tokens += num_tokens
            prefill_pairs += num_tokens * start + num_tokens * (num_tokens + 1) // 2
            prefill_kv += start + 2 * num_tokens  # read the context, write the chunk
        num_decodes = int(decode_context_lens.shape[0])
        decode_context = int(decode_context_lens.sum()) if num_decodes else 0
        num_seqs = len(prefill_chunks) + num_decodes
        data_movement = (
            swap_blocks * self._s_per_swapped_block + copy_blocks * self._s_per_copied_block
        )
        if num_seqs == 0:
            overhead = self.params.step_overhead_s if data_movement else 0.0
            return StepCost(0.0, 0.0, 0.0, 0.0, data_movement, overhead)
        tokens = prefill_tokens + num_decodes
        linear = max(
            tokens * self._s_per_linear_token + num_seqs * self._s_per_lm_head_seq,
            self._s_weights,
        )
        prefill = max(prefill_pairs * self._s_per_attention_pair, prefill_kv * self._s_per_kv_token)
        decode = max(
            decode_context * self._s_per_attention_pair,
            (decode_context + num_decodes) * self._s_per_kv_token,
        )
        allreduce = tokens * self._s_allreduce_per_token + self._s_allreduce_fixed
        overhead = self.params.step_overhead_s + num_seqs * self.params.per_seq_overhead_s
        return StepCost(linear, prefill, decode, allreduce, data_movement, overhead)


def _check_tensor_parallel(model: ModelSpec, tensor_parallel: int) -> None:
    """Raises ValueError unless ``tensor_parallel`` splits query heads evenly and KV heads
    evenly or by replication (the rule vLLM enforces)."""
    tp = tensor_parallel
    if tp < 1:
        raise ValueError(f"tensor_parallel must be >= 1, got {tp}")
    if model.num_heads % tp:
        raise ValueError(
            f"tensor_parallel={tp} must divide num_heads={model.num_heads} of {model.name!r}"
        )
    kv_heads = model.num_kv_heads
    if kv_heads % tp and tp % kv_heads:
        raise ValueError(
            f"tensor_parallel={tp} must divide, or be a multiple of, "
            f"num_kv_heads={kv_heads} of {model.name!r}"
        )


def default_activation_reserve_bytes(
    model: ModelSpec,
    tensor_parallel: int = 1,
    *,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 256,
) -> int:
    """Peak activation memory per GPU of one forward pass at the token budget: one layer's
    live tensors (residual + normed input, q/k/v, MLP up/gate) for every batched token,
    plus fp32 logits for every sequence. vLLM measures this by profiling a dummy step;
    this estimate is within a factor of two of its figure for 7-8B models."""
    tp = tensor_parallel
    qkv = (model.num_heads + 2 * model.num_kv_heads) * model.head_dim // tp
    mlp = (2 if model.mlp == "swiglu" else 1) * model.intermediate_size // tp
    per_token = (2 * model.hidden_size + qkv + mlp) * model.dtype_bytes
    logits = max_num_seqs * model.vocab_size * 4
    return max_num_batched_tokens * per_token + logits


def kv_pool_blocks(
    model: ModelSpec,
    hardware: HardwareSpec,
    tensor_parallel: int = 1,
    block_size: int = 16,
    gpu_memory_utilization: float = 0.9,
    activation_reserve_bytes: int | None = None,
) -> int:
    """Number of KV blocks of ``block_size`` tokens the TP group can hold.

    Per GPU: ``capacity x gpu_memory_utilization - weights / tp - activation reserve``,
    divided by one block's per-GPU shard. Every GPU holds its shard of every block, so
    this is also the group's pool size. The reserve defaults to
    :func:`default_activation_reserve_bytes`; the ``1 - gpu_memory_utilization`` headroom
    covers the CUDA context, allocator fragmentation and CUDA graphs.

    Raises ValueError if the arguments are out of range, if the weights and the reserve
    do not fit, or if no whole block is left."""
    _check_tensor_parallel(model, tensor_parallel)
    if block_size < 1:
        raise ValueError(f"block_size must be a positive number of tokens, got {block_size}")
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    if activation_reserve_bytes is None:
        activation_reserve_bytes = default_activation_reserve_bytes(model, tensor_parallel)
    if activation_reserve_bytes < 0:
        raise ValueError(f"activation_reserve_bytes must be >= 0, got {activation_reserve_bytes}")
    usable = hardware.mem_capacity_bytes * gpu_memory_utilization
    weights = model.weight_bytes / tensor_parallel
    free = usable - weights - activation_reserve_bytes
    block_bytes = block_size * model.kv_bytes_per_token(tensor_parallel)
    if free < block_bytes:
        raise ValueError(
            f"{model.name!r} does not leave room for KV blocks on {tensor_parallel} x "
            f"{hardware.name!r}: {usable / 1e9:.2f} GB usable per GPU, weights "
            f"{weights / 1e9:.2f} GB, activation reserve {activation_reserve_bytes / 1e9:.2f} "
            f"GB, one block {block_bytes / 1e6:.3f} MB; use more GPUs (tensor_parallel), a "
            f"bigger GPU or a higher gpu_memory_utilization"
        )
    return int(free // block_bytes)
