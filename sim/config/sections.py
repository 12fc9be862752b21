"""The scenario's sections besides the model, hardware, workload and cost model: the KV
cache, the scheduler, preemption, eviction, routing, the SLO, the run's length and the
step-time backend. Policy names are checked against the registries in ``policies/``, so
a typo lists the valid names.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from backend.base import Allocator
from backend.shipped import PAGED
from policies.context import PolicyError, check_params
from sim.catalog.hardware import HardwareSpec, ModelSpec
from sim.catalog.pool import kv_pool_blocks
from sim.config.allocators import PLUGIN_FORMS, connector_gap, is_plugin, load_allocator_class
from sim.config.allocators import SHIPPED as SHIPPED_ALLOCATORS
from sim.config.disaggregation import DisaggregationSpec
from sim.config.engines import scheduler_with_defaults
from sim.config.errors import error_at
from sim.config.files import base_dir
from sim.config.offload_tiers import OffloadTierSpec, check_tier_order
from sim.config.policy_names import check_policy_name, policy_registry
from sim.inputs.hints import did_you_mean
from sim.inputs.schema import StrictModel, drop_unset

_GIB = 1 << 30


def _check_params(family: str, name: str, params: dict[str, Any], path: str) -> None:
    """Raise an error at ``path`` if a registered policy does not take ``params`` (a
    plug-in's are checked when it is built: loading it runs user code)."""
    registry = policy_registry(family)
    if ":" in name:
        return
    try:
        check_params(registry.get(name), params)
    except PolicyError as err:
        raise error_at(path, f"{name}: {err}") from None


def _as_choice(value: Any) -> Any:
    return {"policy": value} if isinstance(value, str) else value


class PolicyChoice(StrictModel):
    """A policy of a secondary family, written as its name or as ``{policy: name,
    params: {...}}``; dumped back as the bare name when it has no params."""

    policy: str
    """The policy's registered name, or a plug-in written ``module:attr`` or ``path/file.py:attr``
    (a relative file is looked up beside the scenario first)."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of the policy's constructor; a name a registered policy does not take is an
    error when the scenario is validated."""

    @model_serializer(mode="wrap")
    def _compact(self, handler):
        return self.policy if not self.params else handler(self)


Choice = Annotated[PolicyChoice, BeforeValidator(_as_choice)]


def _checked_choice(family: str, choice: PolicyChoice, path: str) -> PolicyChoice:
    try:
        check_policy_name(family, choice.policy)
    except ValueError as err:
        raise error_at(f"{path}.policy" if choice.params else path, str(err)) from None
    _check_params(family, choice.policy, choice.params, f"{path}.params")
    return choice


class CacheSpec(StrictModel):
    """The KV pool and its allocator: block size, pool size (given, or derived from GPU
    memory), prefix caching and CPU swap space."""

    block_size: int = Field(default=16, ge=1)
    """Tokens per KV block (vLLM's ``--block-size``): the unit the allocator hands out and that
    prefix caching shares."""
    num_blocks: int | None = Field(default=None, ge=1)
    """Device KV blocks per replica, ``block_size`` token slots each. Unset (null): sized from
    memory, ``gpu_memory_utilization`` of one GPU less its share of the weights and the
    activation reserve."""
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    """Fraction of each GPU's memory, in (0, 1], that weights, activations and the KV pool may fill
    (vLLM's ``--gpu-memory-utilization``); unused when ``num_blocks`` is set."""
    activation_reserve_gib: float | None = Field(default=None, ge=0)
    """GiB per GPU held back from the KV pool for a step's activations. Unset (null): an estimate of
    one forward pass at 8192 batched tokens and 256 sequences (vLLM profiles a dummy step
    instead)."""
    prefix_caching: bool = False
    """Automatic prefix caching: full blocks of identical prompt prefixes are shared between
    requests and kept after use until evicted (see ``eviction``); paged allocator only."""
    prefix_cache_retention_interval: int | Literal["dense"] = Field(default=0)
    """Which full blocks of a sliding window the prefix cache keeps (vLLM's
    ``--prefix-cache-retention-interval``, 0 by default): 0 only the window's blocks before
    the points a later request can resume at (the end of a prompt; the end of a shared
    prefix that full attention holds and the window lacks, so later requests sharing it
    hit); a multiple of ``block_size`` also those before every multiple of it; ``dense``
    every full block (earlier vLLM releases). Full attention always keeps every block."""
    cpu_swap_gib: float = Field(default=0.0, ge=0)
    """Host memory per GPU, in GiB, for the KV of requests swapped out on preemption (vLLM's
    ``swap_space``); 0: no CPU pool. ``preemption.mode: swap`` needs a CPU pool."""
    num_cpu_blocks: int | None = Field(default=None, ge=0)
    """The CPU swap pool per replica in blocks, instead of ``cpu_swap_gib`` (set one, not both)."""
    kv_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = "auto"
    """Element type of the KV cache (vLLM's ``--kv-cache-dtype``): ``auto`` keeps K and V in the
    model's dtype; the ``fp8`` kinds keep one byte an element, halving a bf16 model's KV per token
    (so the pool holds twice the tokens) and the bytes decode attention reads, with the weights
    unchanged."""
    offload: list[OffloadTierSpec] = Field(default_factory=list)
    """Tiers of the prefix cache below the device pool (needs ``prefix_caching``): a ``cpu`` tier,
    then optionally ``disk`` and ``remote``, e.g. ``[{tier: cpu, capacity_gib: 8}]``. Empty: a
    block the device's cache evicts is gone."""
    allocator: str = "paged"
    """How KV memory is reserved: ``paged`` allocates blocks as sequences grow (PagedAttention); the
    contiguous baselines reserve one region per request up front: ``max_model_len`` slots
    (``contiguous-max``), the prompt plus the true output length rounded up to a power of two
    (``contiguous-pow2``), or exactly prompt plus output (``contiguous-oracle``). Or a user's
    Allocator subclass, ``module:Class`` or ``path/file.py:Class`` (sim/config/allocators.py),
    loaded when the scenario is validated."""
    _plugin: type[Allocator] | None = PrivateAttr(default=None)

    @field_validator("prefix_cache_retention_interval")
    @classmethod
    def _retention(cls, interval: int | str) -> int | str:
        if isinstance(interval, int) and (isinstance(interval, bool) or interval < 0):
            raise ValueError(
                f"expected 0, a positive multiple of block_size or 'dense', got {interval!r}"
            )
        return interval

    @property
    def retention_interval(self) -> int | None:
        """``prefix_cache_retention_interval`` as the allocator takes it (None: dense)."""
        interval = self.prefix_cache_retention_interval
        return None if interval == "dense" else interval

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
        supported = self.allocator == PAGED or (
            self._plugin is not None and self._plugin.supports_prefix_caching
        )
        if self.prefix_caching and not supported:
            raise error_at(
                "cache.prefix_caching",
                "prefix caching needs the paged allocator or a plug-in whose "
                f"supports_prefix_caching is True, got allocator {self.allocator!r}",
            )
        self._check_offload()
        return self

    def _check_offload(self) -> None:
        if not self.offload:
            return
        if not self.prefix_caching:
            raise error_at("cache.offload", "an offload tier needs cache.prefix_caching: true")
        wrong = check_tier_order(self.offload)
        if wrong is not None:
            raise error_at("cache.offload", wrong)
        if self.allocator == PAGED:
            return
        gap = "it takes none" if self._plugin is None else connector_gap(self._plugin)
        if gap is not None:
            raise error_at(
                "cache.offload",
                "an offload tier works beside the paged allocator or a plug-in that "
                f"takes KV from a connector; allocator {self.allocator!r}: {gap}",
            )

    def offload_blocks(self, model: ModelSpec, tp: int = 1) -> tuple[int, ...]:
        """Each offload tier's blocks per replica, nearest the GPU first (none: ())."""
        block_bytes = self.replica_block_bytes(model, tp)
        return tuple(tier.blocks(block_bytes) for tier in self.offload)

    def replica_block_bytes(self, model: ModelSpec, tp: int = 1) -> int:
        """KV bytes of one block summed over the replica's ``tp`` GPUs (what an offload
        tier holds of it, as vLLM counts ``--kv-offloading-size``)."""
        return tp * model.kv_block_bytes(self.block_size, tp, self.kv_element_bytes(model))

    @model_serializer(mode="wrap")
    def _leave_out_auto_kv_dtype(self, handler) -> dict[str, Any]:
        return drop_unset(handler(self), {"kv_dtype": "auto", "offload": []})

    def kv_element_bytes(self, model: ModelSpec) -> int:
        """Bytes of one K or V element in the pool."""
        return model.dtype_bytes if self.kv_dtype == "auto" else 1

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
            kv_element_bytes=self.kv_element_bytes(model),
        )

    def cpu_blocks(self, model: ModelSpec, tp: int = 1) -> int:
        """CPU swap blocks per replica: ``num_cpu_blocks``, or ``cpu_swap_gib`` of each
        GPU's host memory divided by that GPU's share of one block."""
        if self.num_cpu_blocks is not None:
            return self.num_cpu_blocks
        block_bytes = model.kv_block_bytes(self.block_size, tp, self.kv_element_bytes(model))
        return int(self.cpu_swap_gib * _GIB // block_bytes)


class SchedulerSpec(StrictModel):
    """Which waiting request runs next, what one step may hold, and a step's limits."""

    engine: Literal["pagesim", "vllm-v1"] = "vllm-v1"
    """Whose scheduling rules the replicas follow: ``vllm-v1`` (default), vLLM V1's scheduler
    step for step, or ``pagesim``, the simulator's own (mixed batching, whole-prompt admission,
    the last arrival preempted, a 1 % watermark): ``vllm-v1`` (pinned to the version it is checked
    against, policies/vllm_v1.py): it sets the batching mode, admission, victim and watermark
    this section and ``preemption`` leave unset, offers a scheduled chunk's blocks to prefix
    lookups in the same step, and keeps vLLM's null block out of the pool."""
    policy: str = Field(default="fcfs", validate_default=True)
    """Which waiting request is admitted first (vLLM has ``fcfs`` and ``priority``): a registered
    scheduling policy or a ``module:attr`` / ``file.py:attr`` plug-in."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of the scheduling policy's constructor (``aging_s`` for ``priority``)."""
    max_num_seqs: int = Field(default=256, ge=1)
    """Most sequences running at once on a replica, each parallel sample counting as one (vLLM's
    ``--max-num-seqs``)."""
    max_num_batched_tokens: int = Field(default=8192, ge=1)
    """Token budget of one step: prompt tokens prefilled plus one per decoding sequence (vLLM's
    ``--max-num-batched-tokens``); at least ``max_num_seqs``. Without chunked prefill a longer
    prompt is rejected."""
    long_prefill_token_threshold: int = Field(default=0, ge=0)
    """Most prompt tokens one request computes in a step when other requests are running or
    waiting (vLLM's ``--long-prefill-token-threshold``), so one long prompt cannot take the
    whole budget; 0: no cap."""
    chunked_prefill: bool = True
    """Split prompts into chunks that fit the step's token budget, so prefill shares steps with
    decodes (vLLM's chunked prefill); off: a prompt is prefilled in one step."""
    watermark: float = Field(default=0.01, ge=0, lt=1)
    """Fraction of device blocks, in [0, 1), kept free when admitting a new request so running
    sequences have room to grow (vLLM's watermark); waived on an empty replica and, under the
    ``pagesim`` engine, for resumed requests. The ``vllm-v1`` engine (the default) sets 0, as vLLM
    does."""
    async_scheduling: bool = False
    """The engine schedules each step while the one before it runs (vLLM's async scheduling, default
    since v0.12): a request that arrives while a step runs is first scheduled in the step after
    the next, one step later than a synchronous engine takes it. ``cost_model.params.cpu_overlap``
    is its timing side."""
    admission: Choice = Field(default="whole-prompt", validate_default=True)
    """When a waiting request's prompt may start: ``whole-prompt`` (its whole prompt's KV must fit
    now, as in vLLM) or ``first-chunk`` (only the first chunk must fit, later chunks take blocks
    as they run; paged pools with chunked prefill only) or ``whole-sequence`` (the whole
    sequence must fit, only the chunk is allocated: vLLM V1, what the default ``vllm-v1`` engine
    sets). A name, or ``{policy: NAME, params: {...}}``."""
    batching: Choice = Field(default="mixed", validate_default=True)
    """What one step may hold: ``mixed`` (decodes, prompt chunks and new prompts share the token
    budget), ``prefill-first``, ``decode-first``, ``static`` (request-level batching) or
    ``vllm-v1`` (vLLM V1's step, what the default ``vllm-v1`` engine sets). A name, or
    ``{policy: NAME, params: {...}}``."""

    @model_validator(mode="before")
    @classmethod
    def _engine_defaults(cls, data: Any) -> Any:
        """What this section leaves unset comes from its engine's profile."""
        return scheduler_with_defaults(data)

    @field_validator("policy")
    @classmethod
    def _registered(cls, name: str) -> str:
        return check_policy_name("scheduling", name)

    @model_validator(mode="after")
    def _policies_take_params(self) -> SchedulerSpec:
        _check_params("scheduling", self.policy, self.params, "scheduler.params")
        _checked_choice("admission", self.admission, "scheduler.admission")
        _checked_choice("batching", self.batching, "scheduler.batching")
        return self


class PreemptionSpec(StrictModel):
    """Who is preempted when a step finds the free list empty (``victim``, with
    ``params``) and how (``mode``: recompute or swap)."""

    mode: Choice = Field(default="recompute", validate_default=True)
    """What happens to a preempted request's KV: ``recompute`` (its blocks are freed and it is
    prefilled again from prompt plus generated tokens) or ``swap`` (its blocks go to the CPU pool
    and come back; needs ``cache.cpu_swap_gib`` or ``cache.num_cpu_blocks``). A name, or
    ``{policy: NAME, params: {...}}``."""
    victim: str = Field(default="last-arrived", validate_default=True)
    """Which running request is preempted when a step needs a block and the free list is empty: a
    registered victim policy or a plug-in. The default ``vllm-v1`` engine sets ``last-admitted``
    (the tail of vLLM's running list; ``lowest-priority`` under ``scheduler.policy: priority``)."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of the victim policy's constructor."""

    @field_validator("victim")
    @classmethod
    def _registered(cls, name: str) -> str:
        return check_policy_name("preemption", name)

    @model_validator(mode="after")
    def _policies_take_params(self) -> PreemptionSpec:
        _check_params("preemption", self.victim, self.params, "preemption.params")
        _checked_choice("preemption mode", self.mode, "preemption.mode")
        return self


class EvictionSpec(StrictModel):
    """Which cached prefix block is reclaimed first (prefix caching only)."""

    policy: str = Field(default="lru", validate_default=True)
    """Which cached prefix block, referenced by no running request, is reclaimed first when the free
    list runs dry (vLLM evicts LRU); matters only with ``cache.prefix_caching``."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of the eviction policy's constructor (e.g. ``half_life`` for
    ``reuse-weighted``)."""

    @field_validator("policy")
    @classmethod
    def _registered(cls, name: str) -> str:
        return check_policy_name("eviction", name)

    @model_validator(mode="after")
    def _policy_takes_params(self) -> EvictionSpec:
        _check_params("eviction", self.policy, self.params, "eviction.params")
        return self


class RoutingSpec(StrictModel):
    """Data parallelism: identical replicas, and the router that picks one per request."""

    replicas: int = Field(default=1, ge=1)
    """Identical replicas (data parallelism), each with ``tensor_parallel`` GPUs, its own KV pool
    and its own scheduler."""
    router: str = Field(default="round-robin", validate_default=True)
    """Which replica an arriving request goes to (moot with one replica): a registered router or a
    plug-in."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of the router's constructor."""
    disaggregation: DisaggregationSpec | None = None
    """Prefill and decode on different instances: a prefill pool and a decode pool, the link
    between them and the decider (``replicas`` and ``router`` are then each pool's). Unset: every
    replica serves both phases."""

    @field_validator("router")
    @classmethod
    def _registered(cls, name: str) -> str:
        return check_policy_name("routing", name)

    @model_serializer(mode="wrap")
    def _leave_out_colocated(self, handler) -> dict[str, Any]:
        data = drop_unset(handler(self), {"disaggregation": None})
        if self.disaggregation is not None:  # (each pool's, then: a dump validates again)
            for field in ("replicas", "router", "params"):
                data.pop(field, None)
        return data

    @model_validator(mode="after")
    def _policy_takes_params(self) -> RoutingSpec:
        _check_params("routing", self.router, self.params, "routing.params")
        split = self.disaggregation
        if split is not None:
            for field in ("replicas", "router", "params"):
                if field in self.model_fields_set:
                    raise error_at(
                        f"routing.{field}",
                        "set it per pool, under routing.disaggregation.prefill and .decode",
                    )
            for role, pool in (("prefill", split.prefill), ("decode", split.decode)):
                path = f"routing.disaggregation.{role}.params"
                _check_params("routing", pool.router, pool.params, path)
        return self
