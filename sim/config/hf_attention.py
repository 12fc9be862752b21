"""What a HuggingFace ``config.json`` says about each layer's attention (read for
:mod:`sim.config.hf_config`): the window of its sliding-window layers and which layers
those are.

=========================  ================================================================
``sliding_window``         the window in tokens; null when ``use_sliding_window`` is false
                           (Qwen2's switch)
``layer_types``            one ``full_attention`` or ``sliding_attention`` per layer
                           (gpt-oss, Gemma 3 from transformers 4.53); absent with a window:
                           ``sliding_window_pattern`` (Gemma 3's earlier configs: every
                           N-th layer is full attention), else every layer is a window
                           (Mistral-7B-v0.1)
=========================  ================================================================

Chunked local attention (Llama 4's ``attention_chunk_size``) is refused by name: its
layers keep KV chunk by chunk, a rule pagesim's KV cache groups do not model.
"""

from __future__ import annotations

from typing import Any

#: the attention types ``layer_types`` may name
LAYER_TYPES = ("full_attention", "sliding_attention")


def refuse_chunked_attention(reader: Any) -> None:
    """ConfigError for a config with chunked local attention (Llama 4's layers keep KV
    chunk by chunk: ``attention_chunk_size``)."""
    if reader.raw.get("attention_chunk_size") is not None:
        raise reader.fail(
            "attention_chunk_size",
            "chunked local attention (Llama 4) is not modelled: its layers keep KV chunk by chunk",
        )


#: The most layers a model with sliding windows may have: its layers are listed one by
#: one (``layer_types``), so a config claiming billions would never finish reading.
MAX_WINDOWED_LAYERS = 100_000


def read_attention(reader: Any) -> dict[str, Any]:
    """``sliding_window`` and ``layer_types`` of ModelSpec, checked key by key
    (``reader.fail`` names the key); absent keys are left out."""
    if reader.raw.get("sliding_window") is None or not reader.flag("use_sliding_window", True):
        return {}
    window = reader.count("sliding_window")
    layers = reader.count("num_hidden_layers")
    if layers > MAX_WINDOWED_LAYERS:  # (each layer's attention is listed, one by one)
        raise reader.fail(
            "num_hidden_layers",
            f"{layers:,} layers with sliding windows; at most {MAX_WINDOWED_LAYERS:,} are "
            "modelled (released models have a few hundred at most)",
        )
    types = reader.raw.get("layer_types")
    if types is None and reader.raw.get("sliding_window_pattern") is not None:
        every = reader.count("sliding_window_pattern")
        types = [
            "full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(layers)
        ]
    if types is None:
        return {"sliding_window": window}
    if not isinstance(types, list) or any(kind not in LAYER_TYPES for kind in types):
        raise reader.fail("layer_types", f"expected a list of {' or '.join(LAYER_TYPES)}")
    if len(types) != layers:
        raise reader.fail(
            "layer_types", f"{len(types)} entries; num_hidden_layers is {layers}: one a layer"
        )
    return {"sliding_window": window, "layer_types": tuple(types)}
