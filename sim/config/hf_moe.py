"""The mixture-of-experts part of a HuggingFace ``config.json`` (``ModelSpec.moe``).

By ``model_type``, the keys read (transformers' own defaults where a key is absent):

* ``mixtral``: ``num_local_experts``, ``num_experts_per_tok``; each expert is
  ``intermediate_size`` wide; every layer is MoE; no shared expert.
* ``deepseek_v2``, ``deepseek_v3``: ``n_routed_experts``, ``num_experts_per_tok``,
  ``moe_intermediate_size``; ``n_shared_experts`` shared experts of that width; layer
  ``i`` is MoE when ``i >= first_k_dense_replace`` and ``i % moe_layer_freq == 0``
  (the others are dense, ``intermediate_size`` wide). Their attention is MLA
  (:func:`read_mla`). DeepSeek-V3's multi-token-prediction layer
  (``num_nextn_predict_layers``) is left out: vLLM serves without it unless speculative
  decoding asks for it.
* ``qwen2_moe``, ``qwen3_moe``: ``num_experts``, ``num_experts_per_tok``,
  ``moe_intermediate_size``; layer ``i`` is MoE unless it is in ``mlp_only_layers`` or
  ``(i + 1) % decoder_sparse_step`` is not 0 (dense layers are ``intermediate_size``
  wide); Qwen2-MoE's shared expert is ``shared_expert_intermediate_size`` wide (its
  one-column sigmoid gate, ``hidden`` weights a layer, is left out).

Any other type with an expert key (gpt-oss's MXFP4 experts, Llama 4) is refused by
:mod:`sim.config.hf_config` with the key that makes it so, and so is MLA in a type other
than DeepSeek's.
"""

from __future__ import annotations

from typing import Any, Protocol


class Reader(Protocol):
    raw: dict[str, Any]

    def count(self, key: str, default: int | None = None) -> int: ...

    def fail(self, key: str, message: str) -> Exception: ...


#: model_type -> how its experts are written.
MOE_TYPES = {
    "mixtral": "mixtral",
    "qwen2_moe": "qwen",
    "qwen3_moe": "qwen",
    "deepseek_v2": "deepseek",
    "deepseek_v3": "deepseek",
    "gpt_oss": "mixtral",
}

#: model types whose checkpoints store routed experts in MXFP4 (``quant_method: mxfp4``):
#: 4-bit elements with one 8-bit scale per 32 (OCP Microscaling Formats spec v1.0), 4.25
#: bits a weight; everything else stays in the model's dtype (gpt-oss's
#: ``modules_to_not_convert``: attention, router, embeddings, LM head)
MXFP4_TYPES = {"gpt_oss"}
MXFP4_BITS = 4.25


def read_moe(reader: Reader, model_type: str) -> dict[str, Any]:
    """``ModelSpec.moe`` as a dict, checked key by key (``reader.fail`` names the key)."""
    layers = reader.count("num_hidden_layers")
    if MOE_TYPES[model_type] == "mixtral":
        fields = {
            "num_experts": reader.count("num_local_experts", default=8),
            "experts_per_token": reader.count("num_experts_per_tok", default=2),
            "expert_intermediate_size": reader.count("intermediate_size"),
        }
    elif MOE_TYPES[model_type] == "deepseek":
        width = reader.count("moe_intermediate_size")
        first = reader.raw.get("first_k_dense_replace") or 0
        step = reader.count("moe_layer_freq", default=1)
        if not isinstance(first, int) or isinstance(first, bool) or not 0 <= first < layers:
            raise reader.fail("first_k_dense_replace", f"expected 0 to {layers - 1}, got {first!r}")
        fields = {
            "num_experts": reader.count("n_routed_experts"),
            "experts_per_token": reader.count("num_experts_per_tok"),
            "expert_intermediate_size": width,
            "shared_intermediate_size": _optional_count(reader, "n_shared_experts") * width,
            # layers i < first, and those past it off the frequency (i % step != 0)
            "dense_layers": layers - _multiples(first, layers, step),
        }
    else:
        fields = {
            "num_experts": reader.count("num_experts"),
            "experts_per_token": reader.count("num_experts_per_tok"),
            "expert_intermediate_size": reader.count("moe_intermediate_size"),
            "shared_intermediate_size": _optional_count(reader, "shared_expert_intermediate_size"),
            "dense_layers": _qwen_dense_layers(reader, layers),
        }
    quant = reader.raw.get("quantization_config")
    method = quant.get("quant_method") if isinstance(quant, dict) else None
    if model_type in MXFP4_TYPES and method == "mxfp4":
        fields["expert_weight_bits"] = MXFP4_BITS
    if fields["experts_per_token"] > fields["num_experts"]:
        raise reader.fail(
            "num_experts_per_tok",
            f"{fields['experts_per_token']} is more than the {fields['num_experts']} experts",
        )
    if fields.get("dense_layers", 0) >= layers:
        key = "mlp_only_layers" if reader.raw.get("mlp_only_layers") else "decoder_sparse_step"
        if MOE_TYPES[model_type] == "deepseek":
            key = "moe_layer_freq"
        raise reader.fail(key, f"every one of the {layers} layers is dense: no MoE layer is left")
    return fields


def _optional_count(reader: Reader, key: str) -> int:
    value = reader.raw.get(key)
    if value in (None, 0):
        return 0
    return reader.count(key)


def _qwen_dense_layers(reader: Reader, layers: int) -> int:
    step = reader.count("decoder_sparse_step", default=1)
    only = reader.raw.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in only
    ):
        raise reader.fail(
            "mlp_only_layers",
            f"expected a list of layer indices in [0, {layers}), got {repr(only)[:40]}",
        )
    # layer i is dense when listed or when (i + 1) % step != 0; counted, not looped:
    # a config may claim 2^31 - 1 layers
    sparse = layers // step  # the i in [0, layers) with (i + 1) a multiple of step
    listed_sparse = sum(1 for i in set(only) if (i + 1) % step == 0)
    return layers - sparse + listed_sparse


def _multiples(low: int, high: int, step: int) -> int:
    """How many multiples of ``step`` lie in ``[low, high)`` (0 <= low <= high)."""
    return (high - 1) // step - (low - 1) // step


#: model types whose attention is multi-head latent attention.
MLA_TYPES = ("deepseek_v2", "deepseek_v3")


def read_mla(reader: Reader) -> dict[str, Any]:
    """``ModelSpec.mla`` as a dict (DeepSeek-V2/V3's keys)."""
    low = reader.raw.get("q_lora_rank")
    return {
        "kv_lora_rank": reader.count("kv_lora_rank"),
        "q_lora_rank": None if low is None else reader.count("q_lora_rank"),
        "qk_nope_head_dim": reader.count("qk_nope_head_dim"),
        "qk_rope_head_dim": reader.count("qk_rope_head_dim"),
        "v_head_dim": reader.count("v_head_dim"),
    }
