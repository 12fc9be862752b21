"""What a mixture-of-experts layer's MLP part costs on one GPU (``ModelSpec.moe``).

vLLM runs an MoE layer as: the router GEMM (``hidden x experts``, replicated on every
GPU) and a top-k softmax; ``moe_align_block_size``, which sorts the step's (token,
expert) pairs by expert and pads each expert's rows to the kernel's ``BLOCK_SIZE_M``;
the fused gate-up GEMM over every expert at once; SiLU-and-multiply; the fused down
GEMM; the weighted sum of each token's top-k outputs; and the shared experts as a dense
MLP. Tensor parallelism splits every expert's width ``tp`` ways; with
``expert_parallel`` (vLLM's ``--enable-expert-parallel`` without data-parallel
attention) each GPU keeps ``experts / tp`` whole experts and runs them on every token
routed there. Either way the layer ends in the same all-reduce as a dense MLP.

What the model charges (uniform routing: each token picks ``k`` distinct experts at
random, so an expert receives ``n ~ Binomial(T, k / E)`` of the step's ``T`` tokens):

* **Weights read**: only the experts some token touched, ``E (1 - (1 - k/E)^T)`` of
  them (:func:`sim.catalog.moe.expected_touched`): ``k`` at one token, all of them in a
  large batch. This is why a decode step of a sparse model reads far less than its
  weights, and why it grows quickly with the batch.
* **Compute**: the padded rows, ``E x BLOCK_SIZE_M x E[ceil(n / BLOCK_SIZE_M)]``: an
  expert with 3 tokens computes a whole 16-row tile. ``BLOCK_SIZE_M`` follows vLLM's
  default fused-MoE config (:func:`block_m`).
* **Expert parallelism**: the layer waits for the busiest GPU, whose routed rows are
  uniform routing's expected largest share (:meth:`MoELayer.busiest_rank_load`) plus
  ``moe_rank_imbalance`` for routing skew (default 0: uniform; TensorRT-LLM measured
  DeepSeek-R1's busiest of 32 ranks at 2.56x the mean, i.e. 1.56, in decode without
  load balancing). Skew between experts on one GPU is not modelled: the fused kernel's
  time follows its total padded rows, which skew changes little.
* The grouped GEMMs run at ``moe_gemm_efficiency`` of the peak and stream weights at
  ``moe_memory_efficiency`` of the sustained bandwidth (their sources are on
  :class:`sim.catalog.cost_params.CostParams`); the other kernels are the dense ones.
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist

import numpy as np

from sim.catalog.cost_params import MOE_GEMM_EFFICIENCY, MOE_MEMORY_EFFICIENCY, CostParams
from sim.catalog.hardware import HardwareSpec, ModelSpec
from sim.catalog.moe import expected_touched
from sim.costs.kernels import GpuKernels, smooth_max

#: The MoE layer's kernels, in execution order (they replace mlp_up_proj, mlp_act and
#: mlp_down_proj in a MoE layer).
MOE_OPS = (
    "moe_router",
    "moe_topk",
    "moe_align",
    "moe_gate_up",
    "moe_act",
    "moe_down",
    "moe_sum",
    "moe_shared",
)
#: The GEMMs of a whole MoE layer, attention's included (the analytic model's
#: ``linear_s``).
MOE_LAYER_GEMMS = (
    "attn_pre_proj",
    "attn_post_proj",
    "moe_router",
    "moe_gate_up",
    "moe_down",
    "moe_shared",
)
#: A dense layer's MLP kernels, which the experts replace.
_DENSE_MLP = ("mlp_up_proj", "mlp_act", "mlp_down_proj")


def block_m(tokens: int) -> int:
    """The fused-MoE kernel's ``BLOCK_SIZE_M`` for a step of ``tokens`` tokens: vLLM's
    default bf16 config (``fused_moe.get_default_config``, 0.33): 16 up to 32 tokens, 32
    up to 96, 64 up to 512, then 128. The tuned H100 table for 128 experts (``E=128,
    N=384``) keeps 16 to 128 tokens, then 32, 64 at 512-1024 and 128 from 1536."""
    if tokens <= 32:
        return 16
    if tokens <= 96:
        return 32
    if tokens <= 512:
        return 64
    return 128


@lru_cache(maxsize=4096)
def expected_tiles(tokens: int, share: float, rows: int) -> float:
    """``E[ceil(n / rows)]`` for ``n ~ Binomial(tokens, share)``: the row tiles one
    expert computes. Exact over the binomial's mass within 12 standard deviations (the
    tail past them is below 1e-30).

    The same bits on every machine: the mode's probability comes from scalar ``math``
    calls, the others from it by products of ratios (IEEE-rounded, in order), and the
    sum is ``math.fsum``. Vectorised ``exp``/``log`` and a BLAS dot product dispatch on
    the CPU (AVX2 or AVX-512) and differed in the last bits between machines."""
    if tokens <= 0 or share <= 0.0:
        return 0.0
    if share >= 1.0:
        return float(math.ceil(tokens / rows))
    mean, sd = tokens * share, math.sqrt(tokens * share * (1.0 - share))
    low = max(0, int(mean - 12.0 * sd - 16.0))
    high = min(tokens, int(mean + 12.0 * sd + 16.0))
    mode = min(tokens, int((tokens + 1) * share))
    odds = share / (1.0 - share)
    log_mode = (
        math.lgamma(tokens + 1)
        - math.lgamma(mode + 1)
        - math.lgamma(tokens - mode + 1)
        + mode * math.log(share)
        + (tokens - mode) * math.log1p(-share)
    )
    p_mode = math.exp(log_mode)
    up = np.arange(mode + 1, high + 1, dtype=np.float64)
    p_up = p_mode * np.cumprod((tokens - up + 1.0) / up * odds)  # P(n) / P(n - 1)
    down = np.arange(mode - 1, low - 1, -1, dtype=np.float64)
    p_down = p_mode * np.cumprod((down + 1.0) / ((tokens - down) * odds))  # P(n) / P(n + 1)
    n = np.concatenate((down, [float(mode)], up))
    pmf = np.concatenate((p_down, [p_mode], p_up))
    return math.fsum((pmf * np.ceil(n / rows)).tolist())


class MoELayer:
    """Kernel times of one MoE layer's MLP part on one GPU (module doc). Immutable."""

    def __init__(
        self,
        model: ModelSpec,
        hardware: HardwareSpec,
        kernels: GpuKernels,
        params: CostParams,
        *,
        tensor_parallel: int,
        expert_parallel: bool,
    ):
        moe = model.moe
        assert moe is not None
        tp = tensor_parallel
        self.kernels, self.hidden, self.bytes = kernels, model.hidden_size, model.dtype_bytes
        # an expert's weights are read as stored (MXFP4: 4.25 bits), its rows in the dtype
        bits = moe.expert_weight_bits
        self.weight_scale = 1 if bits is None else bits / 8 / self.bytes
        self.experts, self.top_k = moe.num_experts, moe.experts_per_token
        # Experts on this GPU, each ``width`` wide; the share of routed rows it runs.
        self.local_experts = moe.num_experts // tp if expert_parallel else moe.num_experts
        self.width = (
            moe.expert_intermediate_size
            if expert_parallel
            else (moe.expert_intermediate_size // tp)
        )
        self.row_share = 1.0 / tp if expert_parallel else 1.0
        self.ranks = tp if expert_parallel else 1
        self.skew = params.moe_rank_imbalance or 0.0
        self.shared = moe.shared_intermediate_size // tp
        peak = hardware.peak_flops(model.dtype_bytes)
        gemm = params.moe_gemm_efficiency or MOE_GEMM_EFFICIENCY
        memory = params.moe_memory_efficiency or MOE_MEMORY_EFFICIENCY
        self._flops = peak * gemm
        self._bytes_s = hardware.sustained_bandwidth_bytes_s * memory
        self._floor, self._p = params.kernel_floor_s, params.roofline_sharpness

    def layer_ops(self, dense_ops: dict[str, float], tokens: int) -> dict[str, float]:
        """A whole MoE layer's kernels: a dense layer's (``dense_ops``, the analytic
        model's ``layer_ops``) with the experts in place of its MLP."""
        kept = {name: s for name, s in dense_ops.items() if name not in _DENSE_MLP}
        return {**kept, **self.ops(tokens)}

    def ops(self, tokens: int) -> dict[str, float]:
        """Seconds of each MoE kernel (MOE_OPS order) for a step of ``tokens`` tokens."""
        k, h, b, t = self.kernels, self.hidden, self.bytes, tokens
        rows = t * self.top_k * self.row_share  # routed (token, expert) rows on this GPU
        share = self.top_k / self.experts
        touched = (
            self.local_experts * expected_touched(self.experts, self.top_k, t) / (self.experts)
        )
        tile = block_m(t)
        padded = self.local_experts * tile * expected_tiles(t, share, tile)
        busiest = self.busiest_rank_load(t)  # the layer waits for the busiest GPU
        rows, padded = rows * busiest, padded * busiest
        w = self.width
        ops = {
            "moe_router": k.gemm(t, h, self.experts),
            "moe_topk": k.elementwise(2 * t * self.experts * 4),
            "moe_align": self._floor,
            "moe_gate_up": self._grouped(padded, rows, touched, h, 2 * w),
            "moe_act": k.elementwise(3 * rows * w * b),
            "moe_down": self._grouped(padded, rows, touched, w, h),
            "moe_sum": k.elementwise((rows + t) * h * b),
            "moe_shared": 0.0,
        }
        if self.shared:
            ops["moe_shared"] = (
                k.gemm(t, h, 2 * self.shared)
                + k.elementwise(3 * t * self.shared * b)
                + k.gemm(t, self.shared, h)
            )
        return ops

    def busiest_rank_load(self, tokens: int) -> float:
        """The busiest GPU's routed rows over the mean under expert parallelism: uniform
        routing's own spread (a rank's rows are a sum of hypergeometric draws; the
        expected largest of ``ranks`` of them, normal approximation, Blom's plotting
        position) plus ``moe_rank_imbalance`` for routing skew. 1 without EP."""
        if self.ranks == 1 or tokens <= 0:
            return 1.0
        ranks, experts, k = self.ranks, self.experts, self.top_k
        mean = tokens * k / ranks
        finite = (experts - k) / (experts - 1) if experts > 1 else 0.0
        sd = math.sqrt(tokens * k * (1 / ranks) * (1 - 1 / ranks) * finite)
        largest = NormalDist().inv_cdf((ranks - 0.375) / (ranks + 0.25))
        return 1.0 + largest * sd / mean + self.skew

    def _grouped(self, padded: float, rows: float, touched: float, k: int, n: int) -> float:
        """A fused grouped GEMM: ``padded`` rows computed, ``rows`` rows of activations
        in and out, the weights (``k x n`` each) of ``touched`` experts read."""
        if rows <= 0.0:
            return 0.0
        compute = 2.0 * padded * k * n / self._flops
        weights = touched * k * n * self.weight_scale  # (in elements of the dtype)
        memory = (weights + rows * (k + n)) * self.bytes / self._bytes_s
        return self._floor + smooth_max(compute, memory, self._p)
