"""Analytic step-time model: the default :class:`~sim.engine.executor.Executor`.

A step runs prefill chunks ``(s_i, n_i)`` (``s_i`` tokens already cached, ``n_i`` new) and
decodes with contexts ``c_j`` (tokens attended to, the new one included): ``T`` tokens for
``S`` sequences. Its time is what the GPU does plus what the CPU adds::

    step = L x layer(T) + L x attention + embedding(T) + LM head and sampling(S)
           + block moves + cpu_step_overhead + cpu_per_seq_overhead x S

    layer(T) = GEMMs qkv, o, up(+gate), down                 # tile/wave-quantised
             + 2 RMSNorms + rotary + activation               # elementwise kernels
             + KV write + residual add                        # streaming kernels
             + 2 all-reduces of T x hidden (tensor parallel)
    attention = prefill attention(chunks) + decode attention(S_decode, sum c_j)

with every kernel timed by :class:`sim.costs.kernels.GpuKernels` (module doc there: kernel
floors, the smooth roofline, tile and wave quantisation, FlashAttention's per-CTA cost,
decode attention's per-sequence cost) on one GPU of the tensor-parallel group: weights,
query heads and the MLP are split ``tp`` ways, KV heads too but never below one head per
GPU (vLLM replicates KV heads when ``tp > Hkv``).

Why this split:

* The linear layers run once on the concatenated tokens of the whole batch, so a step
  that mixes prefill and decode reads the weights once. Attention runs per sequence
  (separate prefill and decode kernels) and is bound by its own roofline: prefill
  attention is compute bound, decode attention reads the KV cache.
* The LM head runs once per sequence (the engine samples from the last position only),
  not once per token. A non-final prefill chunk is charged one too; it is < 0.1 % of a
  chunk's FLOPs.
* Block transfers run before the forward pass and block it (vLLM v0 does them
  synchronously), so they add rather than overlap. Each is priced by the link its route
  crosses: a swap crosses the host link once, a device copy streams HBM twice (read and
  write). A route no link here carries (disk, a remote store) is refused by name.
* CPU overhead is its own term (``cpu_s``), apart from GPU time: it is what a faster GPU
  does not shorten, and what engines work hardest to hide. With ``cpu_overlap`` (vLLM's
  async scheduling) ``cpu_s`` is only what the step's GPU time does not cover, so the step
  takes max(GPU, CPU).

``bench/costmodel_vs_profiles.py`` measures the layer time against published per-operator
GPU profiles (Vidur's A100/H100/A40 data). The hot path (:meth:`AnalyticCostModel.execute`)
costs a few dictionary look-ups: the per-layer time of ``T`` tokens and the LM head and
CPU time of ``S`` sequences are computed once per distinct count and kept, and a step's
parts are summed from a plain tuple (no :class:`StepCost` is built for it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from backend.step import Batch
from backend.transfer import NO_MOVES, MovedBlocks, moved_blocks
from sim.catalog.cost_params import CostParams
from sim.catalog.hardware import HardwareSpec, ModelSpec
from sim.catalog.links import (
    CUDA_GRAPH_MAX_TOKENS,
    DEVICE_MEMORY,
    DISK_READ,
    HOST_LINK,
    LINKS,
    NETWORK_READ,
    NIC_BYTES_S,
    NVME_READ_BYTES_S,
    READ_LATENCY_S,
    blocks_per_link,
)
from sim.catalog.pool import check_tensor_parallel
from sim.costs.kernels import GpuKernels
from sim.costs.mla import attention_head_dim, mla_ops
from sim.costs.moe import MOE_LAYER_GEMMS, MoELayer
from sim.costs.windows import WindowedAttention

# ndarray.sum without its Python-level wrapper (the same integer sum); one call a step.
_sum = np.add.reduce

#: The per-layer kernels of :meth:`AnalyticCostModel.layer_ops`, in execution order,
#: named as Vidur's profiles name them (``kv_cache_save`` and ``all_reduce`` apart).
LAYER_OPS = (
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "kv_cache_save",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
    "all_reduce",
)


# A tuple, not a set: summed in a fixed order, the floats come out the same whatever the
# process's string-hash seed (a set's order is not, and neither is the last bit of a sum).
_GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")


class StepCost(NamedTuple):
    """One step's predicted time split by cause (seconds); ``total_s`` is their sum."""

    linear_s: float  # the layers' GEMMs
    elementwise_s: float  # norms, rotary, activation, residual adds, KV writes, embedding
    prefill_attention_s: float
    decode_attention_s: float
    lm_head_s: float  # LM head GEMM and sampling
    allreduce_s: float
    data_movement_s: float
    cpu_s: float

    @property
    def total_s(self) -> float:
        return sum(self)

    @property
    def gpu_s(self) -> float:
        return self.total_s - self.cpu_s


