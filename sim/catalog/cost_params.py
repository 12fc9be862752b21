"""The analytic cost model's constants, each with its source: kernel efficiencies, floors
and per-step overheads (the kernels using them are in :mod:`sim.costs.kernels`). They
describe GPUs and kernels, not a scenario: a scenario overrides them under
``cost_model.params`` (sim.config.costs).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_serializer

from sim.inputs.schema import StrictModel, drop_unset

__all__ = ["MOE_GEMM_EFFICIENCY", "MOE_MEMORY_EFFICIENCY", "CostParams", "Fraction", "Seconds"]


Fraction = Annotated[float, Field(gt=0.0, le=1.0)]


Seconds = Annotated[float, Field(ge=0.0)]

#: Fraction of the dense tensor peak vLLM's fused MoE GEMMs sustain on their padded rows,
#: and of the sustained bandwidth at which they read the touched experts' weights. Both
#: fitted (3.0 % MAPE, 1 to 1,536 tokens) to one published table: vLLM's
#: benchmark_moe.py for Mixtral-8x7B, bf16, H100 SXM, TP 2, tuned config (vllm#24700);
#: checked on other models, GPUs and element sizes by bench/moe_vs_measurements.py
#: (validation/moe-kernels/fused_moe.csv).
MOE_GEMM_EFFICIENCY = 0.7
MOE_MEMORY_EFFICIENCY = 0.94


class CostParams(StrictModel):
    """Constants of the analytic model, each with its source. The defaults describe a
    tuned engine (vLLM V1-like: cuBLAS GEMMs, FlashAttention prefill, paged decode
    attention) on a datacenter GPU."""

    gemm_efficiency: Fraction = 0.8
    """Fraction of an SM's dense tensor peak a GEMM tile's main loop sustains. cuBLAS reaches 87 %
    (A100 SXM) and 80 % (H100 SXM) of peak at its best BF16 shape (stas00/ml-engineering,
    "Maximum Achievable Matmul FLOPS"); "optimized GEMM can reach up to 80-90 %"
    (FlashAttention-2 paper, Dao 2023)."""
    gemm_tile: tuple[Annotated[int, Field(ge=16)], Annotated[int, Field(ge=16)]] = (128, 128)
    """Output tile of one CTA, rows x columns (each at least 16): cuBLAS's 128 x 128 class
    (NVIDIA, "Matrix Multiplication Background User's Guide", tile and wave quantisation)."""
    roofline_sharpness: float = Field(default=3.0, ge=1.0)
    """Exponent of the smooth roofline combining a GEMM's compute and memory time; 3 reproduces the
    memory-to-compute transition (64-256 tokens) of Vidur's A100 GEMM profiles and is checked on
    its H100 and A40 ones (bench/costmodel_vs_profiles.py)."""
    memory_efficiency: Fraction = 0.89
    """Fraction of the sustained read bandwidth that weight-streaming GEMVs, KV reads and writes and
    copies reach. Vidur's profiles stream large weight matrices at 1-16 tokens at 0.75-0.78 of
    the datasheet bandwidth on A100 (0.87-0.91 of its measured 0.86) and 0.83-0.87 on H100
    (0.87-0.92 of its 0.95)."""
    elementwise_efficiency: Fraction = 0.5
    """Fraction of the sustained bandwidth of norm, rotary, activation and sampling kernels:
    0.33-0.6 of the datasheet bandwidth in Vidur's A100 and H100 profiles at 512+ tokens (RMSNorm
    lowest, SiLU-and-multiply highest)."""
    kernel_floor_s: Seconds = 2.5e-6
    """Seconds any kernel occupies the GPU at least: 2.6-2.7 us per back-to-back small kernel on
    A100 and H200 (te42kyfo/gpu-benches, gpu-small-kernels)."""
    attention_efficiency: Fraction = 0.6
    """Fraction of the SM's tensor peak FlashAttention's main loop reaches on long sequences: FA2
    forward "up to 73 %" on A100 (Dao 2023); FA3 causal, head dim 128, 62 % of H100's peak at 16k
    tokens (Shah et al. 2024, Fig. 5)."""
    attention_tile: int = Field(default=128, ge=16)
    """Query rows (and KV columns) of one attention tile; FA3 uses 128 x 128 tiles for head dim 128
    on Hopper."""
    attention_cta_overhead_tiles: float = Field(default=2.0, ge=0.0)
    """Fixed cost of one attention CTA in KV tiles. FA3's causal head-dim-128 curve reaches 0.30,
    0.43 and 0.53 of peak at 0.5k, 1k and 2k tokens against 0.62 at 16k: a CTA visiting k tiles
    on average runs at k / (k + ~2) of its long-sequence speed."""
    decode_attention_efficiency: Fraction = 0.97
    """Fraction of the sustained read bandwidth that paged decode attention reaches on long
    contexts: FlashInfer's batch decode uses 88 % of H100's datasheet bandwidth at 1k tokens
    (flashinfer.ai blog, 2024-02-02), 0.97 of its 0.95 once the per-sequence cost below is
    counted."""
    decode_seq_overhead_tokens: float = Field(default=45.0, ge=0.0)
    """Fixed cost of one decoding sequence in KV tokens read: FlashInfer's batch decode (batch 64,
    H100) uses 41 / 64 / 83 / 88 % of the bandwidth at 32 / 128 / 512 / 1k-token contexts, i.e.
    each sequence costs like ~45 more tokens."""
    decode_attention_floor_s: Seconds = 10e-6
    """Floor, in seconds, of the decode attention in a layer: a split-KV kernel and the kernel
    merging its partial results (Vidur's A100 FlashInfer profiles: 10 us for one sequence of 160
    tokens)."""
    interconnect_efficiency: Fraction | None = None
    """Fraction of the link's one-direction bandwidth an all-reduce's bus bandwidth reaches; null:
    what nccl-tests measured on that kind of link at that group size (sim.catalog.links: 0.68-0.79
    over NVLink, 0.39-0.61 over PCIe with P2P, 0.47 through host memory)."""
    allreduce_latency_s: Seconds | None = None
    """Latency, in seconds, of one small all-reduce; null: the measured figure of the link and group
    size (sim.catalog.links: ~5 us over NVLink with vLLM's custom kernel in a CUDA graph, 5-25 us
    over PCIe, 9-39 us through host memory)."""
    cpu_step_overhead_s: Seconds = 5e-4
    """CPU seconds per step not hidden behind the GPU (schedule, prepare inputs, process outputs):
    a vLLM 0.27 engine loop profiled at 541 us per step amortised
    (openfabric-systems/simllm#204)."""
    cpu_overlap: bool = False
    """The engine prepares step N+1 on the CPU while the GPU runs step N (vLLM's async
    scheduling: default since v0.12, vllm#27614; the resolved config of a vLLM 0.19 run shows
    ``async_scheduling=True``), so a step takes max(GPU, CPU) instead of their sum; off: the
    CPU work of each step adds to its GPU time (vLLM before 0.12, and pagesim's default)."""
    cpu_per_seq_overhead_s: Seconds = 12e-6
    """CPU seconds per sequence in the step: the same study's scheduler cost, 12.7 us per running
    request at the cap."""
    moe_gemm_efficiency: Fraction | None = None
    """Fraction of the dense tensor peak the fused grouped MoE GEMMs (vLLM's Triton
    ``fused_moe``) sustain on their padded rows; null: :data:`MOE_GEMM_EFFICIENCY`."""
    moe_memory_efficiency: Fraction | None = None
    """Fraction of the sustained bandwidth at which the fused MoE GEMMs read the touched
    experts' weights; null: :data:`MOE_MEMORY_EFFICIENCY`."""
    moe_rank_imbalance: float | None = Field(default=None, ge=0.0)
    """Under ``expert_parallel``: how much more routed work the busiest GPU gets than the mean
    from routing skew, on top of uniform routing's own spread ((max - mean) / mean); null: 0,
    uniform routing. TensorRT-LLM measured 1.56 for DeepSeek-R1 over 32 ranks in decode without
    load balancing, 0.11 with it (its tech blog 4, Table 1)."""

    @model_serializer(mode="wrap")
    def _leave_out_unset_moe(self, handler) -> dict[str, Any]:
        return drop_unset(handler(self), _MOE_PARAMS)  # what a dense model never reads


_MOE_PARAMS = dict.fromkeys(("moe_gemm_efficiency", "moe_memory_efficiency", "moe_rank_imbalance"))
