"""Glue from a validated scenario to a finished run: build, simulate, write outputs.

scenario -> requests (workload) -> replicas (allocator + executor + policies) -> SimPy
run -> requests.csv / steps.csv / summary.json / scenario.json / report.html.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import simpy

from backend.base import Allocator
from backend.blocks import BlockManager
from backend.contiguous import make_contiguous
from policies.batching import BATCHING
from policies.eviction import EVICTORS
from policies.preemption import VICTIMS
from policies.registry import UnknownPolicy
from policies.routing import ROUTERS
from policies.scheduling import SCHEDULERS
from sim import metrics, report, workload
from sim.costmodel import AnalyticCostModel, CostParams
from sim.engine import Cluster, EngineConfig, Replica
from sim.profile_costs import ProfileCostModel
from sim.progress import Progress
from sim.scenario import ScenarioError
from sim.types import Request
from sim.vidur_profiles import ProfileError, load_vidur_profile


@dataclass
class RunResult:
    """What a run produced (in memory; the files are written by :func:`write_run`)."""

    requests: list[Request]
    steps: metrics.StepLog
    summary: dict[str, Any]
    wall_s: float
    num_steps: int


def build_allocator(scenario) -> Allocator:
    """One replica's allocator, sized from the scenario."""
    cache = scenario.cache
    model, hw, tp = scenario.model, scenario.hardware, scenario.tensor_parallel
    num_blocks = cache.device_blocks(model, hw, tp)
    num_cpu_blocks = cache.cpu_blocks(model, tp)
    if cache.allocator == "paged":
        rng = np.random.default_rng(scenario.simulation.seed)  # for a randomised policy
        evictor = make_policy(
            scenario, EVICTORS, "eviction.policy", scenario.eviction.policy, {"rng": rng}
        )
        return BlockManager(
            num_blocks,
            cache.block_size,
            num_cpu_blocks=num_cpu_blocks,
            enable_prefix_caching=cache.prefix_caching,
            evictor=evictor,
        )
    return make_contiguous(
        cache.allocator,
        num_slots=num_blocks * cache.block_size,
        max_model_len=model.max_model_len,
        num_cpu_slots=num_cpu_blocks * cache.block_size,
    )


def build_executor(scenario, allocator: Allocator):
    """The step-time source: the analytic cost model, a calibrated one, or the real
    torch backend (hardware in the loop)."""
    if scenario.backend.kind == "torch":
        from sim.realbackend import build_torch_executor

        return build_torch_executor(scenario, allocator)
    if scenario.cost_model.kind == "calibrated":
        from sim.calibration import build_calibrated_executor

        return build_calibrated_executor(scenario)
    if scenario.cost_model.kind == "profile":
        return build_profile_executor(scenario)
    return analytic_executor(scenario)


def build_profile_executor(scenario) -> ProfileCostModel:
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
    return ProfileCostModel(profile, analytic_executor(scenario))


def analytic_executor(scenario) -> AnalyticCostModel:
    """The scenario's roofline cost model (with its ``cost_model.params`` overrides)."""
    return AnalyticCostModel(
        scenario.model,
        scenario.hardware,
        tensor_parallel=scenario.tensor_parallel,
        params=scenario.cost_model.params or CostParams(),
        block_size=scenario.cache.block_size,
    )


def engine_config(scenario, allocator: Allocator) -> EngineConfig:
    sched = scenario.scheduler
    return EngineConfig(
        max_num_seqs=sched.max_num_seqs,
        max_num_batched_tokens=sched.max_num_batched_tokens,
        chunked_prefill=sched.chunked_prefill,
        watermark_blocks=int(sched.watermark * allocator.num_blocks),
        preemption_mode=scenario.preemption.mode,
        max_model_len=scenario.model.max_model_len,
        admission=sched.admission,
    )


def make_policy(scenario, registry, field: str, name: str, params: dict | None = None):
    """Instantiate the policy a scenario names at ``field`` (e.g. "scheduler.policy").
    Raises ScenarioError (one line) for a plug-in that cannot be loaded or parameters the
    policy does not take."""
    try:
        factory = registry.get(scenario.resolve_plugin(name))
    except UnknownPolicy as err:
        raise ScenarioError(f"{scenario.source}: {field}: {err}") from None
    try:
        return factory(**(params or {}))
    except (TypeError, ValueError) as err:
        section = field.rpartition(".")[0]
        raise ScenarioError(f"{scenario.source}: {section}.params: {name}: {err}") from None


