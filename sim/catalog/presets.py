"""Named models and GPUs, and how a scenario names them.

A scenario gives a model or a GPU either by preset (``"llama-3-8b"``, ``"h100-sxm"``), by
an explicit shape, or as ``{"preset": NAME, ...overrides}``; :func:`resolve_model` and
:func:`resolve_hardware` accept all three. A model may also be read from a HuggingFace
config.json (``{"config": PATH, ...overrides}``, :mod:`sim.config.hf_config`, in a
scenario). An unknown preset raises ``ValueError`` naming the closest one, which pydantic
turns into a field error for the scenario file.
"""

from __future__ import annotations

from typing import Any, Literal

from sim.catalog.gpus import HARDWARE_PRESETS
from sim.catalog.hardware import HardwareSpec, ModelSpec
from sim.inputs.hints import did_you_mean

MODEL_PRESETS: dict[str, ModelSpec] = {
    # meta-llama/Meta-Llama-3-8B config.json (bf16, rope, GQA 32/8)
    "llama-3-8b": ModelSpec(
        name="llama-3-8b",
        num_layers=32,
        hidden_size=4096,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=128256,
        max_model_len=8192,
    ),
    # meta-llama/Meta-Llama-3-70B config.json
    "llama-3-70b": ModelSpec(
        name="llama-3-70b",
        num_layers=80,
        hidden_size=8192,
        num_heads=64,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=28672,
        vocab_size=128256,
        max_model_len=8192,
    ),
    # mistralai/Mistral-7B-v0.1 config.json: every layer a 4096-token sliding window
    "mistral-7b": ModelSpec(
        name="mistral-7b",
        num_layers=32,
        hidden_size=4096,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=32000,
        max_model_len=32768,
        sliding_window=4096,
    ),
    # Qwen/Qwen2.5-7B config.json (q/k/v biases not counted)
    "qwen2.5-7b": ModelSpec(
        name="qwen2.5-7b",
        num_layers=28,
        hidden_size=3584,
        num_heads=28,
        num_kv_heads=4,
        head_dim=128,
        intermediate_size=18944,
        vocab_size=152064,
        max_model_len=131072,
    ),
    # facebook/opt-13b config.json (fp16, MHA, ffn_dim 20480, tied word embeddings)
    "opt-13b": ModelSpec(
        name="opt-13b",
        num_layers=40,
        hidden_size=5120,
        num_heads=40,
        num_kv_heads=40,
        head_dim=128,
        intermediate_size=20480,
        vocab_size=50272,
        max_model_len=2048,
        mlp="gelu",
        tie_embeddings=True,
    ),
    # facebook/opt-66b config.json
    "opt-66b": ModelSpec(
        name="opt-66b",
        num_layers=64,
        hidden_size=9216,
        num_heads=72,
        num_kv_heads=72,
        head_dim=128,
        intermediate_size=36864,
        vocab_size=50272,
        max_model_len=2048,
        mlp="gelu",
        tie_embeddings=True,
    ),
    # A tiny model for tests and for the real CPU backend (fp32 so torch CPU is exact).
    "tiny": ModelSpec(
        name="tiny",
        num_layers=2,
        hidden_size=64,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        intermediate_size=128,
        vocab_size=512,
        max_model_len=2048,
        dtype_bytes=4,
    ),
}


#: Where each model preset's figures come from: the HuggingFace repository whose
#: config.json they copy (scenarios/models/<preset>.json holds that file).
MODEL_SOURCES: dict[str, str] = {
    "llama-3-8b": "meta-llama/Meta-Llama-3-8B",
    "llama-3-70b": "meta-llama/Meta-Llama-3-70B",
    "mistral-7b": "mistralai/Mistral-7B-v0.1",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B",
    "opt-13b": "facebook/opt-13b",
    "opt-66b": "facebook/opt-66b",
    "tiny": "pagesim's test model (backend/real/model.py)",
}


