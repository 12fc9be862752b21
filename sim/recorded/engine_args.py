"""An engine's arguments as pagesim's scenario settings.

Takes vLLM's argument names (``max_num_seqs``, ``--max-num-batched-tokens``, ...: dashes
or underscores, with or without the leading ``--``) from a file or a recorded run's
metadata, fills what was not recorded with the engine's own defaults, and gives the
scenario sections that replay it:

=============================  =====================================================
vLLM argument                  scenario field
=============================  =====================================================
max_num_seqs                   scheduler.max_num_seqs
max_num_batched_tokens         scheduler.max_num_batched_tokens
enable_chunked_prefill         scheduler.chunked_prefill (V1 default: on)
max_model_len                  model.max_model_len
block_size                     cache.block_size (default 16)
enable_prefix_caching          cache.prefix_caching (V1 default: on)
gpu_memory_utilization         cache.gpu_memory_utilization (default 0.9): the pool is
                               derived from memory as vLLM does (sim.catalog.pool)
num_gpu_blocks (logged)        cache.num_blocks = N: vLLM keeps block 0 as its null
                               block, so N - 1 hold KV (the vllm-v1 profile's rule)
tensor_parallel_size           tensor_parallel
dtype                          model.dtype_bytes (auto: the config's torch_dtype)
kv_cache_dtype                 cache.kv_dtype (fp8, fp8_e4m3, fp8_e5m2; another: noted)
enable_expert_parallel         expert_parallel
=============================  =====================================================

A vLLM run replays under vLLM's own scheduling rules (``scheduler.engine: vllm-v1``:
no watermark, the running list's tail preempted by recompute, whole-sequence admission,
the null block), other engines' under pagesim's with no watermark. From vLLM 0.12 it
schedules asynchronously by default: ``scheduler.async_scheduling`` and
``cost_model.params.cpu_overlap``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sim.config.errors import format_validation_error
from sim.recorded.files import read_json, read_yaml
from sim.recorded.run import WEIGHT_DTYPE_BYTES, EngineConfig, RecordError

#: vLLM's argument names (and the aliases recorded runs use) -> EngineConfig fields.
_NAMES = {
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "max_model_len": "max_model_len",
    "block_size": "block_size",
    "enable_prefix_caching": "enable_prefix_caching",
    "enable_chunked_prefill": "enable_chunked_prefill",
    "tensor_parallel_size": "tensor_parallel_size",
    "tensor_parallelism": "tensor_parallel_size",
    "tp": "tensor_parallel_size",
    "dtype": "dtype",
    "kv_cache_dtype": "kv_cache_dtype",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "num_gpu_blocks": "num_gpu_blocks",
    "num_gpu_blocks_override": "num_gpu_blocks",
    "version": "version",
    "engine": "engine",
    "cpu_offload_gib": "cpu_offload_gib",
    "enable_expert_parallel": "enable_expert_parallel",
}
#: EngineConfig fields -> the scenario fields that replay them (the module doc's table).
SCENARIO_FIELDS = {
    "max_num_seqs": "scheduler.max_num_seqs",
    "max_num_batched_tokens": "scheduler.max_num_batched_tokens",
    "enable_chunked_prefill": "scheduler.chunked_prefill",
    "max_model_len": "model.max_model_len",
    "block_size": "cache.block_size",
    "enable_prefix_caching": "cache.prefix_caching",
    "gpu_memory_utilization": "cache.gpu_memory_utilization",
    "num_gpu_blocks": "cache.num_blocks",
    "tensor_parallel_size": "tensor_parallel",
    "dtype": "model.dtype_bytes",
    "kv_cache_dtype": "cache.kv_dtype",
    "enable_expert_parallel": "expert_parallel",
}
#: Keys of a recorded run's metadata that are not engine arguments (ignored, not errors).
_IGNORED = {"model", "served_model_name", "host", "port", "app", "tokenizer"}


def _key(name: str) -> str:
    return name.lstrip("-").replace("-", "_").lower()


def is_engine_argument(name: str) -> bool:
    """Whether ``name`` (any spelling) is an argument :func:`engine_config` maps."""
    return _key(name) in _NAMES


def engine_config(values: dict[str, Any], where: str) -> EngineConfig:
    """An EngineConfig from argument names and values; RecordError naming the argument
    for an unknown name or a value of the wrong kind."""
    fields: dict[str, Any] = {}
    written: dict[str, str] = {}  # field -> the name as the file wrote it
    for name, value in values.items():
        key = _key(str(name))
        if key in _IGNORED:
            continue
        if key not in _NAMES:
            known = ", ".join(sorted(k for k in _NAMES if "_" in k))
            raise RecordError(f"{where}: {name}: not an engine argument pagesim maps ({known})")
        fields[_NAMES[key]] = value
        written[_NAMES[key]] = str(name)
    try:
        return EngineConfig(**fields)
    except ValidationError as err:
        field = str(err.errors()[0]["loc"][0])
        line = format_validation_error(err, where, fields)
        raise RecordError(
            line.replace(f"{where}: {field}:", f"{where}: {written[field]}:", 1)
        ) from None


def read_engine_args(path: Path) -> EngineConfig:
    """An EngineConfig from a YAML or JSON file of engine arguments (a mapping)."""
    values = read_json(path) if path.suffix == ".json" else read_yaml(path)
    if not isinstance(values, dict):
        raise RecordError(f"{path}: expected a mapping of engine arguments")
    return engine_config(values, str(path))


def merged(base: EngineConfig, override: EngineConfig) -> EngineConfig:
    """``base`` with every field ``override`` sets."""
    fields = {k: v for k, v in dataclasses.asdict(override).items() if v is not None}
    if override.engine == "vllm" and "engine" in fields and base.engine != "vllm":
        fields.pop("engine")  # the dataclass default is not a choice
    return dataclasses.replace(base, **fields)


def scenario_sections(engine: EngineConfig) -> tuple[dict[str, Any], list[str]]:
    """The scenario fields replaying ``engine`` (module doc table) and notes on what was
    a default or is not modelled."""
    notes: list[str] = []
    cache: dict[str, Any] = {
        "block_size": engine.block_size or 16,
        "prefix_caching": True
        if engine.enable_prefix_caching is None
        else engine.enable_prefix_caching,
    }
    if engine.num_gpu_blocks is not None:
        if engine.num_gpu_blocks < 2:
            raise RecordError(f"num_gpu_blocks: expected at least 2, got {engine.num_gpu_blocks}")
        # The vllm-v1 engine profile keeps vLLM's null block out of the pool itself.
        vllm = engine.engine == "vllm"
        cache["num_blocks"] = engine.num_gpu_blocks if vllm else engine.num_gpu_blocks - 1
        notes.append(f"KV pool: the logged {engine.num_gpu_blocks} blocks less vLLM's null block")
    else:
        cache["gpu_memory_utilization"] = engine.gpu_memory_utilization or 0.9
        notes.append(
            f"KV pool derived from gpu_memory_utilization {cache['gpu_memory_utilization']:g} "
            "(no logged num_gpu_blocks)"
        )
    # vLLM's runs replay under vLLM's scheduling rules; others under pagesim's own, with
    # no watermark (neither engine keeps one by default).
    scheduler: dict[str, Any] = {
        "engine": "vllm-v1" if engine.engine == "vllm" else "pagesim",
        "watermark": 0.0,
    }
    for field, key in (
        ("max_num_seqs", "max_num_seqs"),
        ("max_num_batched_tokens", "max_num_batched_tokens"),
    ):
        value = getattr(engine, field)
        if value is None:
            notes.append(f"{field} not recorded: pagesim's default")
        else:
            scheduler[key] = value
    if engine.enable_chunked_prefill is not None:
        scheduler["chunked_prefill"] = engine.enable_chunked_prefill
    sections: dict[str, Any] = {"cache": cache, "scheduler": scheduler}
    if _async_scheduling(engine):
        scheduler["async_scheduling"] = True
        sections["cost_model"] = {"params": {"cpu_overlap": True}}
        notes.append(
            f"vLLM {engine.version}: async scheduling (default since 0.12, vllm#27614): a "
            "step is planned while the one before it runs (arrivals wait a step) and the "
            "CPU's work hides behind the GPU's"
        )
    if engine.tensor_parallel_size:
        sections["tensor_parallel"] = engine.tensor_parallel_size
    if engine.enable_expert_parallel:
        sections["expert_parallel"] = True
    if engine.kv_cache_dtype in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        cache["kv_dtype"] = engine.kv_cache_dtype
    elif engine.kv_cache_dtype not in (None, "auto"):
        notes.append(f"kv_cache_dtype {engine.kv_cache_dtype}: KV is kept in the model dtype")
    if engine.cpu_offload_gib:
        notes.append(
            f"CPU KV offloading ({engine.cpu_offload_gib:g} GiB) is not modelled: only "
            "what the GPU pool holds is cached"
        )
    return sections, notes


def dtype_bytes(engine: EngineConfig) -> int | None:
    """Bytes per weight element for ``engine.dtype`` (None: auto, the config's)."""
    if engine.dtype in (None, "auto"):
        return None
    return WEIGHT_DTYPE_BYTES[engine.dtype]  # EngineConfig admits only these names


def _async_scheduling(engine: EngineConfig) -> bool:
    """Whether the engine's version schedules asynchronously by default (vLLM >= 0.12)."""
    if engine.engine != "vllm" or not engine.version:
        return False
    parts = engine.version.lstrip("v").split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return False
    return (major, minor) >= (0, 12)