def simulate(scenario, *, progress: bool = False, executor_factory=None) -> RunResult:
    """Run ``scenario`` to completion (or its safety horizon). Deterministic: the same
    scenario gives the same result, whatever the machine (with a model executor).
    ``executor_factory(scenario, allocator)`` replaces :func:`build_executor` for every
    replica (validation wraps the real executor with it)."""
    make_executor = executor_factory or build_executor
    wall_start = time.perf_counter()
    seed = scenario.simulation.seed
    rng = np.random.default_rng(seed)
    requests = workload.generate_requests(scenario, scenario.model, rng=rng)
    env = simpy.Environment()
    steps = metrics.StepLog()
    outputs = workload.SyntheticOutputs(seed, scenario.model.vocab_size)
    finished = [0]
    bar = Progress(len(requests), "simulating", enabled=progress)

    def on_step(replica: Replica, batch, duration: float, plan) -> None:
        usage = replica.alloc.usage(replica.next_request_tokens())
        steps.record(
            replica.env.now - duration,
            replica.index,
            duration,
            batch.batch_size,
            batch.num_prefill_tokens,
            batch.num_decode_tokens,
            usage.used_blocks,
            usage.cached_blocks,
            usage.free_blocks,
            usage.token_slots,
            usage.reserved_slots,
            usage.internal_frag_slots,
            usage.external_frag_slots,
            usage.free_slots,
            replica.swapped_blocks,
            len(replica.waiting),
            plan.num_preempted,
            plan.limit,
        )

    def on_done(request: Request) -> None:
        finished[0] += 1
        bar.update(finished[0])

    replicas = []
    executors = []
    for index in range(scenario.routing.replicas):
        allocator = build_allocator(scenario)
        executors.append(make_executor(scenario, allocator))
        replicas.append(
            Replica(
                env,
                index,
                allocator,
                executors[-1],
                make_policy(
                    scenario,
                    SCHEDULERS,
                    "scheduler.policy",
                    scenario.scheduler.policy,
                    scenario.scheduler.params,
                ),
                make_policy(scenario, VICTIMS, "preemption.victim", scenario.preemption.victim),
                engine_config(scenario, allocator),
                outputs,
                on_step,
                on_done,
                batching=make_policy(
                    scenario, BATCHING, "scheduler.batching", scenario.scheduler.batching
                ),
            )
        )
    router = make_policy(
        scenario, ROUTERS, "routing.router", scenario.routing.router, scenario.routing.params
    )
    cluster = Cluster(env, replicas, router)
    env.process(cluster.arrivals(requests))
    env.run(until=scenario.simulation.max_sim_time_s)
    bar.close()
    generated = [replica.generated_by_request() for replica in replicas]
    for request in requests:
        if np.isnan(request.finish_s) and not request.rejected_reason:
            request.rejected_reason = "unfinished at max_sim_time_s"
            request.generated = generated[request.replica].get(request.req_id, 0)
    pool = replicas[0].alloc
    summary = metrics.summarize(
        requests,
        steps,
        total_slots=pool.num_blocks * pool.block_size,
        slo_ttft_s=scenario.slo.ttft_s,
        slo_tpot_s=scenario.slo.tpot_s,
        warmup_requests=scenario.simulation.warmup_requests,
        num_replicas=len(replicas),
        block_size=pool.block_size,
        # Blocks for the paged manager, slots for contiguous baselines: the fraction and
        # the slot count are the comparable figures.
        peak_used_blocks=[r.alloc.peak_used_blocks for r in replicas],
        cost_model=cost_model_report(scenario, executors),
    )
    num_steps = sum(r.num_steps for r in replicas)
    return RunResult(requests, steps, summary, time.perf_counter() - wall_start, num_steps)


def cost_model_report(scenario, executors) -> dict[str, Any]:
    """summary.json's ``cost_model``: where step times came from, and for a profile the
    steps (all replicas together) whose parts fell outside its grid."""
    if scenario.backend.kind == "torch":
        return {"kind": "measured", "backend": scenario.backend.device}
    profiles = [e for e in executors if isinstance(e, ProfileCostModel)]
    if not profiles:
        return {"kind": scenario.cost_model.kind}
    report = profiles[0].report()
    report["steps"] = sum(p.num_steps for p in profiles)
    report["fallback_steps"] = {
        part: sum(p.fallback_steps[part] for p in profiles) for part in report["fallback_steps"]
    }
    return report


def write_run(result: RunResult, scenario, out_dir: str | Path, *, html: bool = True) -> Path:
    """Write the run's files into ``out_dir``; returns the directory."""
    out = Path(out_dir)
    metrics.write_outputs(out, result.requests, result.steps, result.summary)
    (out / "scenario.json").write_text(
        json.dumps(scenario.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"
    )
    if html:
        report.write_report(out, result.requests, result.steps, result.summary, title=scenario.name)
    return out
