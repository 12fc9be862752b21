"""Liveness and conservation of the whole simulator, property-tested.

Hypothesis draws small scenarios (tiny model, tiny pools, every registered policy,
admission and preemption modes, swap on/off, prefix caching on/off, 1-3 replicas, n
samples, prefix groups, sessions, tenants, priorities) and runs each to completion with
``sim.run.simulate`` itself. The runner's executor factory wraps the real one and its
replica class is wrapped (``unittest.mock.patch``, where sim.run.build assembles the
replicas) so the test sees what the runner built without re-implementing it. For every run:

* every request finished with its whole output, or was rejected with a reason, and none
  was left unfinished at the horizon (liveness);
* a step cap turns a livelock (steps forever without progress) into a failure, not a
  hang;
* at the end every device block is free or cached-evictable and the CPU pool is empty,
  with the allocator's own invariants holding (no leak);
* preemptions, swap moves and decode tokens reconcile with the step log.

The ``ci`` profile keeps the file well under a minute; HYPOTHESIS_PROFILE=nightly runs
many more scenarios.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from unittest import mock

import numpy as np
from hypothesis import event, given
from hypothesis import strategies as st

import sim.run.build
from backend.transfer import SWAP_IN, SWAP_OUT, moved_blocks
from policies.admission import ADMISSION
from policies.batching import BATCHING
from policies.eviction import EVICTORS
from policies.preemption import MODES, VICTIMS
from policies.routing import ROUTERS
from policies.scheduling import SCHEDULERS
from sim.config.loader import validate_scenario
from sim.engine.records import UNFINISHED_REASON
from sim.engine.replica import Replica
from sim.run.build import build_executor
from sim.run.runner import RunResult, simulate

#: far more steps than any drawn scenario needs (<= 30 requests of <= 200 tokens, n <= 3,
#: one after the other at 8 tokens a step is ~4,000), small enough to shrink a livelock fast
MAX_STEPS = 10_000
HORIZON_S = 1e6


class Livelock(AssertionError):
    """The engine kept stepping without finishing its requests."""


@dataclass
class CountingExecutor:
    """Wraps the runner's executor: counts moves per step and caps the step count."""

    inner: object
    swap_out: list[int] = field(default_factory=list)
    swap_in: list[int] = field(default_factory=list)

    def execute(self, batch):
        if len(self.swap_out) >= MAX_STEPS:
            raise Livelock(f"more than {MAX_STEPS} steps on one replica")
        moved = moved_blocks(batch.transfers)
        self.swap_out.append(moved.get(SWAP_OUT, 0))
        self.swap_in.append(moved.get(SWAP_IN, 0))
        return self.inner.execute(batch)


@dataclass
class Run:
    """A finished run plus the pieces the runner built for it, in replica order."""

    result: RunResult
    replicas: list
    executors: list[CountingExecutor]


def simulate_observed(scenario) -> Run:
    """``simulate(scenario)`` with access to its replicas and executors."""
    replicas, executors = [], []
    replica_class = Replica  # the real one

    def counting_executor(scenario, allocator):
        executors.append(CountingExecutor(build_executor(scenario, allocator)))
        return executors[-1]

    def recorded_replica(*args, **kwargs):
        replicas.append(replica_class(*args, **kwargs))
        return replicas[-1]

    with mock.patch.object(sim.run.build, "Replica", recorded_replica):
        result = simulate(scenario, executor_factory=counting_executor)
    assert len(executors) == len(replicas) == scenario.routing.replicas
    return Run(result, replicas, executors)


# ------------------------------------------------------------------------- scenarios


@st.composite
def lengths(draw, low: int, high: int) -> dict:
    a, b = draw(st.integers(low, high)), draw(st.integers(low, high))
    return {"kind": "uniform", "min": min(a, b), "max": max(a, b)}


