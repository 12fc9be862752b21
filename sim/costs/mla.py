"""What multi-head latent attention's projections cost on one GPU (``ModelSpec.mla``).

vLLM runs them as: the query's low-rank down projection (``q_a``, replicated on every
GPU) and up projection (``q_b``, split by heads), the latent's down projection
(``kv_a``, replicated: one latent for all heads), its up projection to each head's key
and value (``kv_b``, split by heads; for a decode, vLLM folds it into the query and the
output, which multiplies by the same weights), and the output projection (``o``, split
by heads). The cache write is the latent alone, and decode attention reads it
(sim/costs/analytic.py prices both from ``ModelSpec.kv_bytes_per_token``). Prefill
attention runs per head over ``qk_nope + qk_rope`` query/key dimensions and
``v_head_dim`` value dimensions; the kernels' per-tile cost takes their mean. What is
left out: a prefill's up projection of its *cached* context's latents (vLLM does it for
chunked prefills over a cache hit), and decode attention's compute (at 16 heads a GPU it
does ~30 FLOPs a byte read, memory bound on every GPU pagesim knows).
"""

from __future__ import annotations

from sim.catalog.hardware import ModelSpec
from sim.costs.kernels import GpuKernels


def mla_ops(model: ModelSpec, kernels: GpuKernels, tp: int, tokens: int) -> dict[str, float]:
    """``attn_pre_proj``, ``attn_rope`` and ``attn_post_proj`` of one MLA layer for
    ``tokens`` tokens on one GPU of ``tp`` (the analytic model's LAYER_OPS names)."""
    mla, t, b = model.mla, tokens, model.dtype_bytes
    heads = model.num_heads // tp
    projections = mla.projections(model.hidden_size, heads)
    out_rows, out_cols = projections.pop("o")
    return {
        "attn_pre_proj": sum(kernels.gemm(t, k, n) for k, n in projections.values()),
        "attn_rope": kernels.elementwise(2 * t * (heads + 1) * mla.qk_rope_head_dim * b),
        "attn_post_proj": kernels.gemm(t, out_rows, out_cols),
    }


def attention_head_dim(model: ModelSpec) -> int:
    """The per-head dimension prefill attention is priced at: the mean of the query/key
    and the value dimensions under MLA, ``head_dim`` otherwise."""
    if model.mla is None:
        return model.head_dim
    mla = model.mla
    return (mla.qk_nope_head_dim + mla.qk_rope_head_dim + mla.v_head_dim) // 2
