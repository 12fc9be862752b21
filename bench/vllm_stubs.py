"""Load vLLM's block pool from a source tree, without installing vLLM or its dependencies.

Executed from the tree as they are (these are what is measured):

* ``vllm/v1/core/block_pool.py``: ``BlockPool`` (and ``BlockHashToBlockMap``);
* ``vllm/v1/core/kv_cache_utils.py``: ``KVCacheBlock``, ``FreeKVCacheBlockQueue``, the
  block hash (``hash_block_tokens``, ``get_request_block_hasher``, ``init_none_hash``);
* ``vllm/utils/hashing.py``: the hash functions (sha256 over pickle is vLLM's default);
* ``vllm/utils/math_utils.py``: ``cdiv``.

Stubbed, because the real modules import torch, the config system or the engine, and
nothing of them runs on the block pool's path with KV events off, no metrics collector,
no multimodal input, no LoRA and no prompt embeddings (a stub that is called raises, so a
stub on the measured path could not go unnoticed):

==================================  ===========================================================
``vllm.logger``                     ``init_logger``: a standard ``logging`` logger
``vllm.envs``                       one flag read only when KV events are emitted (False)
``vllm.distributed.kv_events``      KV cache events (``enable_kv_cache_events=False``)
``vllm.v1.core.kv_cache_metrics``   ``KVCacheMetricsCollector`` (no collector is passed)
``vllm.multimodal.utils``           ``get_mm_features_in_window`` (no multimodal features)
``vllm.config``                     ``VllmConfig``: only in the KV cache sizing functions
``vllm.v1.kv_cache_interface``      KV cache spec types: only in the sizing functions
``vllm.v1.kv_cache_spec_registry``  the manager registry: only in the sizing functions
``vllm.v1.utils``                   ``tensor_data``: only for prompt embeddings
``vllm.v1.request``                 ``Request``: :class:`Request` below, the fields the
                                    pool and the hasher read, and the token append with
                                    its block-hash update as vLLM's Request does it
``cbor2`` (if not installed)        only for the sha256_cbor hash, not used
==================================  ===========================================================

The packages above them (``vllm``, ``vllm.v1``, ...) are empty modules, so no
``__init__.py`` of vLLM runs. Any other ``vllm`` import fails loudly: a newer tree that
imports something new needs a decision here, not a silent placeholder.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REAL = (
    "vllm.utils.math_utils",
    "vllm.utils.hashing",
    "vllm.v1.core.kv_cache_utils",
    "vllm.v1.core.block_pool",
)
PACKAGES = ("vllm", "vllm.utils", "vllm.v1", "vllm.v1.core", "vllm.distributed", "vllm.multimodal")


class Request:
    """Stand-in for ``vllm.v1.request.Request``: what the block pool and the request
    block hasher read (``request_id``, ``all_token_ids``, ``num_tokens``,
    ``block_hashes``, ``mm_features``, ``lora_request``, ``cache_salt``,
    ``prompt_embeds``), and ``append_output_token_ids`` as vLLM's: append, then extend
    ``block_hashes`` with the hasher's new full blocks. ``all_token_ids`` is the plain
    list (vLLM wraps it in a ``ConstantList``, slower to slice)."""

    def __init__(self, request_id: str, prompt_token_ids: list[int], block_hasher=None):
        self.request_id = request_id
        self.all_token_ids: list[int] = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.block_hashes: list[bytes] = []
        self.mm_features: list = []
        self.lora_request = None
        self.cache_salt = None
        self.prompt_embeds = None
        self.session_id = None
        self.shared_prefix_boundary = 0
        self._block_hasher = block_hasher
        self.update_block_hashes()

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    def append_output_token_ids(self, token_ids: int | list[int]) -> None:
        if isinstance(token_ids, int):
            self.all_token_ids.append(token_ids)
        else:
            self.all_token_ids.extend(token_ids)
        self.update_block_hashes()

    def update_block_hashes(self) -> None:
        if self._block_hasher is not None:
            self.block_hashes.extend(self._block_hasher(self))


def _unused(name: str):
    """A function stub that says it should not have been reached."""

    def stub(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{name} is stubbed: not on the block pool's path")

    stub.__name__ = name.rsplit(".", 1)[-1]
    return stub


def _placeholders(module: str, names: str) -> dict[str, Any]:
    """Placeholder classes for names used in annotations and isinstance checks only."""
    return {name: type(name, (), {"__module__": module}) for name in names.split()}


def _stubs() -> dict[str, dict[str, Any]]:
    events = _placeholders("vllm.distributed.kv_events", "AllBlocksCleared BlockRemoved")
    events.update(_placeholders("vllm.distributed.kv_events", "BlockStored KVCacheEvent"))
    spec = "KVCacheConfig KVCacheGroupSpec KVCacheSpec MambaSpec UniformTypeKVCacheSpecs"
    interface = _placeholders("vllm.v1.kv_cache_interface", spec)
    interface["iter_layer_specs"] = _unused("vllm.v1.kv_cache_interface.iter_layer_specs")
    stubs = {
        "vllm.logger": {"init_logger": logging.getLogger},
        "vllm.envs": {"VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES": False},
        "vllm.distributed.kv_events": {"MEDIUM_GPU": "GPU", **events},
        "vllm.v1.core.kv_cache_metrics": _placeholders(
            "vllm.v1.core.kv_cache_metrics", "KVCacheMetricsCollector"
        ),
        "vllm.multimodal.utils": {
            "get_mm_features_in_window": _unused("get_mm_features_in_window")
        },
        "vllm.config": _placeholders("vllm.config", "VllmConfig"),
        "vllm.v1.kv_cache_interface": interface,
        "vllm.v1.kv_cache_spec_registry": _placeholders(
            "vllm.v1.kv_cache_spec_registry", "KVCacheSpecRegistry"
        ),
        "vllm.v1.utils": {"tensor_data": _unused("vllm.v1.utils.tensor_data")},
        "vllm.v1.request": {"Request": Request},
    }
    if importlib.util.find_spec("cbor2") is None:
        stubs["cbor2"] = {"dumps": _unused("cbor2.dumps")}
    return stubs


@dataclass(frozen=True)
class VllmBlockPool:
    """What the benchmark uses of the loaded modules."""

    source: Path
    BlockPool: type
    kv_cache_utils: types.ModuleType
    hashing: types.ModuleType
    cdiv: Any
    Request: type


def load_vllm_block_pool(source: Path) -> VllmBlockPool:
    """Execute the REAL modules from ``source`` (a tree holding ``vllm/``) over the
    stubs. Exits with one line if the tree lacks one of them or imports something
    neither loaded nor stubbed here."""
    root = Path(source).resolve()
    missing = [m for m in REAL if not (root / (m.replace(".", "/") + ".py")).is_file()]
    if missing:
        raise SystemExit(f"--vllm-src {source}: no {missing[0].replace('.', '/')}.py there")
    if "vllm" in sys.modules:
        raise SystemExit("a vllm package is already imported in this process")
    for name in PACKAGES:
        package = types.ModuleType(name)
        package.__path__ = []  # a package with nothing to find in it
        sys.modules[name] = package
    for name, attributes in _stubs().items():
        module = types.ModuleType(name)
        module.__dict__.update(attributes)
        sys.modules[name] = module
    loaded = {}
    for name in REAL:
        path = root / (name.replace(".", "/") + ".py")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except ImportError as error:
            message = f"vLLM's {path} imports what is neither loaded nor stubbed: {error}"
            raise SystemExit(message) from None
        loaded[name] = module
    return VllmBlockPool(
        source=root,
        BlockPool=loaded["vllm.v1.core.block_pool"].BlockPool,
        kv_cache_utils=loaded["vllm.v1.core.kv_cache_utils"],
        hashing=loaded["vllm.utils.hashing"],
        cdiv=loaded["vllm.utils.math_utils"].cdiv,
        Request=Request,
    )