@st.composite
def scenarios(draw) -> dict:
    """A raw scenario mapping (validated by the caller, as a user's file would be)."""
    allocator = draw(
        st.sampled_from(["paged"] * 6 + ["contiguous-oracle", "contiguous-pow2", "contiguous-max"])
    )
    paged = allocator == "paged"
    num_cpu_blocks = draw(st.sampled_from([0, 0, 1, 4, 16, 64]))
    block_size, num_blocks = draw(st.integers(1, 16)), draw(st.integers(8, 64))
    # Lengths scale with the pool so most requests fit and contend (preemption, swap)
    # rather than being rejected outright; some still cannot fit at all.
    capacity = block_size * num_blocks
    cache = {
        "block_size": block_size,
        "num_blocks": num_blocks,
        "allocator": allocator,
        "prefix_caching": paged and draw(st.booleans()),
        "num_cpu_blocks": num_cpu_blocks,
    }
    max_num_seqs = draw(st.sampled_from([1, 2, 4, 16]))
    scheduler = {
        # vLLM's rules (the default) or pagesim's own; vLLM's null block needs a second one
        "engine": draw(st.sampled_from(["vllm-v1", "pagesim"] if num_blocks > 1 else ["pagesim"])),
        "async_scheduling": draw(st.booleans()),
        "policy": draw(st.sampled_from(SCHEDULERS.names())),
        "max_num_seqs": max_num_seqs,
        # The schema asks for a budget that lets every running sequence decode.
        "max_num_batched_tokens": draw(st.integers(max(8, max_num_seqs), 256)),
        "chunked_prefill": draw(st.booleans()),
        "watermark": draw(st.sampled_from([0.0, 0.01, 0.1, 0.3])),
        "admission": draw(st.sampled_from(ADMISSION.names())),
        "batching": draw(st.sampled_from(BATCHING.names())),
    }
    n = draw(st.integers(1, 3))
    modes = MODES.names() + ["swap"] if num_cpu_blocks else ["recompute"]
    workload = {
        "arrival": {"kind": "poisson", "rate_rps": draw(st.sampled_from([2.0, 50.0, 2000.0]))},
        "input": draw(lengths(1, min(80, max(1, capacity // 4)))),
        "output": draw(lengths(1, min(120, max(1, capacity // 2)))),
        "n": n,
        "tenants": {"count": draw(st.integers(1, 3))},
        "priorities": {"count": draw(st.integers(1, 3))},
    }
    if draw(st.booleans()):
        workload["prefix"] = {
            "num_groups": draw(st.integers(1, 3)),
            "length": {"kind": "fixed", "value": draw(st.integers(1, max(1, capacity // 4)))},
            "fraction": draw(st.sampled_from([0.5, 1.0])),
        }
    if draw(st.booleans()):
        workload["sessions"] = {
            "turns": draw(lengths(1, 3)),
            "think_time_s": draw(st.sampled_from([0.0, 0.05, 1.0])),
        }
    return {
        "name": "liveness",
        "model": "tiny",
        "hardware": "h100-sxm",
        "cache": cache,
        "scheduler": scheduler,
        "preemption": {
            "mode": draw(st.sampled_from(modes)),
            "victim": draw(st.sampled_from(VICTIMS.names())),
        },
        "eviction": {"policy": draw(st.sampled_from(EVICTORS.names()))},
        "routing": {
            "replicas": draw(st.integers(1, 3)),
            "router": draw(st.sampled_from(ROUTERS.names())),
        },
        "workload": workload,
        "simulation": {
            "num_requests": draw(st.integers(1, 30)),
            "seed": draw(st.integers(0, 2**16)),
            "max_sim_time_s": HORIZON_S,
        },
    }


@st.composite
def pressured_scenarios(draw) -> dict:
    """Scenarios under memory pressure: the paged allocator, a burst of 10-30 requests
    with outputs longer than their prompts, no watermark, room for many sequences, so
    decode growth forces preemption (and swap, when drawn) in most runs."""
    raw = draw(scenarios())
    cache, workload = raw["cache"], raw["workload"]
    capacity = cache["block_size"] * cache["num_blocks"]
    cache["allocator"] = "paged"
    scheduler = raw["scheduler"]
    scheduler.update(max_num_seqs=16, watermark=0.0)
    scheduler["max_num_batched_tokens"] = max(16, scheduler["max_num_batched_tokens"])
    workload["arrival"] = {"kind": "poisson", "rate_rps": 2000.0}
    workload["input"] = draw(lengths(1, max(1, capacity // 8)))
    workload["output"] = draw(lengths(1, max(1, min(120, capacity // 3))))
    raw["simulation"]["num_requests"] = draw(st.integers(10, 30))
    return raw


# ------------------------------------------------------------------------- checks


def check_requests(requests) -> None:
    """Each request finished with its whole output, or was rejected with a reason."""
    for r in requests:
        assert r.rejected_reason != UNFINISHED_REASON, f"request {r.req_id} starved"
        if r.rejected_reason:
            assert math.isnan(r.finish_s), f"request {r.req_id} finished and was rejected"
            continue
        assert not math.isnan(r.finish_s), f"request {r.req_id} neither finished nor rejected"
        assert r.output_tokens == r.output_len * r.n
        assert r.arrival_s <= r.first_scheduled_s <= r.first_token_s <= r.finish_s


def check_memory(replicas) -> None:
    """Nothing is held at the end: device blocks free or cached, the CPU pool empty."""
    for replica in replicas:
        alloc = replica.alloc
        alloc.check_invariants()
        usage = alloc.usage()
        assert usage.used_blocks == 0, f"replica {replica.index} leaks device blocks"
        assert usage.free_blocks + usage.cached_blocks == alloc.num_blocks
        assert alloc.num_free_cpu_blocks == alloc.num_cpu_blocks, "CPU pool leak"
        assert not replica.has_work() and not replica.view.running()
        assert replica.view.outstanding == 0 and replica.view.swapped_blocks == 0


def check_step_log(run: Run) -> None:
    """Preemptions, swaps and decode tokens reconcile with the step log."""
    steps, summary = run.result.steps, run.result.summary
    preempted = steps.column("num_preempted")
    assert int(preempted.sum()) == summary["num_preemptions"]
    assert (steps.column("swapped_blocks") >= 0).all()
    for replica, executor in zip(run.replicas, run.executors):
        mine = steps.column("replica") == replica.index
        assert int(preempted[mine].sum()) == replica.num_preemptions
        # Every recorded step ran on the executor (one more may run past the horizon).
        assert len(executor.swap_out) >= int(mine.sum())
        swap_out, swap_in = np.array(executor.swap_out), np.array(executor.swap_in)
        # A block moves to the CPU only when a preemption picked its sequence, and
        # comes back at most once.
        assert (preempted[mine][swap_out[: int(mine.sum())] > 0] > 0).all()
        assert swap_in.sum() <= swap_out.sum()
        assert (swap_out.sum() > 0) == (replica.num_swaps_out > 0)
        assert replica.num_swaps_out <= replica.num_preemptions
    if summary["num_preemptions"] == 0 and all(r.n == 1 for r in run.result.outcomes):
        # Without re-prefills each sample's prefill gives its first token and decode
        # steps give the rest: the log holds exactly output_len - 1 decodes per request.
        done = [r for r in run.result.outcomes if not r.rejected_reason]
        expected = sum(r.output_len - 1 for r in done)
        assert int(steps.column("num_decode_tokens").sum()) == expected


def check_run(raw: dict) -> Run:
    """Run a drawn scenario and check liveness and conservation; returns the run."""
    run = simulate_observed(validate_scenario(raw))
    check_requests(run.result.outcomes)
    check_memory(run.replicas)
    check_step_log(run)
    # Coverage of the interesting paths, shown by --hypothesis-show-statistics.
    summary = run.result.summary
    event(f"preempted: {summary['num_preemptions'] > 0}")
    event(f"swapped: {any(r.num_swaps_out for r in run.replicas)}")
    event(f"finished all: {summary['num_finished'] == summary['num_requests']}")
    for reason in summary["rejected_reasons"]:
        event(f"rejected: {reason.split(' ')[0]} ...")
    return run


@given(scenarios())
def test_every_scenario_runs_to_completion_without_leaks(raw):
    check_run(raw)


@given(pressured_scenarios())
def test_scenarios_under_memory_pressure_stay_live_and_leak_free(raw):
    check_run(raw)


# ------------------------------------------------------------- engine bugs this file found


def assert_triggered(run: Run, *, swap: bool = False) -> None:
    """The regression's trigger really happened (else the test would pass vacuously)."""
    assert run.result.summary["num_preemptions"] > 0
    if swap:
        assert any(r.num_swaps_out for r in run.replicas)


def tiny_raw(**workload) -> dict:
    return {
        "model": "tiny",
        "cache": {"block_size": 4, "num_blocks": 16},
        "workload": workload,
        "simulation": {"num_requests": 1},
    }


def test_one_token_outputs_with_samples():
    """Regression (fixed in 34e8246): complete_prefill freed the parent sequence of a
    one-token output before forking the other samples from it (UnknownSequence)."""
    run = simulate_observed(validate_scenario(tiny_raw(input=4, output=1, n=2)))
    check_requests(run.result.outcomes)
    check_memory(run.replicas)


def test_swapped_forks_do_not_livelock():
    """Regression (fixed in 6a80199 + 34e8246): forks swapped out without prefix caching
    came back as private copies (8 -> 12 blocks on an 8-block pool), and the sole running
    request was swapped out and in every step forever (a Livelock here)."""
    raw = tiny_raw(arrival={"kind": "constant", "rate_rps": 1000}, input=8, output=8, n=3)
    raw["cache"] = {"block_size": 4, "num_blocks": 8, "num_cpu_blocks": 64}
    raw["scheduler"] = {"engine": "pagesim"}  # samples fork (vllm-v1 fans them out)
    raw["preemption"] = {"mode": "swap"}
    raw["simulation"]["num_requests"] = 2
    run = simulate_observed(validate_scenario(raw))
    assert_triggered(run, swap=True)
    check_requests(run.result.outcomes)
    check_memory(run.replicas)
    check_step_log(run)


def test_preemption_between_steps_is_logged():
    """Regression (fixed in 604f051): a preemption made between steps under first-chunk
    admission counted in num_preemptions but in no step of steps.csv."""
    raw = tiny_raw(
        arrival={"kind": "poisson", "rate_rps": 2000.0},
        input={"kind": "uniform", "min": 1, "max": 2},
        output={"kind": "uniform", "min": 5, "max": 10},
        n=3,
        tenants={"count": 2},
        priorities={"count": 2},
        prefix={"num_groups": 2, "length": 3, "fraction": 0.5},
        sessions={"turns": {"kind": "uniform", "min": 1, "max": 3}, "think_time_s": 0.05},
    )
    raw["cache"] = {"block_size": 3, "num_blocks": 13}
    raw["scheduler"] = {
        "policy": "sjf-oracle",
        "max_num_seqs": 13,
        "max_num_batched_tokens": 13,
        "chunked_prefill": False,
        "watermark": 0.0,
        "admission": "first-chunk",
    }
    raw["preemption"] = {"victim": "most-blocks"}
    raw["simulation"] = {"num_requests": 12, "seed": 1951}
    run = simulate_observed(validate_scenario(raw))
    assert_triggered(run)
    check_step_log(run)
    check_memory(run.replicas)


def swapped_samples_raw(**changes) -> dict:
    """Found by the memory-pressure property test: swap, n = 3, one-token prompts."""
    raw = tiny_raw(
        arrival={"kind": "poisson", "rate_rps": 2000.0},
        input={"kind": "uniform", "min": 1, "max": 1},
        output={"kind": "uniform", "min": 18, "max": 20},
        n=3,
        tenants={"count": 3},
    )
    raw["cache"] = {"block_size": 5, "num_blocks": 18, "num_cpu_blocks": 64}
    raw["scheduler"] = {
        "policy": "fair-share",
        "max_num_seqs": 16,
        "max_num_batched_tokens": 107,
        "chunked_prefill": False,
        "watermark": 0.0,
    }
    raw["preemption"] = {"mode": "swap", "victim": "last-arrived"}
    raw["simulation"] = {"num_requests": 18, "seed": 6395}
    for key, value in changes.items():
        raw[key].update(value)
    return raw


def test_swapped_samples_leave_no_finished_holder():
    """Regression (fixed in 604f051): a request with n > 1 samples swapped out and back
    finished but stayed among the holders (a request holding no device memory was picked
    as a victim)."""
    run = simulate_observed(validate_scenario(swapped_samples_raw()))
    assert_triggered(run, swap=True)
    check_requests(run.result.outcomes)
    check_memory(run.replicas)


def test_swapped_samples_do_not_livelock():
    """Regression (fixed in 604f051): swap with n > 1 samples under first-chunk admission
    swapped the sole holder out and in every step forever."""
    raw = swapped_samples_raw(
        scheduler={"max_num_batched_tokens": 31, "admission": "first-chunk"},
        preemption={"victim": "lowest-priority"},
        simulation={"num_requests": 17, "seed": 0},
    )
    raw["workload"]["output"] = {"kind": "uniform", "min": 10, "max": 20}
    raw["workload"]["sessions"] = {
        "turns": {"kind": "uniform", "min": 1, "max": 2},
        "think_time_s": 0.0,
    }
    run = simulate_observed(validate_scenario(raw))
    assert_triggered(run, swap=True)
    check_requests(run.result.outcomes)
