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

from sim.config.hardware import HardwareSpec, ModelSpec
from sim.config.hints import did_you_mean

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
    # mistralai/Mistral-7B-v0.1 config.json (its 4096-token sliding window is not modelled)
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
    "tiny": "pagesim's test model (backend/paged/model.py)",
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


# --- hardware presets ---------------------------------------------------------------------
# Capacities are the datasheet's decimal GB (the usable figure nvidia-smi shows is a few
# percent higher, so this errs on the small side). Links are one direction: the datasheets
# quote NVLink and PCIe bidirectional totals, which we halve. SM counts: A100 whitepaper
# ("A100 Tensor Core GPU has 108 SMs"); H100 SXM5 132 (Chips and Cheese, "Nvidia's H100:
# Funny L2, and Tons of Bandwidth", 2023, and deviceQuery); H200 132 (same GH100 die; 132
# in te42kyfo/gpu-benches' H200 run); L4 58 and A40 84 (deviceQuery / gpu-benches).
# Sustained bandwidth fractions are read-bound streaming kernels over the datasheet: the
# BabelStream Dot kernel in Azure's AI-benchmarking-guide (ND A100 v4: 1.75 of 2.039 TB/s;
# ND H100 v5: 3.18 of 3.35; ND H200 v5: 4.48 of 4.8) and the read kernel of
# te42kyfo/gpu-benches' gpu-stream (A100 40GB 1490 of 1555 GB/s, A40 679 of 696); L4 has
# no published run and keeps the 0.9 default.
_GB = 1e9


_TF = 1e12


HARDWARE_PRESETS: dict[str, HardwareSpec] = {
    # NVIDIA A100 Tensor Core GPU datasheet (SXM, 40GB HBM2): 1,555 GB/s, NVLink 600 GB/s,
    # PCIe Gen4 64 GB/s
    "a100-40gb": HardwareSpec(
        name="a100-40gb",
        flops={"fp32": 19.5 * _TF, "tf32": 156 * _TF, "bf16": 312 * _TF, "fp16": 312 * _TF},
        mem_bandwidth_bytes_s=1555 * _GB,
        mem_capacity_bytes=40 * 10**9,
        host_link_bytes_s=32 * _GB,
        interconnect_bytes_s=300 * _GB,
        num_sms=108,
        sustained_bandwidth_fraction=0.958,
    ),
    # NVIDIA A100 Tensor Core GPU datasheet (SXM, 80GB HBM2e): 2,039 GB/s
    "a100-80gb": HardwareSpec(
        name="a100-80gb",
        flops={"fp32": 19.5 * _TF, "tf32": 156 * _TF, "bf16": 312 * _TF, "fp16": 312 * _TF},
        mem_bandwidth_bytes_s=2039 * _GB,
        mem_capacity_bytes=80 * 10**9,
        host_link_bytes_s=32 * _GB,
        interconnect_bytes_s=300 * _GB,
        num_sms=108,
        sustained_bandwidth_fraction=0.86,
    ),
    # NVIDIA H100 Tensor Core GPU datasheet (SXM5, 80GB HBM3): 3.35 TB/s, NVLink 900 GB/s,
    # PCIe Gen5 128 GB/s; dense = half the "with sparsity" figures
    "h100-sxm": HardwareSpec(
        name="h100-sxm",
        flops={
            "fp32": 67 * _TF,
            "tf32": 494.5 * _TF,
            "bf16": 989.5 * _TF,
            "fp16": 989.5 * _TF,
            "fp8": 1979 * _TF,
        },
        mem_bandwidth_bytes_s=3350 * _GB,
        mem_capacity_bytes=80 * 10**9,
        host_link_bytes_s=64 * _GB,
        interconnect_bytes_s=450 * _GB,
        num_sms=132,
        sustained_bandwidth_fraction=0.95,
    ),
    # NVIDIA H200 Tensor Core GPU datasheet (SXM, 141GB HBM3e): 4.8 TB/s, same compute and
    # links as H100 SXM
    "h200": HardwareSpec(
        name="h200",
        flops={
            "fp32": 67 * _TF,
            "tf32": 494.5 * _TF,
            "bf16": 989.5 * _TF,
            "fp16": 989.5 * _TF,
            "fp8": 1979 * _TF,
        },
        mem_bandwidth_bytes_s=4800 * _GB,
        mem_capacity_bytes=141 * 10**9,
        host_link_bytes_s=64 * _GB,
        interconnect_bytes_s=450 * _GB,
        num_sms=132,
        sustained_bandwidth_fraction=0.93,
    ),
    # NVIDIA L4 Tensor Core GPU datasheet (24GB GDDR6): 300 GB/s, PCIe Gen4 x16 64 GB/s,
    # no NVLink (tensor parallelism goes over PCIe)
    "l4": HardwareSpec(
        name="l4",
        flops={
            "fp32": 30.3 * _TF,
            "tf32": 60 * _TF,
            "bf16": 121 * _TF,
            "fp16": 121 * _TF,
            "fp8": 242 * _TF,
        },
        mem_bandwidth_bytes_s=300 * _GB,
        mem_capacity_bytes=24 * 10**9,
        host_link_bytes_s=32 * _GB,
        interconnect_bytes_s=32 * _GB,
        num_sms=58,
    ),
    # NVIDIA A40 datasheet (48GB GDDR6): 696 GB/s, 149.7 TFLOPS dense BF16/FP16 tensor
    # (299.4 with sparsity), 37.4 FP32, PCIe Gen4 x16 64 GB/s, NVLink bridge 112.5 GB/s
    # bidirectional between pairs
    "a40": HardwareSpec(
        name="a40",
        flops={
            "fp32": 37.4 * _TF,
            "tf32": 74.8 * _TF,
            "bf16": 149.7 * _TF,
            "fp16": 149.7 * _TF,
        },
        mem_bandwidth_bytes_s=696 * _GB,
        mem_capacity_bytes=48 * 10**9,
        host_link_bytes_s=32 * _GB,
        interconnect_bytes_s=56.25 * _GB,
        num_sms=84,
        sustained_bandwidth_fraction=0.976,
    ),
}


_PRESETS = {"model": MODEL_PRESETS, "hardware": HARDWARE_PRESETS}


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
    return {**presets[name].model_dump(), **overrides}


def resolve_model(value: str | dict | ModelSpec) -> ModelSpec:
    """A ModelSpec from a preset name, a field mapping, or ``{"preset": NAME, **overrides}``.

    Raises ValueError for an unknown preset name and pydantic's ValidationError (a
    ValueError) for a bad field."""
    return ModelSpec.model_validate(expand_preset(value, "model"))


def resolve_hardware(value: str | dict | HardwareSpec) -> HardwareSpec:
    """A HardwareSpec from a preset name, a field mapping, or ``{"preset": NAME, ...}``.

    Raises like :func:`resolve_model`."""
    return HardwareSpec.model_validate(expand_preset(value, "hardware"))
