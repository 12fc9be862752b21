"""The mixture-of-experts part of a HuggingFace ``config.json`` (``ModelSpec.moe``).

By ``model_type``, the keys read (transformers' own defaults where a key is absent):

* ``mixtral``: ``num_local_experts``, ``num_experts_per_tok``; each expert is
  ``intermediate_size`` wide; every layer is MoE; no shared expert.
* ``qwen2_moe``, ``qwen3_moe``: ``num_experts``, ``num_experts_per_tok``,
  ``moe_intermediate_size``; layer ``i`` is MoE unless it is in ``mlp_only_layers`` or
  ``(i + 1) % decoder_sparse_step`` is not 0 (dense layers are ``intermediate_size``
  wide); Qwen2-MoE's shared expert is ``shared_expert_intermediate_size`` wide (its
  one-column sigmoid gate, ``hidden`` weights a layer, is left out).

Any other type with an expert key (DeepSeek's MLA, gpt-oss's MXFP4 experts, Llama 4)
is refused by :mod:`sim.config.hf_config` with the key that makes it so.
"""

from __future__ import annotations

from typing import Any, Protocol


class Reader(Protocol):
    raw: dict[str, Any]

    def count(self, key: str, default: int | None = None) -> int: ...

    def fail(self, key: str, message: str) -> Exception: ...


#: model_type -> how its experts are written.
MOE_TYPES = {"mixtral": "mixtral", "qwen2_moe": "qwen", "qwen3_moe": "qwen"}


def read_moe(reader: Reader, model_type: str) -> dict[str, Any]:
    """``ModelSpec.moe`` as a dict, checked key by key (``reader.fail`` names the key)."""
    layers = reader.count("num_hidden_layers")
    if MOE_TYPES[model_type] == "mixtral":
        fields = {
            "num_experts": reader.count("num_local_experts", default=8),
            "experts_per_token": reader.count("num_experts_per_tok", default=2),
            "expert_intermediate_size": reader.count("intermediate_size"),
        }
    else:
        fields = {
            "num_experts": reader.count("num_experts"),
            "experts_per_token": reader.count("num_experts_per_tok"),
            "expert_intermediate_size": reader.count("moe_intermediate_size"),
            "shared_intermediate_size": _optional_width(reader, "shared_expert_intermediate_size"),
            "dense_layers": _qwen_dense_layers(reader, layers),
        }
    if fields["experts_per_token"] > fields["num_experts"]:
        raise reader.fail(
            "num_experts_per_tok",
            f"{fields['experts_per_token']} is more than the {fields['num_experts']} experts",
        )
    if fields.get("dense_layers", 0) >= layers:
        raise reader.fail(
            "mlp_only_layers", f"every one of the {layers} layers is dense: no MoE layer is left"
        )
    return fields


def _optional_width(reader: Reader, key: str) -> int:
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
    dense = set(only)
    return sum(1 for i in range(layers) if i in dense or (i + 1) % step != 0)