class AnalyticCostModel:
    """Predicts step time from the model's shape and the GPU's datasheet (module doc).

    Immutable but for its caches; ``execute`` and ``predict`` mutate nothing else."""

    reads_token_ids = False  # a step's time depends on its shape, not on the tokens

    def __init__(
        self,
        model: ModelSpec,
        hardware: HardwareSpec,
        *,
        tensor_parallel: int = 1,
        params: CostParams | None = None,
        block_size: int = 16,
        expert_parallel: bool = False,
        kv_element_bytes: int | None = None,
        blocks_per_unit: float = 1.0,
    ):
        """Raises ValueError if ``tensor_parallel`` cannot split the heads (or the
        experts) evenly, if ``block_size`` is not positive, or if the GPU has no rate for
        the model's dtype. ``blocks_per_unit``: blocks one unit of a Transfer fills (1 for
        an allocator of blocks, 1 / block size for one of token-slot regions), so a move
        is priced by the bytes it carries."""
        check_tensor_parallel(model, tensor_parallel, expert_parallel)
        if block_size < 1:
            raise ValueError(f"block_size must be a positive number of tokens, got {block_size}")
        self.model, self.hardware = model, hardware
        self.tensor_parallel, self.block_size = tensor_parallel, block_size
        self.blocks_per_unit = blocks_per_unit
        self.params = params = params or CostParams()
        self.kernels = GpuKernels(hardware, params, model.dtype_bytes)
        self.moe = (
            None
            if model.moe is None
            else MoELayer(
                model,
                hardware,
                self.kernels,
                params,
                tensor_parallel=tensor_parallel,
                expert_parallel=expert_parallel,
            )
        )
        tp = tensor_parallel
        self._heads = model.num_heads // tp
        self._kv_heads = max(1, model.num_kv_heads // tp)
        self._attention_head_dim = attention_head_dim(model)
        self._mlp = model.intermediate_size // tp
        # KV in its own element type (cache.kv_dtype): writes, decode reads, swaps.
        kv_token = model.kv_bytes_per_token(tp, kv_element_bytes)
        self._kv_bytes_per_layer_token = kv_token // model.num_layers
        block_bytes = model.kv_block_bytes(block_size, tp, kv_element_bytes)
        # Sliding-window layers read at most their window (sim/costs/windows.py).
        self._windows = WindowedAttention.of(
            model,
            self.kernels,
            self._heads,
            self._attention_head_dim,
            self._kv_bytes_per_layer_token,
        )
        # Seconds one block takes on each link a transfer's route crosses (ROUTE_LINKS).
        self._s_per_block_on = {
            HOST_LINK: block_bytes / hardware.host_link_bytes_s,
            DEVICE_MEMORY: 2 * block_bytes / self.kernels.copy_bytes_s(),
            # a disk tier holds the whole replica's block: tp ranks read one disk
            DISK_READ: tp * block_bytes / NVME_READ_BYTES_S,
            NETWORK_READ: block_bytes / (NIC_BYTES_S * LINKS["network"].busbw_fraction_2),
        }
        # Scalars every step reads, looked up once (the parameters are frozen).
        self._layers = model.num_layers
        self._cpu_step_s = params.cpu_step_overhead_s
        self._cpu_per_seq_s = params.cpu_per_seq_overhead_s
        self._cpu_overlap = params.cpu_overlap
        # Per-count parts, kept: a step's dense layers depend only on its token count,
        # its LM head and CPU time only on its sequence count (and the model, fixed).
        self._dense: dict[int, tuple[float, float, float]] = {}
        self._per_seqs: dict[int, tuple[float, float]] = {}

    # -- per layer ----------------------------------------------------------------------
    def layer_ops(self, tokens: int) -> dict[str, float]:
        """Seconds of each kernel of one decoder layer for ``tokens`` tokens (LAYER_OPS
        order; attention itself is :meth:`attention_layer`)."""
        m, k, b = self.model, self.kernels, self.model.dtype_bytes
        h, d, t = m.hidden_size, m.head_dim, tokens
        up_cols = (2 if m.mlp == "swiglu" else 1) * self._mlp
        act_bytes = (3 if m.mlp == "swiglu" else 2) * t * self._mlp * b
        norm = k.elementwise(2 * t * h * b)
        ops = {
            "input_layernorm": norm,
            "attn_pre_proj": k.gemm(t, h, (self._heads + 2 * self._kv_heads) * d),
            "attn_rope": k.elementwise(2 * t * (self._heads + self._kv_heads) * d * b),
            "kv_cache_save": k.streaming(t * self._kv_bytes_per_layer_token),
            "attn_post_proj": k.gemm(t, self._heads * d, h),
            "post_attention_layernorm": norm,
            "mlp_up_proj": k.gemm(t, h, up_cols),
            "mlp_act": k.elementwise(act_bytes),
            "mlp_down_proj": k.gemm(t, self._mlp, h),
            "add": k.streaming(3 * t * h * b),
            "all_reduce": 2
            * k.allreduce(t * h * b, self.tensor_parallel, graphed=t <= CUDA_GRAPH_MAX_TOKENS),
        }
        if m.mla is not None:  # latent attention's own projections (sim/costs/mla.py)
            ops.update(mla_ops(m, k, self.tensor_parallel, t))
        return ops

    def attention_layer(
        self, prefill_chunks: Sequence[tuple[int, int]], num_decodes: int, decode_context: int
    ) -> tuple[float, float]:
        """(prefill, decode) attention seconds of one layer: ``prefill_chunks`` as
        ``(cached, new)`` and ``num_decodes`` decodes reading ``decode_context`` tokens."""
        head_dim = self._attention_head_dim
        prefill = self.kernels.prefill_attention(prefill_chunks, self._heads, head_dim)
        decode = self.kernels.decode_attention(
            num_decodes, decode_context, self._kv_bytes_per_layer_token
        )
        return prefill, decode

    # -- per step -----------------------------------------------------------------------
    def execute(self, batch: Batch) -> float:
        """Predicted seconds for ``batch`` (the Executor seam); an empty batch takes 0.

        ``predict(*batch.shape())`` bit for bit, read straight from the batch: it is
        called once a simulated step, so no BatchShape or StepCost is built on the way."""
        lens, prefills = batch.decode_context_lens, batch.prefills
        num_decodes = len(lens)
        chunks = [(chunk.start, len(chunk.token_ids)) for chunk in prefills] if prefills else ()
        parts = self._parts(
            chunks,
            num_decodes,
            int(_sum(lens)) if num_decodes else 0,
            moved_blocks(batch.transfers, self.blocks_per_unit) if batch.transfers else NO_MOVES,
            lens,
        )
        return sum(parts)  # as StepCost.total_s sums them

    def predict(
        self,
        prefill_chunks: Sequence[tuple[int, int]],
        decode_context_lens: np.ndarray,
        moved: MovedBlocks = NO_MOVES,
    ) -> float:
        """Predicted seconds for prefill chunks ``(start, num_tokens)`` plus one decode
        token per entry of ``decode_context_lens`` (each counting the new token), plus
        the blocks ``moved`` per route.

        Raises ValueError for a chunk with a negative start or no tokens, or for a route
        no link here carries. Decode lengths are trusted (the engine builds them;
        checking costs a second pass)."""
        return sum(self._parts_of(prefill_chunks, decode_context_lens, moved))

    def decode_steps(self, context_lens: np.ndarray, steps: int) -> np.ndarray:
        """Seconds of ``steps`` decode-only steps of one batch (a decode stretch) whose
        context lengths (new token included) are ``context_lens`` at the first step and
        grow by one a step: element i is ``predict([], context_lens + i)`` bit for bit
        (the same IEEE operations in the same order, elementwise)."""
        num = int(context_lens.shape[0])
        context = int(context_lens.sum()) if num else 0
        first = self._parts((), num, context, NO_MOVES)  # the parts that do not change
        contexts = context + num * np.arange(steps, dtype=np.int64)
        if self._windows is not None:
            decode = self._windows.decode_steps(context_lens, contexts, steps)
        else:
            decode = self._layers * self.kernels.decode_attentions(
                num, contexts, self._kv_bytes_per_layer_token
            )
        linear, elementwise, prefill, _, *tail = first  # tail: LM head to CPU
        total = 0 + linear + elementwise + prefill + decode
        if self._cpu_overlap:  # _parts' hidden-CPU rule, elementwise
            for part in tail[:-1]:
                total = total + part
            cpu = self._per_seq_s(num)[1] if num else 0.0
            return total + np.maximum(cpu - total, 0.0)
        for part in tail:  # StepCost.total_s sums its fields left to right
            total = total + part
        return total

    def breakdown(
        self,
        prefill_chunks: Sequence[tuple[int, int]],
        decode_context_lens: np.ndarray,
        *,
        moved: MovedBlocks = NO_MOVES,
    ) -> StepCost:
        """Like :meth:`predict`, split by cause."""
        return StepCost._make(self._parts_of(prefill_chunks, decode_context_lens, moved))

    def _parts_of(
        self,
        prefill_chunks: Sequence[tuple[int, int]],
        decode_context_lens: np.ndarray,
        moved: MovedBlocks,
    ) -> tuple[float, ...]:
        """:meth:`_parts` of a step given as :meth:`predict` takes it."""
        num_decodes = int(decode_context_lens.shape[0])
        decode_context = int(decode_context_lens.sum()) if num_decodes else 0
        lens = decode_context_lens
        return self._parts(prefill_chunks, num_decodes, decode_context, moved, lens)

    def _transfers_s(self, moved: MovedBlocks) -> float:
        """Seconds the blocks ``moved`` take, summed per link first (host link, device
        memory, disk and network reads, each read link's latency once). Raises ValueError
        for a route no link carries."""
        blocks = blocks_per_link(moved)
        seconds = sum([count * self._s_per_block_on[link] for link, count in blocks.items()])
        return seconds + sum([s for link, s in READ_LATENCY_S.items() if blocks[link]])

    def _parts(
        self,
        prefill_chunks: Sequence[tuple[int, int]],
        num_decodes: int,
        decode_context: int,
        moved: MovedBlocks,
        lens: np.ndarray | None = None,
    ) -> tuple[float, ...]:
        """A step's :class:`StepCost` fields, in order, as a plain tuple (the one place
        they are computed: breakdown, predict and execute all read them from here).
        ``decode_context`` is the decodes' context lengths summed; ``lens`` each of them
        (what a sliding-window layer reads depends on each; only windowed models)."""
        prefill_tokens = 0
        for start, num_tokens in prefill_chunks:
            if start < 0 or num_tokens < 1:
                raise ValueError(
                    f"prefill chunk needs start >= 0 and num_tokens >= 1, "
                    f"got ({start}, {num_tokens})"
                )
            prefill_tokens += num_tokens
        num_seqs = len(prefill_chunks) + num_decodes
        data_movement = self._transfers_s(moved) if moved else 0.0
        if num_seqs == 0:
            cpu = self._cpu_step_s if data_movement else 0.0
            return (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, data_movement, cpu)
        layers = self._layers
        tokens = prefill_tokens + num_decodes
        linear, elementwise, allreduce = self._dense.get(tokens) or self._dense_s(tokens)
        lm_head, cpu = self._per_seqs.get(num_seqs) or self._per_seq_s(num_seqs)
        if self._windows is not None:
            prefill, decode = self._windows.attention(prefill_chunks, num_decodes, lens)
        else:
            kernels = self.kernels
            prefill = layers * (
                kernels.prefill_attention(prefill_chunks, self._heads, self._attention_head_dim)
                if prefill_chunks
                else 0.0  # what prefill_attention returns for no chunk
            )
            decode = layers * kernels.decode_attention(
                num_decodes, decode_context, self._kv_bytes_per_layer_token
            )
        parts = (
            linear,
            elementwise,
            prefill,
            decode,
            lm_head,
            allreduce,
            data_movement,
        )
        if self._cpu_overlap:  # only the CPU time the GPU's time does not cover
            cpu = max(cpu - sum(parts), 0.0)
        return (*parts, cpu)

    def _dense_s(self, tokens: int) -> tuple[float, float, float]:
        """(GEMMs, elementwise, all-reduce) seconds of all layers plus the embedding for
        ``tokens`` tokens; computed once per token count."""
        cached = self._dense.get(tokens)
        if cached is None:
            m, ops = self.model, self.layer_ops(tokens)
            # (count, kernels, GEMMs) of each kind of layer: dense; with experts
            kinds = [(m.dense_mlp_layers, ops, _GEMMS)]
            if self.moe is not None:
                experts = self.moe.layer_ops(ops, tokens)
                kinds.append((m.num_layers - m.dense_mlp_layers, experts, MOE_LAYER_GEMMS))
            linear = sum(n * sum(kind[name] for name in gemms) for n, kind, gemms in kinds)
            allreduce = m.num_layers * ops["all_reduce"]
            elementwise = sum(n * sum(kind.values()) for n, kind, _ in kinds) - linear - allreduce
            embedding = self.kernels.streaming(2 * tokens * m.hidden_size)
            cached = self._dense[tokens] = (linear, elementwise + embedding, allreduce)
        return cached

    def _per_seq_s(self, num_seqs: int) -> tuple[float, float]:
        """(LM head, CPU) seconds of a step of ``num_seqs`` sequences; computed once per
        count. The LM head: final norm, LM head and sampling (one position a sequence).
        Each GPU holds ``vocab / tp`` columns and samples from fp32 logits (read twice:
        softmax, then top-k/top-p)."""
        cached = self._per_seqs.get(num_seqs)
        if cached is None:
            m, k = self.model, self.kernels
            vocab = m.vocab_size // self.tensor_parallel
            logits_bytes = 4 * num_seqs * vocab
            lm_head = (
                k.elementwise(2 * num_seqs * m.hidden_size * m.dtype_bytes)
                + k.gemm(num_seqs, m.hidden_size, vocab)
                + k.elementwise(2 * logits_bytes)
            )
            cpu = self._cpu_step_s + num_seqs * self._cpu_per_seq_s
            cached = self._per_seqs[num_seqs] = (lm_head, cpu)
        return cached
