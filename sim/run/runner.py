"""Glue from a validated scenario to a finished run: build, simulate, write outputs.

scenario -> requests (workload) -> replicas (allocator + executor + policies) -> SimPy
run -> requests.csv / steps.csv / summary.json / scenario.json / report.html.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import simpy

from sim.config.errors import ScenarioError
from sim.costs.profile import ProfileCostModel
from sim.engine.policy_guard import PolicyFailure
from sim.engine.records import UNFINISHED_REASON, RequestOutcome
from sim.engine.replica import Replica
from sim.output.benchmark import DEFAULT_PERCENTILES
from sim.output.files import write_outputs, write_table
from sim.output.report import write_report
from sim.output.steplog import StepLog
from sim.output.summary import summarize
from sim.output.trace import write_trace
from sim.run.build import build_cluster, build_executor, build_replica
from sim.run.folders import atomic_folder, run_metadata
from sim.run.pools import build_pools, hand_off_table, pool_figures
from sim.run.progress import Progress
from sim.run.warnings import run_warnings
from sim.workload.generate import WorkloadError, generate_requests
from sim.workload.tokens import BlankOutputs, SyntheticOutputs


@dataclass
class RunResult:
    """What a run produced (in memory; the files are written by :func:`write_run`)."""

    outcomes: list[RequestOutcome]  # in the workload's request order
    steps: StepLog
    summary: dict[str, Any]
    wall_s: float
    num_steps: int
    fast_forwarded_steps: int = 0  # of num_steps, applied within decode stretches
    #: hand_offs.csv's columns with prefill and decode pools (sim.run.pools), else None
    hand_offs: dict[str, np.ndarray] | None = None


def simulate(
    scenario,
    *,
    progress: bool = False,
    executor_factory=None,
    metric_percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    fast_forward: bool = True,
) -> RunResult:
    """Run ``scenario`` to completion (or its safety horizon). Deterministic: the same
    scenario gives the same result, whatever the machine (with a model executor).
    ``executor_factory(scenario, allocator)`` replaces :func:`build_executor` for every
    replica (validation wraps the real executor with it)."""
    make_executor = executor_factory or build_executor
    wall_start = time.perf_counter()
    seed = scenario.simulation.seed
    rng = np.random.default_rng(seed)
    try:
        requests = generate_requests(scenario, scenario.model, rng=rng)
    except WorkloadError as err:
        raise ScenarioError(f"{scenario.source}: {err.field}: {err}") from None
    env = simpy.Environment()
    steps = StepLog()
    done: dict[int, RequestOutcome] = {}
    bar = Progress(len(requests), "simulating", enabled=progress)

    def on_done(outcome: RequestOutcome) -> None:
        done[outcome.req_id] = outcome
        bar.update(len(done))

    cluster = _build_cluster(scenario, requests, env, steps, on_done, make_executor, fast_forward)
    replicas = cluster.replicas
    executors = [replica.executor for replica in replicas]
    env.process(cluster.arrivals(requests))
    try:
        env.run(until=scenario.simulation.max_sim_time_s)
    except PolicyFailure as failure:
        raise failure.located(policy_name(scenario, failure.role), env.now) from None
    finally:
        bar.close()
    for outcome in cluster.unfinished_outcomes(UNFINISHED_REASON):
        done[outcome.req_id] = outcome
    outcomes = [done[request.req_id] for request in requests]
    engine = _engine_figures(scenario, replicas, executors)
    hand_offs = None
    if scenario.pools is not None:
        engine["disaggregation"] = pool_figures(cluster)
        hand_offs = hand_off_table(cluster)
    num_steps = sum(r.num_steps for r in replicas)
    forwarded = sum(r.fast_forwarded_steps for r in replicas)
    # The engine is not read again: free it (and the outcome dict) before the summary's
    # own peak. SimPy processes and replicas refer to each other, hence the collection;
    # a million-request run gets back ~100 MiB.
    done.clear()
    del env, cluster, replicas, executors
    gc.collect()
    summary = summarize(
        outcomes,
        steps,
        slo_ttft_s=scenario.slo.ttft_s,
        slo_tpot_s=scenario.slo.tpot_s,
        warmup_requests=scenario.simulation.warmup_requests,
        metric_percentiles=metric_percentiles,
        **engine,
    )
    summary["warnings"] = run_warnings(scenario, summary)
    wall_s = time.perf_counter() - wall_start
    return RunResult(outcomes, steps, summary, wall_s, num_steps, forwarded, hand_offs)


def _build_cluster(scenario, requests, env, steps, on_done, make_executor, fast_forward):
    """Every replica of ``scenario`` on ``env`` (sim.run.build.build_replica), writing to
    ``steps`` and reporting to ``on_done``, behind the router, or in the prefill and
    decode pools of ``routing.disaggregation`` (sim.run.pools)."""
    outputs = SyntheticOutputs(scenario.simulation.seed, scenario.model.vocab_size)
    blank = BlankOutputs()  # where no allocator or executor reads decode token ids
    shared: dict = {}  # a remote offload tier, built once for every replica

    def make_replica(replica_scenario, index: int, done) -> Replica:
        return build_replica(
            replica_scenario,
            env,
            index,
            make_executor=lambda alloc: make_executor(replica_scenario, alloc),
            outputs=outputs,
            steps=steps,
            on_done=done,
            requests=requests,
            fast_forward=fast_forward,
            blank=blank,
            shared=shared,
        )

    if scenario.pools is not None:
        return build_pools(scenario, env, on_done, make_replica, requests)
    replicas = [make_replica(scenario, i, on_done) for i in range(scenario.routing.replicas)]
    return build_cluster(scenario, env, replicas, requests)


def _engine_figures(scenario, replicas, executors) -> dict[str, Any]:
    """What the summary needs of the engine once it has stopped (summarize's keywords)."""
    pool = replicas[-1].alloc  # (a decode instance's, in prefill and decode pools)
    slots = [r.alloc.num_blocks * r.alloc.block_size for r in replicas]
    return {
        "total_slots": pool.num_blocks * pool.block_size,
        "num_replicas": len(replicas),
        "replica_slots": slots if len(set(slots)) > 1 else None,
        "block_size": pool.block_size,
        # Blocks for the paged manager, slots for contiguous baselines: the fraction and
        # the slot count are the comparable figures.
        "peak_used_blocks": [r.alloc.peak_used_blocks for r in replicas],
        "cost_model": cost_model_report(scenario, executors),
        "kv_offload": _offload_figures(scenario, replicas),
        "token_gaps": _all_token_gaps(replicas),
    }


def _offload_figures(scenario, replicas) -> dict[str, Any] | None:
    """What each offload tier did, summed over the replicas, nearest first (None: no
    tier)."""
    cache = scenario.cache
    if not cache.offload:
        return None
    per_replica = [r.connector.tier_stats for r in replicas]
    block_bytes = cache.replica_block_bytes(scenario.model, scenario.tensor_parallel)
    tiers = []
    for index, (spec, capacity) in enumerate(
        zip(cache.offload, scenario.kv_pool.offload_blocks, strict=True)
    ):
        # a cluster-wide tier is one store: every replica reports the same one
        stats = [replica[index] for replica in per_replica[: 1 if spec.cluster_wide else None]]
        stored, loaded, hit_tokens, evicted = (
            sum(getattr(s, name) for s in stats)
            for name in ("stored_blocks", "loaded_blocks", "hit_tokens", "evicted_blocks")
        )
        tiers.append(
            {
                "tier": spec.tier,
                "capacity_blocks": capacity,  # per replica (a cluster-wide tier's: the cluster's)
                "stored_blocks": stored,
                "loaded_blocks": loaded,
                "hit_tokens": hit_tokens,
                "evicted_blocks": evicted,
                "stored_bytes": stored * block_bytes,
                "loaded_bytes": loaded * block_bytes,
            }
        )
    return {"tiers": tiers}


def policy_name(scenario, role: str) -> str:
    """What the scenario names at ``role`` (a field path such as "scheduler.policy")."""
    if role == "cost model":
        return "torch backend" if scenario.backend.kind == "torch" else scenario.cost_model.kind
    value = scenario
    for part in role.split("."):
        value = getattr(value, part)
    return getattr(value, "policy", value)  # a {policy, params} choice, or a name


def _all_token_gaps(replicas) -> tuple[np.ndarray, np.ndarray]:
    gaps, counts = zip(*(replica.token_gaps() for replica in replicas), strict=True)
    return np.concatenate(gaps), np.concatenate(counts)


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


def write_run(
    result: RunResult,
    scenario,
    out_dir: str | Path,
    *,
    html: bool = True,
    trace: str | None = None,
    force: bool = False,
    argv: Sequence[str] | None = None,
    progress: bool = False,
) -> Path:
    """Write the run's files into ``out_dir``, all at once (sim.run.folders): an
    interrupted write leaves the previous run or nothing. ``trace`` (``auto``, ``json``
    or ``gzip``; None for none) adds the Chrome/Perfetto trace (sim.output.trace).
    Raises FolderExists when ``out_dir`` holds a run and ``force`` is off. Returns the
    directory."""
    out = Path(out_dir)
    parts = 2 + html + (trace is not None)
    bar = Progress(parts, "writing", enabled=progress, unit="part")
    with atomic_folder(out, force=force) as partial:
        write_outputs(partial, result.outcomes, result.steps, result.summary)
        if result.hand_offs is not None:
            write_table(partial / "hand_offs.csv", result.hand_offs)
        bar.update(1)
        scenario_json = scenario.model_dump(mode="json")
        (partial / "scenario.json").write_text(
            json.dumps(scenario_json, indent=2, sort_keys=True) + "\n"
        )
        metadata = run_metadata(scenario, argv)
        (partial / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
        bar.update(2)
        if html:
            write_report(
                partial,
                result.outcomes,
                result.steps,
                result.summary,
                scenario.name,
                scenario=scenario_json,
                command=metadata["command"] if argv is not None else None,
                cpu_blocks=scenario.kv_pool.cpu_blocks,
            )
            bar.update(3)
        if trace is not None:
            pool = result.summary["num_blocks"]  # one replica's, in the step log's units
            write_trace(
                partial,
                result.outcomes,
                result.steps,
                pool,
                fmt=trace,
                title=scenario.name,
                hand_offs=result.hand_offs,
            )
            bar.update(parts)
    bar.close()
    return out
