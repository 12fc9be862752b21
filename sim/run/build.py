"""Building a run's parts from a validated scenario: allocators, executors (cost models
or the real backend), engine configuration and policies, and from them the replicas and
the cluster that ``pagesim run``, the live engine and the parity replay all serve with.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import simpy

from backend.base import Allocator, InvalidRequest
from backend.blocks import BlockManager
from backend.connectors.offload import OffloadConnector, TierSpec
from backend.contiguous import make_contiguous
from backend.shipped import PAGED
from backend.transfer import Medium
from policies.admission import ADMISSION
from policies.batching import BATCHING
from policies.context import (
    SLO,
    PolicyContext,
    PolicyError,
    ServedTokens,
    build_policy,
    context_parameters,
)
from policies.eviction import EVICTORS
from policies.preemption import MODES, VICTIMS
from policies.registry import Registry, UnknownPolicy
from policies.routing import ROUTERS
from policies.scheduling import SCHEDULERS
from sim.catalog.cost_params import CostParams
from sim.config.allocators import construct
from sim.config.engines import profile_of
from sim.config.errors import ScenarioError
from sim.costs.analytic import AnalyticCostModel
from sim.costs.calibrated import CalibratedCostModel, CalibrationError, load, shape_mismatch
from sim.costs.profile import ProfileCostModel
from sim.costs.vidur import ProfileError, load_vidur_profile
from sim.engine.cluster import Cluster
from sim.engine.config import EngineConfig, ReplicaPolicies
from sim.engine.executor import TokenSource, reads_token_ids
from sim.engine.fast_forward import StepSink
from sim.engine.policy_guard import guarded, guarded_evictor
from sim.engine.records import RequestOutcome
from sim.engine.replica import Replica


def policy_context(
    scenario,
    requests=(),
    replica: int | None = None,
    served_tokens: ServedTokens | None = None,
) -> PolicyContext:
    """What the policies of ``replica`` (None: the router) are built with."""
    return PolicyContext(
        seed=scenario.simulation.seed,
        slo=SLO(scenario.slo.ttft_s, scenario.slo.tpot_s),
        block_size=scenario.cache.block_size,
        num_blocks=scenario.kv_pool.device_blocks,
        model=scenario.model,
        hardware=scenario.hardware,
        num_replicas=scenario.routing.replicas,
        replica=replica,
        requests=tuple(requests),
        served_tokens=served_tokens,
    )


def build_allocator(scenario, context: PolicyContext | None = None) -> Allocator:
    """One replica's allocator, sized from the scenario; its eviction policy is built
    with ``context`` (by default one without the request stream)."""
    cache = scenario.cache
    num_blocks, num_cpu_blocks, _ = scenario.kv_pool
    if cache.plugin_allocator is not None:  # a user's class (sim/config/allocators.py)
        try:
            return construct(
                cache.plugin_allocator,
                num_blocks=num_blocks,
                block_size=cache.block_size,
                num_cpu_blocks=num_cpu_blocks,
                enable_prefix_caching=cache.prefix_caching,
                **_groups(scenario),
            )
        except ValueError as err:
            raise ScenarioError(f"{scenario.source}: cache.allocator: {err}") from None
    if cache.allocator == PAGED:
        context = context or policy_context(scenario, replica=0)
        eviction = scenario.eviction
        return BlockManager(
            num_blocks,
            cache.block_size,
            num_cpu_blocks=num_cpu_blocks,
            enable_prefix_caching=cache.prefix_caching,
            evictor=make_policy(scenario, EVICTORS, eviction.policy, eviction.params, context),
            **_groups(scenario),
        )
    return make_contiguous(
        cache.allocator,
        num_slots=num_blocks * cache.block_size,
        max_model_len=scenario.model.max_model_len,
        num_cpu_slots=num_cpu_blocks * cache.block_size,
    )


def _groups(scenario) -> dict:
    """The KV cache groups' constructor argument (none for a model whose layers all keep
    every token: the allocator's default)."""
    layout = scenario.model.kv_layout
    if layout.is_plain:
        return {}
    interval = scenario.cache.retention_interval
    return {
        "kv_groups": tuple(
            group if group.sliding_window is None else group._replace(retention_interval=interval)
            for group in layout.groups
        )
    }


def build_connector(
    scenario, allocator: Allocator, context: PolicyContext, shared: dict
) -> OffloadConnector | None:
    """The offload tiers beside one replica's allocator (None: no tier): each tier's size
    and eviction policy (``cache.offload[n].eviction``, built with ``context``), the CPU
    tier's blocks numbered after the swap space's. ``shared`` carries a cluster-wide tier
    (remote) from replica to replica: the first builds it and puts it there, the others
    take it (mutated)."""
    blocks = scenario.kv_pool.offload_blocks
    if not blocks:
        return None
    specs = [
        TierSpec(
            Medium(spec.tier),
            n,
            make_policy(scenario, EVICTORS, spec.eviction, {}, context),
            shared.get(spec.tier),
        )
        for spec, n in zip(scenario.cache.offload, blocks, strict=True)
    ]
    try:
        connector = OffloadConnector.build(
            specs, scenario.cache.block_size, cpu_base=allocator.num_cpu_blocks
        )
    except InvalidRequest as err:
        raise ScenarioError(f"{scenario.source}: cache.offload: {err}") from None
    for spec in scenario.cache.offload:
        if spec.cluster_wide:  # one store for every replica
            shared.setdefault(spec.tier, connector.offload_tier(Medium(spec.tier)))
    return connector


