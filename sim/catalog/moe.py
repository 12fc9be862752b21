"""Mixture-of-experts layers: what ``ModelSpec.moe`` holds, and the counts derived from it.

A mixture-of-experts (MoE) decoder layer replaces the dense MLP by ``num_experts`` routed
experts (each a gated MLP of width ``expert_intermediate_size``), a router (one
``hidden x num_experts`` matrix) that sends each token to ``experts_per_token`` of them,
and optionally shared experts every token runs (DeepSeek, Qwen2-MoE, Llama 4). Some
models keep dense MLPs in a few layers (DeepSeek's ``first_k_dense_replace``, Qwen's
``mlp_only_layers``); those use ``ModelSpec.intermediate_size``.

Weights count every expert; FLOPs count the active ones (:func:`active_mlp_params`).
What a step reads depends on how many distinct experts its tokens touch
(:func:`expected_touched`), which the cost model prices (sim/costs/moe.py).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, NonNegativeInt, PositiveInt, model_serializer, model_validator

from sim.inputs.schema import StrictModel, drop_unset


class MoESpec(StrictModel):
    """The experts of a mixture-of-experts model (read from its config.json)."""

    num_experts: PositiveInt
    """Routed experts per MoE layer (Mixtral ``num_local_experts``, Qwen ``num_experts``,
    DeepSeek ``n_routed_experts``)."""
    experts_per_token: PositiveInt
    """Routed experts each token runs (top-k: ``num_experts_per_tok``); at most
    ``num_experts``."""
    expert_intermediate_size: PositiveInt
    """Hidden width of one routed expert's gated MLP (``moe_intermediate_size``; Mixtral's
    ``intermediate_size``)."""
    shared_intermediate_size: NonNegativeInt = 0
    """Hidden width of the shared experts together, which every token runs (DeepSeek
    ``n_shared_experts x moe_intermediate_size``, Qwen2-MoE
    ``shared_expert_intermediate_size``); 0: none."""
    dense_layers: NonNegativeInt = Field(default=0)
    """Decoder layers with a dense MLP of ``model.intermediate_size`` instead of experts
    (DeepSeek's ``first_k_dense_replace``, layers off Qwen's ``decoder_sparse_step`` or in its
    ``mlp_only_layers``)."""
    expert_weight_bits: float | None = Field(default=None, gt=0, le=32)
    """Bits one routed expert's weight takes as the checkpoint stores it, where that is not the
    model's dtype: 4.25 for MXFP4 (gpt-oss: 4-bit elements, an 8-bit scale per 32). Counted in
    the weights' memory and read at that size by the expert GEMMs, which compute in the model's
    dtype. Null: the model's dtype."""

    @model_serializer(mode="wrap")
    def _leave_out_the_dtype_default(self, handler) -> dict[str, Any]:
        return drop_unset(handler(self), {"expert_weight_bits": None})

    @model_validator(mode="after")
    def _top_k_within_experts(self) -> MoESpec:
        if self.experts_per_token > self.num_experts:
            raise ValueError(
                f"experts_per_token ({self.experts_per_token}) must be at most num_experts "
                f"({self.num_experts})"
            )
        return self

    def moe_layers(self, num_layers: int) -> int:
        return num_layers - self.dense_layers

    def layer_params(self, hidden: int, matrices: int) -> int:
        """Weights of one MoE layer's MLP part: router, every routed expert, shared."""
        router = hidden * self.num_experts
        experts = self.num_experts * matrices * hidden * self.expert_intermediate_size
        return router + experts + matrices * hidden * self.shared_intermediate_size

    def routed_params(self, hidden: int, matrices: int) -> int:
        """Weights of one MoE layer's routed experts (all of them)."""
        return self.num_experts * matrices * hidden * self.expert_intermediate_size

    def active_layer_params(self, hidden: int, matrices: int) -> int:
        """Weights one token multiplies in a MoE layer: router, its top-k, shared."""
        router = hidden * self.num_experts
        routed = self.experts_per_token * matrices * hidden * self.expert_intermediate_size
        return router + routed + matrices * hidden * self.shared_intermediate_size


def expected_touched(num_experts: int, experts_per_token: int, tokens: int) -> float:
    """Expected distinct experts (of ``num_experts``) that ``tokens`` tokens, each routed
    to ``experts_per_token`` distinct experts uniformly at random, touch together:
    ``E (1 - (1 - k/E)^T)``. One token touches k; a large batch touches all E."""
    if tokens <= 0:
        return 0.0
    miss = 1.0 - experts_per_token / num_experts
    return num_experts * (1.0 - miss**tokens)
