"""The scenario's sections besides the model, hardware, workload and cost model: the KV
cache, the scheduler, preemption, eviction, routing, the SLO, the run's length and the
step-time backend. Policy names are checked against the registries in ``policies/``, so
a typo lists the valid names.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from typing import Any, Literal

from pydantic import (
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from backend.base import Allocator
from sim.config.allocators import PLUGIN_FORMS, is_plugin, load_allocator_class
from sim.config.allocators import SHIPPED as SHIPPED_ALLOCATORS
from sim.config.errors import error_at
from sim.config.files import base_dir
from sim.config.hardware import HardwareSpec, ModelSpec
from sim.config.hints import did_you_mean
from sim.config.pool import kv_pool_blocks
from sim.config.schema import StrictModel

_GIB = 1 << 30


_REGISTRIES = {
    "batching": "BATCHING",
    "scheduling": "SCHEDULERS",
    "preemption": "VICTIMS",
    "eviction": "EVICTORS",
    "routing": "ROUTERS",
}


@functools.cache
def _import_policy_modules() -> None:
    """Import every module of ``policies`` once, so everything that registers itself
    has done so before a name is checked."""
    import policies

    for info in pkgutil.iter_modules(policies.__path__, "policies."):
        importlib.import_module(info.name)


def _registry(family: str):
    """The registry of a policy family (``scheduling``, ``preemption``, ...)."""
    _import_policy_modules()
    return getattr(importlib.import_module(f"policies.{family}"), _REGISTRIES[family])


def _check_policy(family: str, name: str) -> str:
    """``name`` if registered in ``family`` or a ``module:attr`` / ``file.py:attr``
    plug-in (loaded at run time, not here: loading runs user code)."""
    registry = _registry(family)
    if name in registry:
        return name
    hint = did_you_mean(name, registry.names())
    raise ValueError(f"unknown {registry.family} policy {name!r}{hint}")


class CacheSpec(StrictModel):
    """The KV pool and its allocator (see the module docstring for the pool size)."""

    block_size: int = Field(default=16, ge=1)
    num_blocks: int | None = Field(default=None, ge=1)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    #: None: sim.config.pool's default reserve for the model and tp
    activation_reserve_gib: float | None = Field(default=None, ge=0)
    prefix_caching: bool = False
    cpu_swap_gib: float = Field(default=0.0, ge=0)
    num_cpu_blocks: int | None = Field(default=None, ge=0)
    #: a shipped allocator's name, or a user's Allocator subclass: "module:Class" or
    #: "path/file.py:Class" (see sim/config/allocators.py), loaded at validation
    allocator: str = "paged"
    _plugin: type[Allocator] | None = PrivateAttr(default=None)

    @field_validator("allocator")
    @classmethod
    def _shipped_or_plugin(cls, name: str) -> str:
        if name in SHIPPED_ALLOCATORS or ":" in name:
            return name
        shipped = ", ".join(repr(n) for n in SHIPPED_ALLOCATORS)
        hint = did_you_mean(name, list(SHIPPED_ALLOCATORS))
        raise ValueError(f"expected {shipped} or {PLUGIN_FORMS}, got {name!r}{hint}")

    @model_validator(mode="after")
    def _cpu_size_and_allocator(self, info: ValidationInfo) -> CacheSpec:
        if self.num_cpu_blocks is not None and self.cpu_swap_gib > 0:
            raise error_at("cache.num_cpu_blocks", "set num_cpu_blocks or cpu_swap_gib, not both")
        if is_plugin(self.allocator):
            try:
                self._plugin = load_allocator_class(self.allocator, base_dir(info))
            except ValueError as err:
                raise error_at("cache.allocator", str(err)) from None
        supported = self.allocator == "paged" or (
            self._plugin is not None and self._plugin.supports_prefix_caching
        )
        if self.prefix_caching and not supported:
            raise error_at(
                "cache.prefix_caching",
                "prefix caching needs the paged allocator or a plug-in whose "
                f"supports_prefix_caching is True, got allocator {self.allocator!r}",
            )
        return self

    @property
    def plugin_allocator(self) -> type[Allocator] | None:
        """The Allocator subclass ``allocator`` names if it is a plug-in, else None."""
        return self._plugin

    def device_blocks(self, model: ModelSpec, hw: HardwareSpec, tp: int = 1) -> int:
        """Device blocks per replica: ``num_blocks``, or derived from memory.
        Raises ValueError if the model leaves no room for KV on ``tp`` GPUs."""
        if self.num_blocks is not None:
            return self.num_blocks
        reserve = self.activation_reserve_gib
        return kv_pool_blocks(
            model,
            hw,
            tensor_parallel=tp,
            block_size=self.block_size,
            gpu_memory_utilization=self.gpu_memory_utilization,
            activation_reserve_bytes=None if reserve is None else int(reserve * _GIB),
        )

    def cpu_blocks(self, model: ModelSpec, tp: int = 1) -> int:
        """CPU swap blocks per replica: ``num_cpu_blocks``, or ``cpu_swap_gib`` of each
        GPU's host memory divided by that GPU's share of one block."""
        if self.num_cpu_blocks is not None:
            return self.num_cpu_blocks
        block_bytes = self.block_size * model.kv_bytes_per_token(tp)
        return int(self.cpu_swap_gib * _GIB // block_bytes)


class SchedulerSpec(StrictModel):
    policy: str = Field(default="fcfs", validate_default=True)
    #: keyword arguments of the policy's constructor
    params: dict[str, Any] = Field(default_factory=dict)
    max_num_seqs: int = Field(default=256, ge=1)
    max_num_batched_tokens: int = Field(default=8192, ge=1)
    chunked_prefill: bool = True
    #: fraction of device blocks kept free when admitting a new request
    watermark: float = Field(default=0.01, ge=0, lt=1)
    #: "whole-prompt": admit only if the whole prompt's KV fits now; "first-chunk": only
    #: the first chunk must fit, later chunks take blocks as they run (paged only)
    admission: Literal["whole-prompt", "first-chunk"] = "whole-prompt"
    #: which kinds of work a step may hold (policies.batching): mixed, prefill-first,
    #: decode-first or static
    batching: str = Field(default="mixed", validate_default=True)

    @field_validator("policy")
    @classmethod
    def _registered(cls, name: str) -> str:
        return _check_policy("scheduling", name)

    @field_validator("batching")
    @classmethod
    def _registered_batching(cls, name: str) -> str:
        return _check_policy("batching", name)


class PreemptionSpec(StrictModel):
    mode: Literal["recompute", "swap"] = "recompute"
    victim: str = Field(default="last-arrived", validate_default=True)

    @field_validator("victim")
    @classmethod
    def _registered(cls, name: str) -> str:
        return _check_policy("preemption", name)


class EvictionSpec(StrictModel):
    """Which cached prefix block is reclaimed first (prefix caching only)."""

    policy: str = Field(default="lru", validate_default=True)

    @field_validator("policy")
    @classmethod
    def _registered(cls, name: str) -> str:
        return _check_policy("eviction", name)


class RoutingSpec(StrictModel):
    replicas: int = Field(default=1, ge=1)
    router: str = Field(default="round-robin", validate_default=True)
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("router")
    @classmethod
    def _registered(cls, name: str) -> str:
        return _check_policy("routing", name)


class SLOSpec(StrictModel):
    """Targets for goodput: a request meets its SLO if both hold."""

    ttft_s: float = Field(default=2.0, gt=0)
    tpot_s: float = Field(default=0.2, gt=0)


class SimulationSpec(StrictModel):
    """Run length (requests or simulated seconds, whichever ends first; num_requests
    defaults to 1000 when neither is given; both null replays a whole trace), the
    warm-up excluded from metrics, the seed, and a safety horizon for the SimPy clock."""

    num_requests: int | None = Field(default=None, ge=1)
    duration_s: float | None = Field(default=None, gt=0)
    warmup_requests: int = Field(default=0, ge=0)
    seed: int = Field(default=0, ge=0)
    max_sim_time_s: float = Field(default=1e6, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _default_length(cls, data: Any) -> Any:
        if isinstance(data, dict) and "num_requests" not in data and "duration_s" not in data:
            return {**data, "num_requests": 1000}
        return data

    @model_validator(mode="after")
    def _warmup_leaves_requests(self) -> SimulationSpec:
        if self.num_requests is not None and self.warmup_requests >= self.num_requests:
            raise error_at(
                "simulation.warmup_requests",
                f"expected fewer than num_requests ({self.num_requests}), "
                f"got {self.warmup_requests}",
            )
        return self


class BackendSpec(StrictModel):
    """Where step times come from: ``model`` (the cost model) or ``torch`` (run the step
    on the real paged backend and measure it)."""

    kind: Literal["model", "torch"] = "model"
    device: Literal["cpu", "cuda"] = "cpu"
    dtype: Literal["float32", "float16", "bfloat16"] = "float32"