def build_executor(scenario, allocator: Allocator):
    """The step-time source: the analytic cost model, a calibrated one, or the real
    torch backend (hardware in the loop)."""
    if scenario.backend.kind == "torch":
        from sim.costs.measured import build_torch_executor

        return build_torch_executor(scenario, allocator)
    unit = blocks_per_unit(scenario, allocator)
    if scenario.cost_model.kind == "calibrated":
        return build_calibrated_executor(scenario, unit)
    if scenario.cost_model.kind == "profile":
        return build_profile_executor(scenario, unit)
    return analytic_executor(scenario, unit)


def blocks_per_unit(scenario, allocator: Allocator) -> float:
    """Blocks one unit of the allocator's transfers fills: 1, or 1 / block size for an
    allocator of regions (its block tables are ``[start, length]`` in token slots)."""
    return 1 / scenario.cache.block_size if allocator.block_table_layout == "region" else 1.0


def build_profile_executor(scenario, unit: float = 1.0) -> ProfileCostModel:
    """The executor for ``cost_model: {kind: profile, ...}``. Raises ScenarioError (one
    line) for a profile that cannot be read or has no rows for the scenario's model."""
    spec = scenario.cost_model
    device, model_name, network = spec.vidur_names(scenario.hardware, scenario.model)
    try:
        profile = load_vidur_profile(
            spec.profile_dir,
            model=scenario.model,
            tensor_parallel=scenario.tensor_parallel,
            device=device,
            model_name=model_name,
            network=network or None,
            block_size=scenario.cache.block_size,
        )
    except ProfileError as err:
        raise ScenarioError(f"{scenario.source}: cost_model.path: {err}") from None
    return ProfileCostModel(profile, analytic_executor(scenario, unit))


def analytic_executor(scenario, unit: float = 1.0) -> AnalyticCostModel:
    """The scenario's roofline cost model (with its ``cost_model.params`` overrides);
    ``unit``: blocks one unit of the allocator's transfers fills (:func:`blocks_per_unit`)."""
    return AnalyticCostModel(
        scenario.model,
        scenario.hardware,
        tensor_parallel=scenario.tensor_parallel,
        params=scenario.cost_model.params or CostParams(),
        block_size=scenario.cache.block_size,
        expert_parallel=scenario.expert_parallel,
        kv_element_bytes=scenario.cache.kv_element_bytes(scenario.model),
        blocks_per_unit=unit,
    )


def engine_config(scenario, allocator: Allocator) -> EngineConfig:
    sched = scenario.scheduler
    rules = profile_of(sched.engine).rules()
    return EngineConfig(
        max_num_seqs=sched.max_num_seqs,
        max_num_batched_tokens=sched.max_num_batched_tokens,
        chunked_prefill=sched.chunked_prefill,
        # (vLLM counts its null block in the pool the watermark is a fraction of)
        watermark_blocks=int(sched.watermark * (allocator.num_blocks + rules.reserved_blocks)),
        max_model_len=scenario.model.max_model_len,
        async_scheduling=sched.async_scheduling,
        request_timeout_s=scenario.workload.request_timeout_s,
        long_prefill_token_threshold=sched.long_prefill_token_threshold,
        rules=rules,
    )


def replica_policies(scenario, context: PolicyContext) -> ReplicaPolicies:
    """The scheduling, batching, admission and preemption policies of one replica.
    Tokens served per tenant are counted only if the scheduler asks for them."""
    sched, preemption = scenario.scheduler, scenario.preemption
    scheduler_class = load_policy(scenario, SCHEDULERS, sched.policy)
    if "served_tokens" in context_parameters(scheduler_class):
        context = dataclasses.replace(context, served_tokens=ServedTokens())
    scheduler = make_policy(scenario, SCHEDULERS, sched.policy, sched.params, context)
    choices = (
        (BATCHING, sched.batching),
        (ADMISSION, sched.admission),
        (MODES, preemption.mode),
    )
    batching, admission, mode = (
        make_policy(scenario, registry, choice.policy, choice.params, context)
        for registry, choice in choices
    )
    victim = make_policy(scenario, VICTIMS, preemption.victim, preemption.params, context)
    return ReplicaPolicies(scheduler, batching, admission, victim, mode, context.served_tokens)


