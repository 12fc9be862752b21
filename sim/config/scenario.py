"""The scenario: every section, validated once into a frozen :class:`Scenario`.

A scenario is validated once (:func:`sim.config.loader.load_scenario`) into a frozen
:class:`Scenario`; every section has defaults, so ``model: llama-3-8b`` alone is a valid
scenario. Every model forbids unknown fields, so a misspelt key fails with the closest
valid name.

Placement decisions:

* ``tensor_parallel`` is a top-level field (the ``hardware`` section is one GPU's
  datasheet, shared by every GPU of the group).
* ``cache.num_blocks`` set: the device pool has exactly that many blocks. Unset (the
  default): the pool is derived from memory by :func:`sim.catalog.pool.kv_pool_blocks`
  (capacity x ``gpu_memory_utilization`` - weights / tp - activation reserve). Either
  way it is sized once, at validation, and read from ``Scenario.kv_pool``.
* ``cache.cpu_swap_gib`` is per GPU (as vLLM's ``swap_space``); ``num_cpu_blocks`` sets
  the CPU pool directly instead.
* ``model`` and ``hardware`` hold the *resolved* specs after validation, so the dumped
  scenario (``scenario.json``) records the exact shapes and figures a run used.
* Paths inside a scenario (traces, length tables, calibration files) are kept as written
  (never made absolute in a dump); they resolve against the scenario file's directory.

User mistakes raise :class:`ScenarioError` with one line: ``<file>: <field.path>: <what
was expected / got>``.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BeforeValidator,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from sim.catalog.hardware import HardwareSpec, ModelSpec
from sim.catalog.pool import KVPool, check_experts_split, check_given_pool, check_tensor_parallel
from sim.catalog.presets import expand_preset
from sim.config.arrivals import TraceArrival
from sim.config.budget import OverBudget, check_memory
from sim.config.combinations import check_combinations
from sim.config.costs import CostModelSpec
from sim.config.disaggregation import pool_scenario
from sim.config.engines import preemption_with_defaults, profile_of
from sim.config.errors import error_at, format_validation_error
from sim.config.files import resolve_existing_file
from sim.config.hf_config import expand_model
from sim.config.run_sections import BackendSpec, SimulationSpec, SLOSpec
from sim.config.sections import (
    CacheSpec,
    EvictionSpec,
    PreemptionSpec,
    RoutingSpec,
    SchedulerSpec,
)
from sim.config.workload import WorkloadSpec
from sim.inputs.overrides import apply_overrides, read_overrides
from sim.inputs.schema import StrictModel, drop_unset

ResolvedModel = Annotated[ModelSpec, BeforeValidator(expand_model)]


ResolvedHardware = Annotated[
    HardwareSpec, BeforeValidator(functools.partial(expand_preset, kind="hardware"))
]


class Scenario(StrictModel):
    """One simulated deployment and its traffic. Sections are documented on their
    classes; ``model``/``hardware`` are resolved specs after validation."""

    name: str = "scenario"
    """The run's name, used in its default output folder, its report and ``pagesim compare``;
    defaults to the scenario file's name without ``.yaml``."""
    description: str = ""
    """Free text for people reading the scenario; kept in scenario.json, unused by the run."""
    #: where it came from (for error messages) and the folder relative paths live in
    _source: str = PrivateAttr(default="<scenario>")
    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)
    _kv_pool: KVPool | None = PrivateAttr(default=None)  # sized by _fits_together
    # (prefill, decode) pools' scenarios with routing.disaggregation; built by _fits_together
    _pools: tuple[Scenario, Scenario] | None = PrivateAttr(default=None)
    _pool_role: str | None = PrivateAttr(default=None)  # "prefill"/"decode": a pool's own
    model: ResolvedModel = Field(default="llama-3-8b", validate_default=True)
    """The served model: a preset name, a full shape, ``{preset: NAME, ...}`` with some fields
    overridden (e.g. ``max_model_len``), or ``{config: path/config.json, ...}``: a HuggingFace
    model configuration (a dense Llama, Mistral, Qwen2/3 or OPT type, or a Mixtral, Qwen-MoE or
    DeepSeek-V2/V3 mixture of experts), read from a file beside
    the scenario, with the same overrides. scenario.json records the resolved shape."""
    hardware: ResolvedHardware = Field(default="h100-sxm", validate_default=True)
    """One GPU of a replica (every GPU of a tensor-parallel group is alike): a preset name, full
    datasheet figures, or ``{preset: NAME, ...}`` with some fields overridden."""
    calibration: str | None = None
    """A hardware calibration file (``pagesim calibrate --observed RUN [RUN...]`` writes one):
    its fitted figures (sustained bandwidth, GEMM efficiency, link, CPU) replace the hardware
    preset's and the cost model's defaults; the scenario's own explicit settings win. Relative
    to the scenario file. Null: datasheets and published measurements only."""
    tensor_parallel: int = Field(default=1, ge=1)
    """GPUs per replica that split every layer (vLLM's ``--tensor-parallel-size``): weights and KV
    heads are sharded over them and each step pays their all-reduces. Must divide
    ``model.num_heads``, and divide or be a multiple of ``model.num_kv_heads``."""
    expert_parallel: bool = False
    """Split an MoE model's experts over the tensor-parallel group, ``experts / tensor_parallel``
    whole experts a GPU (vLLM's ``--enable-expert-parallel`` with one data-parallel rank), instead
    of every expert's width ``tensor_parallel`` ways. Attention stays tensor-parallel and the
    layer ends in the same all-reduce. Only for a model with ``moe``."""
    cache: CacheSpec = Field(default_factory=CacheSpec)
    """The KV cache: block size, pool size, prefix caching, CPU swap space and allocator."""
    scheduler: SchedulerSpec = Field(default_factory=dict, validate_default=True)
    """The step scheduler: admission order, batching mode, per-step limits, chunked prefill."""
    preemption: PreemptionSpec = Field(default_factory=dict, validate_default=True)
    """Who is preempted when a step runs out of KV blocks, and how (recompute or swap)."""
    eviction: EvictionSpec = Field(default_factory=EvictionSpec)
    """Which cached prefix block is reclaimed first (with ``cache.prefix_caching``)."""
    routing: RoutingSpec = Field(default_factory=RoutingSpec)
    """Replicas (data parallelism) and the router that spreads requests over them."""
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)
    """The traffic: arrivals, prompt and output lengths, shared prefixes, sessions, samples per
    request, tenants and priorities."""
    slo: SLOSpec = Field(default_factory=SLOSpec)
    """Latency targets that define goodput: TTFT and TPOT."""
    simulation: SimulationSpec = Field(default_factory=SimulationSpec)
    """How long the run is (requests or simulated seconds), the warm-up left out of metrics, and the
    seed."""
    backend: BackendSpec = Field(default_factory=BackendSpec)
    """Where step times come from: the cost model, or the real torch backend."""
    cost_model: CostModelSpec = Field(default_factory=CostModelSpec)
    """The step-time model when ``backend.kind`` is ``model``: ``analytic``, ``calibrated`` or
    ``profile``."""

    @model_validator(mode="before")
    @classmethod
    def _calibrated_hardware(cls, data: Any, info: ValidationInfo) -> Any:
        """The figures of the ``calibration`` file under the scenario's own."""
        if not isinstance(data, dict) or data.get("calibration") is None:
            return data
        name = data["calibration"]
        if not isinstance(name, str):
            raise error_at("calibration", "expected the path of a calibration file")
        try:
            path = resolve_existing_file(name, info)
            return apply_overrides(data, read_overrides(path))
        except ValueError as err:
            raise error_at("calibration", str(err)) from None

    @field_validator("preemption", mode="before")
    @classmethod
    def _engine_defaults(cls, section: Any, info: ValidationInfo) -> Any:
        """What this section leaves unset comes from the validated scheduler's engine
        profile (nothing when the scheduler section did not validate)."""
        scheduler = info.data.get("scheduler")
        if scheduler is None:
            return section
        return preemption_with_defaults(section, scheduler.engine, scheduler.policy)

    @model_validator(mode="before")
    @classmethod
    def _stages_set_the_length(cls, data: Any) -> Any:
        """A staged arrival without ``num_requests`` or ``duration_s`` runs its stages
        whole (not the 1,000-request default)."""
        if not isinstance(data, dict):
            return data
        workload, sim = data.get("workload"), data.get("simulation", {})
        arrival = workload.get("arrival") if isinstance(workload, dict) else None
        if not (isinstance(arrival, dict) and arrival.get("kind") == "stages"):
            return data
        if not isinstance(sim, dict) or "num_requests" in sim or "duration_s" in sim:
            return data
        stages = arrival.get("stages")
        try:
            total = sum(float(stage["duration_s"]) for stage in stages)
        except (TypeError, KeyError, ValueError):
            return data  # the stages' own validation reports what is wrong
        if not math.isfinite(total) or total <= 0:
            return data
        return {**data, "simulation": {**sim, "duration_s": total}}

    @model_validator(mode="after")
    def _fits_together(self, info: ValidationInfo) -> Scenario:
        self._pool_role = (info.context or {}).get("pool")
        sim = self.simulation
        replay = isinstance(self.workload.arrival, TraceArrival)
        if sim.num_requests is None and sim.duration_s is None and not replay:
            raise error_at(
                "simulation.num_requests", "set num_requests or duration_s (or replay a trace)"
            )
        try:
            # Checked whether the pool is derived or given: an explicit num_blocks does
            # not make an uneven split of the heads runnable.
            check_tensor_parallel(self.model, self.tensor_parallel)
            blocks = self.cache.device_blocks(self.model, self.hardware, self.tensor_parallel)
        except ValueError as err:
            raise error_at("tensor_parallel", str(err)) from None
        if self.cache.num_blocks is not None:
            problem = check_given_pool(
                self.model,
                self.hardware,
                self.tensor_parallel,
                blocks,
                self.cache.block_size,
                self.cache.kv_element_bytes(self.model),
            )
            if problem is not None:
                raise error_at(*problem)
        self._check_model_support()
        self._check_retention_interval()
        reserved = profile_of(self.scheduler.engine).rules.reserved_blocks
        if blocks - reserved < 1:
            usable = f" ({reserved} reserved by scheduler.engine)" if reserved else ""
            raise error_at(
                "cache.num_blocks", f"expected at least one usable block{usable}, got {blocks}"
            )
        blocks -= reserved
        sched = self.scheduler
        if sched.max_num_batched_tokens < sched.max_num_seqs:
            raise error_at(
                "scheduler.max_num_batched_tokens",
                f"must be >= scheduler.max_num_seqs ({sched.max_num_seqs}) so that every "
                f"running sequence can decode each step, got {sched.max_num_batched_tokens}",
            )
        cpu = self.cache.cpu_blocks(self.model, self.tensor_parallel)
        if self.preemption.mode.policy == "swap" and cpu == 0:
            raise error_at(
                "preemption.mode",
                "swap needs CPU space: set cache.cpu_swap_gib or cache.num_cpu_blocks",
            )
        if self.cost_model.kind == "profile":
            self.cost_model.vidur_names(self.hardware, self.model)  # names must be known
        offload = self.cache.offload_blocks(self.model, self.tensor_parallel)
        for n, tier_blocks in enumerate(offload):
            if tier_blocks < 1:
                raise error_at(f"cache.offload[{n}]", "the tier holds no block of this model's KV")
        self._kv_pool = KVPool(blocks, cpu, offload)
        try:
            check_memory(self)
        except OverBudget as err:
            raise error_at(err.field, str(err)) from None
        if self.routing.disaggregation is not None:
            self._pools = self._pool_scenarios(info)
        return self

    def _pool_scenarios(self, info: ValidationInfo) -> tuple[Scenario, Scenario]:
        """The scenarios of the prefill and the decode pool's instances, each validated
        whole; an error names the pool's field (``routing.disaggregation.decode.cache``)."""
        base = self.model_dump(mode="json")
        split = base["routing"].pop("disaggregation")
        base["routing"] = {}
        spec = self.routing.disaggregation
        pools = []
        for role, pool in (("prefill", spec.prefill), ("decode", spec.decode)):
            raw = pool_scenario(base, pool)
            try:
                context = {**(info.context or {}), "pool": role}
                pools.append(Scenario.model_validate(raw, context=context))
            except ValidationError as err:
                # "<source>: <path>: <message>", the path within the pool's scenario
                path, _, message = format_validation_error(err, "", raw)[2:].partition(": ")
                where = f"routing.disaggregation.{role}"
                if not path.startswith("routing.disaggregation"):  # (the pool's own field)
                    where += f".{path}"
                raise error_at(where, message) from None
        del split
        return pools[0], pools[1]

    def gpu_groups(self) -> list[tuple[str, int]]:
        """(hardware name, GPUs) of each kind of instance the scenario runs: its replicas,
        or its prefill and its decode pool."""
        pools = self.pools or (self,)
        return [(p.hardware.name, p.tensor_parallel * p.routing.replicas) for p in pools]

    @property
    def pool_role(self) -> str | None:
        """``prefill`` or ``decode`` for the scenario of a pool's instances, else None."""
        return self._pool_role

    @property
    def pools(self) -> tuple[Scenario, Scenario] | None:
        """The (prefill, decode) pools' scenarios with ``routing.disaggregation``, else None
        (they name this scenario's file in their errors)."""
        for pool in self._pools or ():
            pool._source, pool._base_dir = self._source, self._base_dir
        return self._pools

    def _check_retention_interval(self) -> None:
        """``cache.prefix_cache_retention_interval`` is a multiple of the block size, and
        only for a model with a sliding window."""
        interval = self.cache.retention_interval
        if not interval:
            return
        plain = self.model.kv_layout.is_plain
        if interval % self.cache.block_size or plain:
            why = f"expected a multiple of cache.block_size ({self.cache.block_size})"
            if plain:
                why = "no sliding window to apply it to (set 0)"
            raise error_at("cache.prefix_cache_retention_interval", f"{why}, got {interval}")

    def _check_model_support(self) -> None:
        if self.expert_parallel and self.model.moe is None:
            raise error_at("expert_parallel", f"{self.model.name!r} has no experts (no model.moe)")
        check_combinations(self)  # settings that do not work together (one table)
        if self.model.moe is None:
            return  # (the heads' split is checked with the pool's size)
        try:
            check_experts_split(self.model, self.tensor_parallel, self.expert_parallel)
        except ValueError as err:
            field = "expert_parallel" if self.expert_parallel else "tensor_parallel"
            raise error_at(field, str(err)) from None

    @model_serializer(mode="wrap")
    def _leave_out_dense_defaults(self, handler) -> dict[str, Any]:
        return drop_unset(handler(self), {"expert_parallel": False})

    @property
    def kv_pool(self) -> KVPool:
        """One replica's device and CPU pools, sized once when the scenario was
        validated (the one place: builders read this, never the sizing rules)."""
        assert self._kv_pool is not None, "a Scenario is only made by validation"
        return self._kv_pool

    @property
    def source(self) -> str:
        """The scenario file (or '<scenario>'), for one-line error messages."""
        return self._source

    def resolve_plugin(self, name: str) -> str:
        """A ``path/file.py:attr`` plug-in name with a relative path resolved against the
        scenario's folder (like trace files) when the file is there; others unchanged."""
        target, sep, attr = name.rpartition(":")
        if sep and target.endswith(".py") and not Path(target).is_absolute():
            beside = self._base_dir / target
            if beside.is_file():
                return f"{beside}:{attr}"
        return name
