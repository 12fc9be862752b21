"""summary.json's vLLM-benchmark block: vLLM's names and units, exact weighted
percentiles, and inter-token latencies that add up to what each request lived through."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.config.loader import validate_scenario
from sim.output.benchmark import percentile_name, weighted_percentiles
from sim.run.runner import simulate

VLLM_NAMES = {
    "duration",
    "completed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
} | {
    f"{stat}_{metric}_ms"
    for metric in ("ttft", "tpot", "itl", "e2el")
    for stat in ("mean", "median", "std", "p50", "p99.9")
}


@given(
    values=st.lists(st.floats(0, 10, allow_nan=False), min_size=1, max_size=30),
    data=st.data(),
)
def test_weighted_percentiles_equal_numpy_on_the_repeated_samples(values, data):
    counts = data.draw(st.lists(st.integers(1, 5), min_size=len(values), max_size=len(values)))
    values, counts = np.array(values), np.array(counts)
    qs = [0, 12.5, 50, 90, 99, 99.9, 100]
    expected = np.percentile(np.repeat(values, counts), qs)
    np.testing.assert_allclose(weighted_percentiles(values, counts, qs), expected, atol=1e-12)


def test_percentile_names_follow_vllm():
    assert [percentile_name(p) for p in (50, 99.0, 99.9)] == ["p50", "p99", "p99.9"]


RAW = {
    "model": "tiny",
    "cache": {"block_size": 4, "num_blocks": 40},
    "scheduler": {"max_num_seqs": 8},
    "workload": {
        "arrival": {"kind": "poisson", "rate_rps": 300},
        "input": {"kind": "uniform", "min": 4, "max": 40},
        "output": {"kind": "uniform", "min": 1, "max": 60},
    },
    "simulation": {"num_requests": 60, "seed": 3},
}


@pytest.mark.parametrize("batching", ["mixed", "prefill-first", "static"])
@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_token_gaps_add_up_to_each_requests_decode_time(batching, mode):
    raw = {**RAW, "scheduler": {**RAW["scheduler"], "batching": batching}}
    raw["preemption"] = {"mode": mode}
    raw["cache"] = {**RAW["cache"], "num_cpu_blocks": 64}
    result = simulate(validate_scenario(raw), metric_percentiles=(50, 99.9))
    block = result.summary["benchmark"]
    assert set(block) >= VLLM_NAMES
    assert block["completed"] == len(result.outcomes)  # all finished
    # Each sample's tokens after its first have one gap each, and the gaps of a sample
    # telescope to last token - first token; with n = 1 that is finish - first token.
    decode_time = sum(o.finish_s - o.first_token_s for o in result.outcomes)
    later_tokens = sum(o.output_len - 1 for o in result.outcomes)
    itl_mean_s = block["mean_itl_ms"] / 1e3
    assert later_tokens > 0 and itl_mean_s * later_tokens == pytest.approx(decode_time)
    assert result.summary["num_preemptions"] > 0  # so the gaps include preemptions
    assert block["total_output_tokens"] == sum(o.output_tokens for o in result.outcomes)
    assert block["request_throughput"] == pytest.approx(block["completed"] / block["duration"])