def build_replica(
    scenario,
    env: simpy.Environment,
    index: int,
    *,
    make_executor: Callable[[Allocator], object],
    outputs: TokenSource,
    steps: StepSink,
    on_done: Callable[[RequestOutcome], None],
    requests: Sequence = (),
    fast_forward: bool = True,
    blank: TokenSource | None = None,
    shared: dict | None = None,
) -> Replica:
    """Replica ``index`` of ``scenario`` on ``env``: its allocator, the executor
    ``make_executor(allocator)`` returns, its policies (built knowing ``requests``) and
    engine options. Decode token ids come from ``outputs``, or from ``blank`` (one
    shared by the replicas: it caches its arrays) where neither the allocator nor the
    executor reads them (drawing ids costs time). ``shared``: one dict for all the
    replicas of a run, which a remote offload tier is shared through (build_connector)."""
    context = policy_context(scenario, requests, replica=index)
    allocator = build_allocator(scenario, context)
    connector = build_connector(scenario, allocator, context, {} if shared is None else shared)
    executor = make_executor(allocator)
    if blank is not None and not (reads_token_ids(allocator) or reads_token_ids(executor)):
        outputs = blank
    return Replica(
        env,
        index,
        allocator,
        executor,
        replica_policies(scenario, context),
        engine_config(scenario, allocator),
        outputs,
        steps,
        on_done,
        fast_forward=fast_forward,
        connector=connector,
    )


def build_cluster(
    scenario, env: simpy.Environment, replicas: Sequence[Replica], requests: Sequence = ()
) -> Cluster:
    """The cluster of ``replicas`` behind the scenario's router (built knowing
    ``requests``)."""
    routing = scenario.routing
    router = make_policy(
        scenario, ROUTERS, routing.router, routing.params, policy_context(scenario, requests)
    )
    return Cluster(env, list(replicas), router)


def make_policy(scenario, registry: Registry, name: str, params: dict, context: PolicyContext):
    """The policy a scenario names at ``registry.field`` (e.g. "scheduler.policy"), built
    by :func:`policies.context.build_policy`. Raises ScenarioError (one line) for a
    plug-in that cannot be loaded or parameters the policy does not take."""
    field = registry.field
    try:
        policy = build_policy(registry, scenario.resolve_plugin(name), params, context)
    except UnknownPolicy as err:
        raise ScenarioError(f"{scenario.source}: {field}: {err}") from None
    except PolicyError as err:
        raise ScenarioError(f"{scenario.source}: {registry.params_field}: {name}: {err}") from None
    except Exception as err:
        if ":" not in name:
            raise  # a shipped policy failing to build is a bug: keep its traceback
        problem = f"{type(err).__name__}: {err}"
        raise ScenarioError(f"{scenario.source}: {field}: {name}: raised {problem}") from None
    # A user's plug-in is checked against its family's protocol and wrapped whole: an
    # exception inside it stops the run with one line naming it (sim.engine.policy_guard); the
    # shipped policies are trusted.
    if ":" in name:
        _check_protocol(scenario, registry, name, policy)
        if registry is EVICTORS:
            return guarded_evictor(policy)
        defaults = {f: False for f in registry.optional_flags if not hasattr(policy, f)}
        return guarded(policy, field, defaults)
    return policy


def _check_protocol(scenario, registry: Registry, name: str, policy) -> None:
    """Raise ScenarioError (one line) if a plug-in lacks what its family calls."""
    field = registry.field
    missing = registry.missing_methods(policy)
    if missing:
        what = ", ".join(f"{m}()" for m in missing)
        raise ScenarioError(
            f"{scenario.source}: {field}: {name} built a {type(policy).__name__} without "
            f"{what} (see the protocol in policies/)"
        )
    bad = registry.bad_flag(policy)
    if bad is not None:
        flag, value = bad
        raise ScenarioError(
            f"{scenario.source}: {field}: {name}: {flag} must be True or False, got {value!r}"
        )


def load_policy(scenario, registry: Registry, name: str):
    """The class (or factory) a scenario names at ``registry.field``, not built."""
    try:
        return registry.get(scenario.resolve_plugin(name))
    except UnknownPolicy as err:
        raise ScenarioError(f"{scenario.source}: {registry.field}: {err}") from None


def build_calibrated_executor(scenario, unit: float = 1.0) -> CalibratedCostModel:
    """The executor for ``cost_model: {kind: calibrated, file: ...}``.

    Raises ScenarioError (one line) if the file is unusable or was profiled on a model
    of another shape (its unit costs would mean nothing for this one)."""
    from sim.config.errors import ScenarioError

    path = scenario.cost_model.resolved_path
    try:
        calibration = load(path)
    except CalibrationError as err:
        raise ScenarioError(f"{scenario.name}: cost_model.file: {err}") from None
    problem = shape_mismatch(calibration, scenario.model)
    if problem:
        raise ScenarioError(f"{scenario.name}: cost_model.file: {path}: {problem}")
    return CalibratedCostModel(calibration, unit)