#: The config.json files in scenarios/models/ that are not presets: file stem -> (the
#: HuggingFace repository whose config.json it is, where this copy was taken from).
#: ``pagesim import-run`` finds a recorded run's model here by its repository name.
SHIPPED_CONFIGS: dict[str, tuple[str, str]] = {
    "llama-2-7b": ("meta-llama/Llama-2-7b-hf", "inference-sim/training@ed5c1d2 model_configs/"),
    "llama-2-70b": ("meta-llama/Llama-2-70b-hf", "inference-sim/training@ed5c1d2 model_configs/"),
    "codellama-34b-instruct": (
        "codellama/CodeLlama-34b-Instruct-hf",
        "inference-sim/training@ed5c1d2 model_configs/",
    ),
    "llama-3.1-8b": ("meta-llama/Llama-3.1-8B", "casys-kaist/LLMServingSim@5daddb2 configs/model/"),
    "qwen3-32b": ("Qwen/Qwen3-32B", "casys-kaist/LLMServingSim@5daddb2 configs/model/"),
    # Mixture-of-experts models (sim/config/hf_moe.py)
    "mixtral-8x7b": (
        "mistralai/Mixtral-8x7B-v0.1",
        "inference-sim/inference-sim@78dc73e model_configs/mixtral-8x7b-v0.1/",
    ),
    "qwen3-30b-a3b": (
        "Qwen/Qwen3-30B-A3B",
        "inference-sim/inference-sim@78dc73e model_configs/qwen3-30b-a3b/",
    ),
    "qwen3-235b-a22b": (
        "Qwen/Qwen3-235B-A22B",
        "ai-dynamo/aiconfigurator@0b077da aic-core/src/aiconfigurator_core/model_configs/",
    ),
    # Models whose layers keep different KV (sim/catalog/kv_layout.py): sliding windows
    # beside full attention. gpt-oss's routed experts are MXFP4 (sim/config/hf_moe.py).
    "gpt-oss-20b": (
        "openai/gpt-oss-20b",
        "huggingface.co/openai/gpt-oss-20b config.json (Apache-2.0), as public test fixtures "
        "quote it in full",
    ),
    "gpt-oss-120b": (
        "openai/gpt-oss-120b",
        "huggingface.co/openai/gpt-oss-120b raw/main/config.json (Apache-2.0), as public test "
        "fixtures quote it in full",
    ),
    "gemma-3-12b": (  # the text_config of the multimodal release: its language model
        "google/gemma-3-12b-it",
        "huggingface.co/google/gemma-3-12b-it config.json text_config, as transformers' "
        "Gemma 3 conversion tests quote it",
    ),
    "deepseek-v2-lite": (  # MoE with multi-head latent attention (sim/catalog/mla.py)
        "deepseek-ai/DeepSeek-V2-Lite",
        "inference-sim/inference-sim@78dc73e model_configs/deepseek-v2-lite/",
    ),
    "deepseek-v3": (
        "deepseek-ai/DeepSeek-V3",
        "ai-dynamo/aiconfigurator@0b077da aic-core/src/aiconfigurator_core/model_configs/",
    ),
    "qwen2-57b-a14b": (  # a Python dict there, written here as JSON with the same keys
        "Qwen/Qwen2-57B-A14B",
        "NVIDIA/TensorRT-LLM@08b2040 tests/unittest/_torch/modeling/test_modeling_qwen_moe.py",
    ),
}


def shipped_config_for(repository: str) -> str | None:
    """The stem of the shipped config.json of a HuggingFace repository (case-insensitive;
    presets' repositories included), None if none is shipped."""
    wanted = repository.strip().lower()
    for stem, (repo, _) in SHIPPED_CONFIGS.items():
        if repo.lower() == wanted:
            return stem
    for preset, repo in MODEL_SOURCES.items():
        if repo.lower() == wanted:
            return preset
    return None


_PRESETS = {"model": MODEL_PRESETS, "hardware": HARDWARE_PRESETS}


#: Preset figures measured on the card a preset field describes: an override of that field
#: leaves them unset (they would describe the old card), unless it sets them too.
#: ``mem_capacity_bytes`` -> ``cuda_memory_bytes``: the KV pool is sized from the latter.
_MEASURED_FROM = {"hardware": {"mem_capacity_bytes": ("cuda_memory_bytes",)}}


def expand_preset(value: Any, kind: Literal["model", "hardware"]) -> Any:
    """A preset name or ``{"preset": NAME, **overrides}`` as the preset's fields with the
    overrides applied; anything else (an explicit shape, a spec) unchanged, for the
    spec's own validation. Raises ValueError naming the closest preset for an unknown
    (or non-string) name."""
    presets = _PRESETS[kind]
    if isinstance(value, str):
        value = {"preset": value}
    if not isinstance(value, dict) or "preset" not in value:
        return value
    name = value["preset"]
    if not isinstance(name, str) or name not in presets:
        raise ValueError(f"unknown {kind} preset {name!r}{did_you_mean(name, presets)}")
    overrides = {k: v for k, v in value.items() if k != "preset"}
    base = presets[name].model_dump()
    for field, measured in _MEASURED_FROM.get(kind, {}).items():
        if field in overrides:  # a new figure: the preset's measurement of the old one goes
            for key in measured:
                if key not in overrides:
                    base[key] = None
    return {**base, **overrides}


def resolve_model(value: str | dict | ModelSpec) -> ModelSpec:
    """A ModelSpec from a preset name, a field mapping, or ``{"preset": NAME, **overrides}``.

    Raises ValueError for an unknown preset name and pydantic's ValidationError (a
    ValueError) for a bad field."""
    return ModelSpec.model_validate(expand_preset(value, "model"))


def resolve_hardware(value: str | dict | HardwareSpec) -> HardwareSpec:
    """A HardwareSpec from a preset name, a field mapping, or ``{"preset": NAME, ...}``.

    Raises like :func:`resolve_model`."""
    return HardwareSpec.model_validate(expand_preset(value, "hardware"))
