"""Multi-head latent attention (DeepSeek-V2/V3's MLA): what ``ModelSpec.mla`` holds.

MLA caches one compressed latent per token and layer instead of K and V per head:
``kv_lora_rank`` latent elements plus the ``qk_rope_head_dim`` elements of the shared
rotary key. vLLM keeps that cache whole on every GPU of a tensor-parallel group (there
is one latent, not one per head to shard), so tensor parallelism does not shrink it.
Queries come through a low-rank projection (``q_lora_rank``) or a direct one; keys and
values are projected up from the latent (``kv_b_proj``) for prefill, or folded into the
query and output (vLLM's absorbed decode), which multiplies by the same weights.
"""

from __future__ import annotations

from pydantic import PositiveInt

from sim.inputs.schema import StrictModel


class MLASpec(StrictModel):
    """The latent attention of a DeepSeek-V2/V3 config.json."""

    kv_lora_rank: PositiveInt
    """Latent elements cached per token and layer (``kv_lora_rank``)."""
    q_lora_rank: PositiveInt | None = None
    """Rank of the query's low-rank projection; null: queries are projected directly."""
    qk_nope_head_dim: PositiveInt
    """Per-head query/key dimensions without rotary embedding."""
    qk_rope_head_dim: PositiveInt
    """Per-head query/key dimensions with rotary embedding; the key's are shared by every head
    and cached beside the latent."""
    v_head_dim: PositiveInt
    """Per-head value dimensions."""

    @property
    def cached_elements(self) -> int:
        """Elements cached per token and layer: the latent and the rotary key."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def projections(self, hidden: int, heads: int) -> dict[str, tuple[int, int]]:
        """(in, out) of each projection of one layer for ``heads`` query heads: the
        query's (``q_a`` and ``q_b``, or ``q`` without a low rank), the latent's down
        (``kv_a``) and up (``kv_b``) projections and the output (``o``)."""
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        if self.q_lora_rank is None:
            query = {"q": (hidden, heads * qk)}
        else:
            query = {"q_a": (hidden, self.q_lora_rank), "q_b": (self.q_lora_rank, heads * qk)}
        return {
            **query,
            "kv_a": (hidden, self.cached_elements),
            "kv_b": (self.kv_lora_rank, heads * (self.qk_nope_head_dim + self.v_head_dim)),
            "o": (heads * self.v_head_dim, hidden),
        }

    def attention_params(self, hidden: int, heads: int) -> int:
        """Projection weights of one layer's attention."""
        return sum(rows * cols for rows, cols in self.projections(hidden, heads).values())
