"""Fast-forward over decode stretches changes nothing but speed.

* the step-by-step path (``pagesim run --step-by-step``) writes the very bytes pinned in
  tests/golden/outputs.json, which the default (fast-forward) path is held to by
  tests/test_golden.py: both paths, every shipped scenario, byte for byte;
* fast-forward does engage on the shipped scenarios (else the above proves nothing);
* over random small scenarios (every policy, allocator, batching mode, 1-3 replicas,
  runs cut by the time horizon mid-stretch) both paths give the same step log, request
  outcomes, summary and allocator peaks.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from sim.config.loader import load_scenario, validate_scenario
from sim.costs.calibrated import FEATURES, CalibratedCostModel, Calibration
from sim.output.steplog import STEP_COLUMNS, StepLog
from sim.run.build import analytic_executor
from sim.run.runner import simulate
from tests.golden.cases import cases, digests
from tests.sim.engine.test_liveness import scenarios
from tests.test_golden import PINNED


@pytest.mark.parametrize("name", sorted(cases()))
def test_step_by_step_writes_the_pinned_outputs(name):
    scenario, overrides = cases()[name]
    assert digests(scenario, overrides, ("--step-by-step",)) == PINNED[name]


@pytest.mark.parametrize(
    ("path", "sets", "share"),
    [
        ("scenarios/default.yaml", ["simulation.num_requests=1000"], 0.05),
        # 8 replicas at 40 req/s in total: small batches, long quiet stretches
        (
            "scenarios/default.yaml",
            ["simulation.num_requests=1000", "routing.replicas=8", "workload.arrival.rate_rps=40"],
            0.5,
        ),
        ("scenarios/policies/preemption-swap.yaml", ["simulation.num_requests=200"], 0.3),
        ("scenarios/policies/routing-multi-turn.yaml", ["simulation.num_requests=300"], 0.3),
        # vLLM's async scheduling: arrivals wait a step, the CPU hides behind the GPU
        (
            "scenarios/default.yaml",
            [
                "simulation.num_requests=1000",
                "routing.replicas=8",
                "workload.arrival.rate_rps=40",
                "scheduler.async_scheduling=true",
                "cost_model.params.cpu_overlap=true",
            ],
            0.5,
        ),
        # sliding windows release blocks as a stretch goes (one group of windows beside
        # full attention), and under async scheduling a step late
        ("scenarios/windows/gpt-oss-20b.yaml", ["simulation.num_requests=60"], 0.9),
        (
            "scenarios/windows/gpt-oss-20b.yaml",
            [
                "simulation.num_requests=60",
                "scheduler.async_scheduling=true",
                "cache.prefix_caching=true",
            ],
            0.9,
        ),
    ],
)
def test_fast_forward_engages(path, sets, share):
    result = simulate(load_scenario(path, sets))
    assert result.fast_forwarded_steps >= share * result.num_steps
    stepped = simulate(load_scenario(path, sets), fast_forward=False)
    assert stepped.fast_forwarded_steps == 0
    assert same_results(result, stepped)


def same_results(a, b) -> bool:
    """Step logs, outcomes and summaries equal bit for bit (NaN equal to NaN)."""
    assert a.num_steps == b.num_steps
    assert a.steps.as_array().tobytes() == b.steps.as_array().tobytes()
    assert [outcome_key(o) for o in a.outcomes] == [outcome_key(o) for o in b.outcomes]
    assert json.dumps(a.summary, sort_keys=True) == json.dumps(b.summary, sort_keys=True)
    return True


def outcome_key(outcome) -> tuple:
    times = (outcome.first_scheduled_s, outcome.first_token_s, outcome.finish_s)
    return (
        outcome.req_id,
        outcome.replica,
        tuple(t.hex() if not math.isnan(t) else "nan" for t in times),
        outcome.cached_prompt_tokens,
        outcome.num_preemptions,
        outcome.output_tokens,
        outcome.rejected_reason,
        tuple(t.hex() for t in outcome.preemption_times),
    )


@given(
    raw=scenarios(),
    horizon=st.sampled_from([1e6, 1e6, 0.02, 0.2, 1.0]),
    asynchronous=st.booleans(),
)
def test_fast_forward_equals_step_by_step(raw, horizon, asynchronous):
    raw["simulation"]["max_sim_time_s"] = horizon
    raw.setdefault("scheduler", {})["async_scheduling"] = asynchronous
    scenario = validate_scenario(raw)
    forwarded = simulate(scenario)
    event(f"fast-forwarded: {forwarded.fast_forwarded_steps > 0}")
    assert same_results(forwarded, simulate(scenario, fast_forward=False))


@given(
    contexts=st.lists(st.integers(1, 100_000), min_size=1, max_size=300),
    steps=st.integers(1, 64),
    path=st.sampled_from(
        ["scenarios/default.yaml", "scenarios/long-context.yaml", "scenarios/tiny.yaml"]
    ),
    tensor_parallel=st.sampled_from([1, 2]),
    overlap=st.booleans(),
)
def test_cost_model_stretch_equals_its_steps(contexts, steps, path, tensor_parallel, overlap):
    """decode_steps gives each step's predict() bit for bit (analytic, with or without
    the CPU hidden behind the GPU, and calibrated)."""
    overrides = [f"tensor_parallel={tensor_parallel}", f"cost_model.params.cpu_overlap={overlap}"]
    if overlap:  # a CPU cost some steps hide and some do not
        overrides.append("cost_model.params.cpu_step_overhead_s=0.004")
    scenario = load_scenario(path, overrides)
    lens = np.array(contexts, dtype=np.int64)
    analytic = analytic_executor(scenario)
    coefficients = {name: 1e-6 * (i + 1) for i, name in enumerate(FEATURES)}
    calibrated = CalibratedCostModel(Calibration(coefficients))
    for model in (analytic, calibrated):
        times = model.decode_steps(lens, steps)
        assert [t.hex() for t in times.tolist()] == [
            model.predict([], lens + i).hex() for i in range(steps)
        ]


def test_step_log_reads_rows_in_the_order_steps_ended():
    log = StepLog(initial_capacity=2)
    row = [0.0] * len(STEP_COLUMNS)
    log.record(tuple([1.0, 0, 1.0] + row[3:]), 2.0)  # replica 0's step ending at 2
    log.record_rows(np.array([[0.5, 1, 0.25] + row[3:], [0.75, 1, 1.0] + row[3:]]), [0.75, 1.75])
    log.record(tuple([2.0, 0, 1.0] + row[3:]), 3.0)
    assert log.column("time_s").tolist() == [0.5, 0.75, 1.0, 2.0]
    assert log.column("replica").tolist() == [1, 1, 0, 0]
