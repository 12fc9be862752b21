"""The real paged KV backend: torch KV pool, Triton kernels with torch fallbacks, a
float64 reference, a small Llama-style model and an executor for the engine's steps.

Imports nothing from ``sim`` or ``policies`` (the GPU machine has neither simpy nor
pydantic); Triton is optional and loaded only when a Triton path is used.
"""

from backend.real.kv_cache import KVCache, slot_mapping
from backend.real.model import LlamaModel
from backend.real.paged_executor import PagedExecutor
from backend.real.reference import ContiguousRunner
from backend.real.shape import LLAMA3_8B, ModelShape

__all__ = [
    "LLAMA3_8B",
    "ContiguousRunner",
    "KVCache",
    "LlamaModel",
    "ModelShape",
    "PagedExecutor",
    "slot_mapping",
]
