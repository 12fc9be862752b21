"""Steady-state window, stability verdict and limiter, on a toy server whose capacity
follows in closed form.

The toy: every step takes ``STEP_S`` whatever it holds; prompts fit one step's token
budget and every request generates ``OUTPUT`` tokens, so a request holds one of the
``MAX_SEQS`` sequence slots for exactly ``OUTPUT`` steps (its prefill step gives the first
token, ``OUTPUT - 1`` decode steps the rest). Capacity is therefore
``MAX_SEQS / (OUTPUT * STEP_S)`` requests per second.
"""

from __future__ import annotations

import numpy as np
import pytest

from sim.config.loader import validate_scenario
from sim.output.steady import in_system, mser_truncation
from sim.output.tables import limiter_text
from sim.run.runner import simulate

STEP_S = 0.01
OUTPUT = 10
MAX_SEQS = 8
CAPACITY_RPS = MAX_SEQS / (OUTPUT * STEP_S)  # 80 req/s


class FixedStep:
    """Every step with work takes STEP_S seconds."""

    def execute(self, batch) -> float:
        return STEP_S if batch.batch_size or batch.swap_out or batch.swap_in else 0.0


def toy(rate_rps: float, num_requests: int, **sections) -> dict:
    raw = {
        "model": "tiny",
        "cache": {"block_size": 16, "num_blocks": 4096},
        "scheduler": {"max_num_seqs": MAX_SEQS, "max_num_batched_tokens": 1024},
        "workload": {
            "arrival": {"kind": "poisson", "rate_rps": rate_rps},
            "input": {"kind": "fixed", "value": 32},
            "output": {"kind": "fixed", "value": OUTPUT},
        },
        "simulation": {"num_requests": num_requests, "warmup_requests": 100, "seed": 1},
    }
    for section, fields in sections.items():
        raw[section] = {**raw.get(section, {}), **fields}
    return raw


def run_toy(rate_rps: float, num_requests: int, **sections) -> dict:
    scenario = validate_scenario(toy(rate_rps, num_requests, **sections))
    result = simulate(scenario, executor_factory=lambda _scenario, _alloc: FixedStep())
    return result.summary["steady_state"]


def test_half_load_is_stable_and_limited_by_nothing():
    window = run_toy(0.5 * CAPACITY_RPS, 6000)
    assert window["verdict"] == "stable", window["reason"]
    assert window["throughput_rps"] == pytest.approx(0.5 * CAPACITY_RPS, rel=0.05)
    assert abs(window["in_system_growth_rps"]) < 0.01 * CAPACITY_RPS
    assert window["limited_by"] == "none"
    # said as what it means, not as a limiter called "none"
    assert limiter_text(window).startswith("no limit (")
    assert "below max_num_seqs, the token budget and the KV pool" in limiter_text(
        window, explain=True
    )


def test_overload_is_reported_with_its_growth_rate():
    rate = 1.5 * CAPACITY_RPS
    window = run_toy(rate, 6000)
    assert window["verdict"] == "overloaded", window["reason"]
    assert window["in_system_growth_rps"] == pytest.approx(rate - CAPACITY_RPS, rel=0.10)
    assert window["throughput_rps"] == pytest.approx(CAPACITY_RPS, rel=0.05)
    assert window["limited_by"] == "max_num_seqs"
    assert "grow by" in window["reason"]


def test_short_run_is_too_short_and_says_how_many_requests_would_do():
    window = run_toy(0.5 * CAPACITY_RPS, 150)
    assert window["verdict"] == "too short"
    needed = window["requests_needed"]
    assert needed is not None and needed > 150
    assert f"{needed:,} requests" in window["reason"]
    # Running that many gives a verdict.
    assert run_toy(0.5 * CAPACITY_RPS, needed)["verdict"] == "stable"


def test_a_too_short_reason_names_the_requirement_that_binds():
    """The window of scenarios/tiny.yaml at 200 requests: 4.5 s, far longer than 20 mean
    latencies (0.3 s) but 2 completions short; the reason said the former."""
    from sim.output.steady import _short_of

    section = {
        "window_s": 4.503,
        "arrivals": 200,
        "completions": 198,
        "arrival_rate_rps": 44.19,
        "mean_e2e_s": 0.016,
    }
    reason = _short_of(section)
    assert "holds 200 arrivals and 198 completions" in reason and "latencies" not in reason
    section.update(window_s=100.0, arrivals=1000, completions=990, arrival_rate_rps=10.0)
    section["mean_e2e_s"] = 10.0
    assert "20 mean E2E latencies (20 x 10.00 s = 200.0 s)" in _short_of(section)


def test_no_measured_requests_is_too_short_without_a_window():
    window = run_toy(0.5 * CAPACITY_RPS, 101)
    assert window["verdict"] == "too short"
    assert window["window_s"] is None and window["limited_by"] is None


def test_token_budget_limit_is_named():
    # Plenty of slots and memory; a request needs 240 + 9 of the 256 tokens a step may
    # compute, so about 100 req/s fit: at 120 req/s prompts queue for the budget.
    window = run_toy(
        1.5 * CAPACITY_RPS,
        3000,
        scheduler={"max_num_seqs": 256, "max_num_batched_tokens": 256},
        workload={"input": {"kind": "fixed", "value": 240}},
    )
    assert window["limited_by"] == "token_budget"
    assert window["verdict"] == "overloaded"


def test_kv_block_limit_is_named():
    # 32 blocks of 16 slots hold 4 requests of 32 + 10 tokens: memory binds first.
    window = run_toy(1.5 * CAPACITY_RPS, 3000, cache={"num_blocks": 12})
    assert window["limited_by"] == "kv_blocks"
    assert window["verdict"] == "overloaded"


def test_mser_drops_a_filling_transient_and_nothing_from_a_level_series():
    rng = np.random.default_rng(0)
    level = 50 + rng.normal(0, 2, 255)
    assert mser_truncation(level) <= 25
    filling = np.concatenate([np.linspace(0, 50, 80), 50 + rng.normal(0, 2, 175)])
    assert 60 <= mser_truncation(filling) <= 120


def test_in_system_counts_arrivals_minus_departures():
    table = {
        "arrival_s": np.array([0.0, 1.0, 2.0, 3.0]),
        "finish_s": np.array([1.5, np.nan, 2.5, np.nan]),
        "rejected": np.array([False, True, False, False]),
    }
    levels = in_system(table, np.array([0.5, 1.0, 1.6, 2.2, 3.0, 9.0]))
    # request 1 is rejected (gone at arrival); request 3 never finishes
    assert levels.tolist() == [1.0, 1.0, 0.0, 1.0, 1.0, 1.0]
