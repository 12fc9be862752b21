"""The KV cache config vLLM's engine core builds for a real model, built the same way.

Runs inside the parity venv (record.py imports it). ``EngineCore._initialize_kv_caches``
asks each worker's model runner for its layers' KV cache specs, then groups them,
sizes the pool and resolves the block sizes; this module does those steps with vLLM's
own functions on the model vLLM itself constructs from the config.json:

* the model class vLLM's registry picks for the config, built on the ``meta`` device
  (no weights, no memory), under the ``VllmConfig`` made from the stream's settings with
  every other knob at vLLM's default (``CacheConfig.prefix_cache_retention_interval``
  among them);
* each attention layer's ``get_kv_cache_spec`` (as ``GPUModelRunner.get_kv_cache_spec``
  collects them: layers sharing another's KV skipped, the backend's customisation
  applied), with the attention backend an H100 gets for these models
  (``FlashAttentionBackend``: the CPU backend this recorder runs on would pick 32-token
  kernel blocks for sliding windows, a GPU the engine's block size);
* ``get_global_kv_cache_groups``, ``get_kv_cache_configs`` (the stream's pool size through
  ``num_gpu_blocks_override``, as ``--num-gpu-blocks-override`` sets it),
  ``generate_scheduler_kv_cache_config`` and ``resolve_kv_cache_block_sizes``.

The model's config.json is pagesim's shipped copy (``scenarios/models/<name>.json``) with
two edits that change no KV spec, said where they are made: gpt-oss's MXFP4
``quantization_config`` is dropped (its expert kernels need CUDA to construct; weights
keep no KV), and Gemma 3's language-model config gets the text-only architecture
``Gemma3ForCausalLM`` (the multimodal checkpoint's ``text_config`` carries none).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Recorder-only edits of a shipped config.json (see the module docstring).
_DROP_KEYS = ("quantization_config",)
_ARCHITECTURES = {"gemma3_text": ["Gemma3ForCausalLM"]}


def model_dir(name: str) -> str:
    """A directory holding the shipped config.json of model ``name``, as vLLM reads it."""
    config = json.loads((REPO / "scenarios" / "models" / f"{name}.json").read_text())
    for key in _DROP_KEYS:
        config.pop(key, None)
    if "architectures" not in config and config.get("model_type") in _ARCHITECTURES:
        config["architectures"] = _ARCHITECTURES[config["model_type"]]
    root = Path(os.environ.get("PAGESIM_PARITY_MODEL_DIR", "/tmp/pagesim-parity-models")) / name
    root.mkdir(parents=True, exist_ok=True)
    path = root / "config.json"
    text = json.dumps(config, indent=1)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return str(root)


def _init_distributed(vllm_config) -> None:
    """One rank, gloo over a file (no port to find free), as a worker would set it up."""
    from vllm.config import set_current_vllm_config
    from vllm.distributed import (
        init_distributed_environment,
        initialize_model_parallel,
        model_parallel_is_initialized,
    )

    if model_parallel_is_initialized():
        return
    handle, path = tempfile.mkstemp(prefix="pagesim-parity-dist-")
    os.close(handle)
    os.unlink(path)
    with set_current_vllm_config(vllm_config):
        init_distributed_environment(
            world_size=1,
            rank=0,
            local_rank=0,
            distributed_init_method=f"file://{path}",
            backend="gloo",
        )
        initialize_model_parallel(1, 1)


def layer_specs(vllm_config) -> dict:
    """Each attention layer's KV cache spec, as ``GPUModelRunner.get_kv_cache_spec``
    collects them from the model vLLM constructs (on the meta device)."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.attention.attention import Attention
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    from vllm.model_executor.model_loader.utils import get_model_architecture
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend
    from vllm.v1.kv_cache_interface import AttentionSpec

    try:
        from vllm.v1.worker.utils import customize_attention_spec
    except ImportError:  # (where 0.33 keeps it)
        from vllm.v1.worker.gpu_model_runner import customize_attention_spec
    from vllm.config import get_layers_from_vllm_config

    _init_distributed(vllm_config)
    with set_current_vllm_config(vllm_config), torch.device("meta"):
        model_class, _ = get_model_architecture(vllm_config.model_config)
        model_class(vllm_config=vllm_config, prefix="")
    specs = {}
    for name, layer in get_layers_from_vllm_config(vllm_config, AttentionLayerBase).items():
        if isinstance(layer, Attention) and layer.kv_sharing_target_layer_name:
            continue
        layer.attn_backend = FlashAttentionBackend  # what an H100 runs (docstring)
        spec = layer.get_kv_cache_spec(vllm_config)
        if spec is None:
            continue
        if isinstance(spec, AttentionSpec):
            spec = customize_attention_spec(FlashAttentionBackend, spec)
        specs[name] = spec
    return specs


def build(vllm_config, num_gpu_blocks: int):
    """(the scheduler's KVCacheConfig, scheduler block size, hash block size) for the
    model of ``vllm_config`` with a pool of ``num_gpu_blocks``, through vLLM's own
    functions (see the module docstring). Mutates ``vllm_config`` as the engine core
    does (the pool size, the block size)."""
    from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs
    from vllm.v1.core.kv_cache_utils import (
        generate_scheduler_kv_cache_config,
        resolve_kv_cache_block_sizes,
    )

    try:
        from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs

        register_all_kvcache_specs(vllm_config)
    except ImportError:
        pass
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend
    from vllm.v1.attention.backends.utils import (
        get_supported_kv_cache_layouts,
        resolve_kv_cache_layout,
    )

    specs = [layer_specs(vllm_config)]
    layouts = [layout.name for layout in get_supported_kv_cache_layouts([FlashAttentionBackend])]
    resolve_kv_cache_layout(vllm_config, [layouts], specs[0].values())
    vllm_config.cache_config.num_gpu_blocks_override = num_gpu_blocks
    groups = get_global_kv_cache_groups(vllm_config, specs)
    configs = get_kv_cache_configs(vllm_config, specs, [1 << 50], groups)
    config = generate_scheduler_kv_cache_config(configs)
    vllm_config.cache_config.num_gpu_blocks = config.num_blocks
    participating = [
        g.kv_cache_spec.block_size
        for g in config.kv_cache_groups
        if g.kv_cache_spec.prefix_cacheable
    ]
    vllm_config.cache_config.block_size = min(participating)
    scheduler_block, hash_block = resolve_kv_cache_block_sizes(config, vllm_config)
    config.hash_block_size = hash_block
    return config, scheduler_block, hash_block


def describe(config) -> list[dict]:
    """Each group of ``config`` as the record keeps it: its kind, window and layers."""
    return [
        {
            "kind": type(g.kv_cache_spec).__name__,
            "sliding_window": getattr(g.kv_cache_spec, "sliding_window", None),
            "block_size": g.kv_cache_spec.block_size,
            "layers": len(g.layer_names),
        }
        for g in config.kv_cache_groups
    ]
