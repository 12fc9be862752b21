"""Metrics: hand-made requests and steps whose answers are known (by hand or recomputed
with numpy from the same inputs), determinism of the written files, and NaN-safety."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.engine.records import LIMIT_NAMES, RequestOutcome, StepRecord
from sim.output.files import write_outputs
from sim.output.requests import REQUEST_COLUMNS, request_table
from sim.output.steplog import KV_SPLIT_KEYS, STEP_COLUMNS, StepLog
from sim.output.summary import summarize
from sim.output.tables import compare_table, format_summary_table
from sim.workload.request import Request

NAN = float("nan")
SLO = {"slo_ttft_s": 1.0, "slo_tpot_s": 0.1}


def make_request(
    req_id,
    arrival,
    first_token=NAN,
    finish=NAN,
    *,
    output_len=11,
    prompt_len=8,
    n=1,
    rejected="",
    cached=0,
    preemptions=0,
    replica=0,
    scheduled=None,
):
    """The outcome of a request run by an imaginary engine (scheduled when it got a
    token)."""
    request = Request(req_id, arrival, np.zeros(prompt_len, np.int32), output_len, n=n)
    return RequestOutcome(
        request,
        replica,
        first_token if scheduled is None else scheduled,
        first_token,
        finish,
        cached,
        preemptions,
        output_len * n if not math.isnan(finish) else 0,
        rejected,
    )


def record_split(log, *, time_s, duration_s, split, replica=0, batch=1, used=1, preempted=0):
    """Record one step whose slot split is `split` (5 numbers in KV_SPLIT_KEYS order)."""
    log.record(
        StepRecord(
            time_s, replica, duration_s, batch, 0, batch, used, 0, 0, 0, *split, 0, 0, preempted, 0
        )
    )


def simple_summary(requests, steps=None, **kwargs):
    return summarize(requests, steps or StepLog(), total_slots=100, **{**SLO, **kwargs})


# ------------------------------------------------------------------------- StepLog


def test_steplog_grows_past_initial_capacity_and_keeps_every_row():
    log = StepLog(initial_capacity=2)
    for i in range(1000):
        counts = (3, 4, 5, 6, 7, 8, 9, 10, 11, 12)
        log.record(
            StepRecord(0.5 * i, i % 3, 0.25, i, 2 * i, 1, *counts[:2], 0, *counts[2:], i % 2, 0)
        )
    assert len(log) == 1000 and log.capacity >= 1000
    np.testing.assert_array_equal(log.column("time_s"), 0.5 * np.arange(1000))
    np.testing.assert_array_equal(log.column("replica"), np.arange(1000) % 3)
    np.testing.assert_array_equal(log.column("num_prefill_tokens"), 2 * np.arange(1000))
    np.testing.assert_array_equal(log.as_array()[7, 6:17], [3, 4, 0, *range(5, 13)])


def test_steplog_views_are_read_only():
    log = StepLog()
    record_split(log, time_s=0.0, duration_s=1.0, split=(1, 0, 0, 0, 99))
    with pytest.raises(ValueError):
        log.column("batch_size")[0] = 5
    # still appendable
    log.record(StepRecord(1.0, 0, 1.0, 2, 0, 2, 1, 0, 0, 0, 1, 0, 0, 0, 99, 0, 0, 0, 0))
    assert log.column("batch_size").tolist() == [1.0, 2.0]


# ------------------------------------------------------------------------- latency


def test_latencies_by_hand():
    requests = [
        make_request(0, 0.0, 0.1, 1.1),  # TPOT (1.1 - 0.1) / 10 = 0.1
        make_request(1, 1.0, 1.2, 3.2),  # TPOT 0.2
        make_request(2, 2.0, 2.3, 5.3),  # TPOT 0.3
    ]
    s = simple_summary(requests)
    assert s["ttft_s"]["mean"] == pytest.approx(0.2)
    assert s["ttft_s"]["p50"] == pytest.approx(0.2)
    assert s["tpot_s"]["p50"] == pytest.approx(0.2)
    assert s["e2e_s"]["mean"] == pytest.approx((1.1 + 2.2 + 3.3) / 3)
    assert s["duration_s"] == pytest.approx(5.3)
    assert s["throughput_rps"] == pytest.approx(3 / 5.3)
    assert s["throughput_tok_s"] == pytest.approx(33 / 5.3)


def test_latency_percentiles_match_numpy():
    rng = np.random.default_rng(7)
    arrival = np.sort(rng.uniform(0, 50, 200))
    ttft = rng.exponential(0.3, 200)
    decode = rng.exponential(2.0, 200)
    out_len = rng.integers(1, 40, 200)
    requests = [
        make_request(i, a, a + t, a + t + d, output_len=int(o))
        for i, (a, t, d, o) in enumerate(zip(arrival, ttft, decode, out_len))
    ]
    s = simple_summary(requests)
    multi = out_len >= 2
    expected = {
        "ttft_s": ttft,
        "tpot_s": decode[multi] / (out_len[multi] - 1),
        "e2e_s": ttft + decode,
    }
    for key, values in expected.items():
        p50, p90, p99 = np.percentile(values, [50, 90, 99])
        assert s[key]["mean"] == pytest.approx(values.mean())
        assert [s[key][p] for p in ("p50", "p90", "p99")] == pytest.approx([p50, p90, p99])


def test_parallel_samples_count_all_tokens_but_tpot_per_stream():
    r = make_request(0, 0.0, 1.0, 3.0, output_len=5, n=4)
    s = simple_summary([r])
    assert s["tpot_s"]["mean"] == pytest.approx(0.5)  # 2 s over 4 decode steps
    assert s["throughput_tok_s"] == pytest.approx(20 / 3.0)


def test_warmup_excludes_the_first_requests_by_arrival():
    late = [make_request(i, 10.0 + i, 10.2 + i, 11.2 + i) for i in range(3)]
    warm = [make_request(10 + i, float(i), 5.0 + i, 20.0) for i in range(2)]  # slow ones
    s = simple_summary(late + warm, warmup_requests=2)  # given out of arrival order
    assert s["warmup_requests"] == 2 and s["num_measured"] == 3
    assert s["num_requests"] == 5 and s["num_finished"] == 5
    assert s["ttft_s"]["p99"] == pytest.approx(0.2)
    assert s["goodput"] == 1.0
    # duration from the first measured arrival (10.0) to the last measured finish (13.2)
    assert s["duration_s"] == pytest.approx(3.2)
    assert simple_summary(late + warm)["ttft_s"]["p99"] > 4.0


# ------------------------------------------------------------------- goodput, rejects


def test_goodput_counts_rejected_and_unfinished_as_misses():
    requests = [
        make_request(0, 0.0, 0.5, 1.5),  # meets both (TPOT 0.1)
        make_request(1, 0.0, 0.5, 1.5, output_len=1),  # one token: no TPOT, meets
        make_request(2, 0.0, 1.5, 2.5),  # TTFT miss
        make_request(3, 0.0, 0.5, 5.5),  # TPOT 0.5 miss
        make_request(4, 0.0, rejected="prompt_too_long"),
        make_request(5, 0.0, 0.2),  # got a token, never finished
        make_request(6, 0.0, rejected="prompt_too_long"),
        make_request(7, 0.0, rejected="kv_pool_too_small"),
    ]
    s = simple_summary(requests)
    assert s["goodput"] == pytest.approx(2 / 8)
    assert s["goodput_rps"] == pytest.approx(2 / 5.5)
    assert s["num_finished"] == 4 and s["num_rejected"] == 3
    assert s["rejected_reasons"] == {"kv_pool_too_small": 1, "prompt_too_long": 2}
    # TTFT is known for every request that produced a token, finished or not.
    assert s["ttft_s"]["mean"] == pytest.approx((0.5 * 3 + 1.5 + 0.2) / 5)
    assert s["e2e_s"]["p50"] == pytest.approx(np.percentile([1.5, 1.5, 2.5, 5.5], 50))


def test_no_finished_request_gives_nulls_not_nan(tmp_path):
    requests = [make_request(0, 0.0, rejected="too_long"), make_request(1, 1.0)]
    s = simple_summary(requests)
    assert s["num_finished"] == 0 and s["goodput"] == 0.0
    assert s["duration_s"] is None and s["throughput_rps"] is None
    assert s["ttft_s"] == {"mean": None, "p50": None, "p90": None, "p99": None}
    assert s["kv"]["free"] is None and s["mean_batch_size"] is None
    write_outputs(tmp_path, requests, StepLog(), s)
    assert "NaN" not in (tmp_path / "summary.json").read_text()
    assert "-" in format_summary_table(s)


def test_empty_run_is_summarised_and_written(tmp_path):
    s = simple_summary([])
    assert s["num_requests"] == 0 and s["goodput"] is None and s["prefix_hit_rate"] is None
    write_outputs(tmp_path, [], StepLog(), s)
    assert (tmp_path / "requests.csv").read_text() == ",".join(REQUEST_COLUMNS) + "\n"
    assert (tmp_path / "steps.csv").read_text() == ",".join(STEP_COLUMNS) + "\n"


# -------------------------------------------------------------------- cache, replicas


def test_prefix_hit_rate_and_preemptions():
    requests = [
        make_request(0, 0.0, 0.5, 1.5, prompt_len=100, cached=64, preemptions=2),
        make_request(1, 0.0, 0.5, 1.5, prompt_len=60, cached=0, preemptions=1),
        make_request(2, 0.0, prompt_len=500, rejected="too_long"),  # never scheduled
    ]
    s = simple_summary(requests)
    assert s["prefix_hit_rate"] == pytest.approx(64 / 160)
    assert s["num_preemptions"] == 3


def test_per_replica_only_with_several_replicas():
    requests = [
        make_request(0, 0.0, 0.5, 2.0, replica=0, cached=4, preemptions=1),
        make_request(1, 0.0, 0.5, 1.5, replica=1),
        make_request(2, 0.0, 0.5, 1.0, replica=1),
    ]
    log = StepLog()
    record_split(log, time_s=0.0, duration_s=1.0, split=(10, 0, 0, 0, 90), replica=0, batch=1)
    record_split(log, time_s=0.0, duration_s=1.0, split=(30, 0, 0, 0, 70), replica=1, batch=2)
    record_split(log, time_s=1.0, duration_s=1.0, split=(50, 0, 0, 0, 50), replica=1, batch=4)
    assert "per_replica" not in simple_summary(requests, log)
    s = simple_summary(requests, log, num_replicas=2)
    r0, r1 = s["per_replica"]
    assert (r0["replica"], r0["num_finished"], r1["num_finished"]) == (0, 1, 2)
    assert r0["mean_batch_size"] == 1.0 and r1["mean_batch_size"] == 3.0
    assert (r0["num_preemptions"], r1["num_preemptions"]) == (1, 0)
    assert r0["prefix_hit_rate"] == pytest.approx(0.5) and r1["prefix_hit_rate"] == 0.0
    assert r1["throughput_rps"] == pytest.approx(2 / 2.0)
    assert r1["kv"]["token_states"] == pytest.approx(0.4)
    assert s["kv"]["token_states"] == pytest.approx(0.3)


# ----------------------------------------------------------------------------- KV


def test_kv_fractions_are_duration_weighted():
    log = StepLog()
    record_split(log, time_s=0.0, duration_s=1.0, split=(80, 10, 5, 5, 0), used=6)
    record_split(log, time_s=1.0, duration_s=3.0, split=(20, 0, 5, 5, 70), used=2)
    kv = simple_summary([], log)["kv"]
    assert kv["token_states"] == pytest.approx((80 * 1 + 20 * 3) / 400)  # 0.35
    assert kv["token_states"] != pytest.approx((80 + 20) / 200)  # the unweighted answer
    assert kv["reserved"] == pytest.approx(0.025)
    assert kv["free"] == pytest.approx(210 / 400)
    assert kv["peak_used_blocks"] == 6
    assert sum(kv[k] for k in KV_SPLIT_KEYS) == pytest.approx(1.0)


def test_the_allocators_peaks_replace_the_step_logs():
    # The step log saw at most 6 blocks in use; the allocators (seeing the pool mid-step)
    # report 9 and 7, in blocks of 4 slots of a 100-slot pool.
    log = StepLog()
    record_split(log, time_s=0.0, duration_s=1.0, split=(80, 10, 5, 5, 0), used=6)
    summary = summarize(
        [], log, total_slots=100, **SLO, num_replicas=2, block_size=4, peak_used_blocks=[9, 7]
    )
    assert (summary["num_blocks"], summary["block_size"]) == (25, 4)
    kv = summary["kv"]
    assert (kv["peak_used_blocks"], kv["peak_used_slots"]) == (9, 36)
    assert kv["peak_used_fraction"] == pytest.approx(0.36)
    assert [r["kv"]["peak_used_blocks"] for r in summary["per_replica"]] == [9, 7]


@given(
    st.lists(
        st.tuples(
            st.floats(1e-6, 10.0),
            st.lists(st.integers(0, 1000), min_size=4, max_size=4),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_kv_fractions_sum_to_one_and_match_numpy(steps):
    total_slots = 4000
    log = StepLog(initial_capacity=1)
    for i, (duration, parts) in enumerate(steps):
        split = (*parts, total_slots - sum(parts))
        record_split(log, time_s=float(i), duration_s=duration, split=split)
    kv = summarize([], log, total_slots=total_slots, **SLO)["kv"]
    assert sum(kv[k] for k in KV_SPLIT_KEYS) == pytest.approx(1.0, abs=1e-9)
    weights = np.array([d for d, _ in steps])
    token_slots = np.array([p[0] for _, p in steps])
    expected = np.average(token_slots, weights=weights) / total_slots
    assert kv["token_states"] == pytest.approx(expected, rel=1e-9, abs=1e-12)


# ------------------------------------------------------------------------ outputs


def run_outputs(out_dir, seed=3):
    rng = np.random.default_rng(seed)
    requests = []
    for i in range(40):
        arrival = float(rng.uniform(0, 10))
        if i % 9 == 4:
            requests.append(make_request(i, arrival, rejected="prompt, too long"))
            continue
        first = arrival + float(rng.exponential(0.2))
        finish = first + float(rng.exponential(1.0)) if i % 7 else NAN
        requests.append(make_request(i, arrival, first, finish, replica=i % 2, cached=i % 5))
    log = StepLog(initial_capacity=8)
    for i in range(100):
        split = rng.multinomial(1000, [0.4, 0.1, 0.1, 0.1, 0.3])
        record_split(log, time_s=0.1 * i, duration_s=float(rng.uniform(0.01, 0.1)), split=split)
    summary = summarize(requests, log, total_slots=1000, **SLO, warmup_requests=3, num_replicas=2)
    paths = write_outputs(out_dir, requests, log, summary)
    return requests, log, summary, paths


def test_identical_inputs_give_byte_identical_files(tmp_path):
    _, _, _, first = run_outputs(tmp_path / "a")
    _, _, _, second = run_outputs(tmp_path / "b")
    assert sorted(first) == ["requests.csv", "steps.csv", "summary.json"]
    for name, path in first.items():
        assert path.read_bytes() == second[name].read_bytes(), name
    _, _, _, other = run_outputs(tmp_path / "c", seed=4)
    assert other["steps.csv"].read_bytes() != first["steps.csv"].read_bytes()
    assert str(tmp_path) not in first["summary.json"].read_text()


def test_csv_headers_and_exact_round_trip(tmp_path):
    requests, log, summary, paths = run_outputs(tmp_path)
    with paths["steps.csv"].open() as f:
        rows = list(csv.reader(f))
    assert tuple(rows[0]) == STEP_COLUMNS and len(rows) == len(log) + 1
    numbers = [row[:-1] for row in rows[1:]]
    np.testing.assert_array_equal(np.array(numbers, dtype=float), log.as_array()[:, :-1])
    assert all("." not in cell for cell in rows[1][3:])  # counts written as integers
    # the limit column is written by name
    limits = log.column("limit").astype(int)
    assert [row[-1] for row in rows[1:]] == [LIMIT_NAMES[code] for code in limits]
    with paths["requests.csv"].open() as f:
        req_rows = list(csv.DictReader(f))
    assert tuple(req_rows[0]) == REQUEST_COLUMNS and len(req_rows) == len(requests)
    table = request_table(requests)
    for column in ("arrival_s", "finish_s", "ttft_s", "e2e_s"):
        np.testing.assert_array_equal([float(r[column]) for r in req_rows], table[column])
    assert [r["rejected_reason"] for r in req_rows].count("prompt, too long") == 4  # i % 9 == 4
    assert json.loads(paths["summary.json"].read_text()) == json.loads(json.dumps(summary))


def test_request_rows_are_ordered_by_arrival(tmp_path):
    requests, _, _, paths = run_outputs(tmp_path)
    with paths["requests.csv"].open() as f:
        arrivals = [float(r["arrival_s"]) for r in csv.DictReader(f)]
    assert arrivals == sorted(r.arrival_s for r in requests)


# ------------------------------------------------------------------------- tables


def test_summary_table_shows_headline_numbers(tmp_path):
    _, _, summary, _ = run_outputs(tmp_path)
    text = format_summary_table(summary)
    for label in ("TTFT", "TPOT", "E2E", "goodput", "preemptions", "prefix hit rate", "p99"):
        assert label in text
    assert f"{summary['num_finished']} / {summary['num_requests']}" in text
    assert f"{summary['steady_state']['ttft_s']['p50'] * 1000:,.1f}" in text
    assert f"verdict                    {summary['steady_state']['verdict']}" in text
    assert "prompt, too long: 4" in text


def test_compare_table_has_one_column_per_run(tmp_path):
    _, _, a, _ = run_outputs(tmp_path / "a")
    _, _, b, _ = run_outputs(tmp_path / "b", seed=9)
    lines = compare_table({"fcfs": a, "priority": b}).splitlines()
    assert lines[0].split() == ["metric", "fcfs", "priority"]
    throughput = next(line for line in lines if line.startswith("whole-run throughput req/s"))
    assert throughput.split()[-2:] == [f"{a['throughput_rps']:.2f}", f"{b['throughput_rps']:.2f}"]
    assert len({len(line) for line in lines if line.startswith(("metric", "KV peak"))}) == 1
    with pytest.raises(ValueError):
        compare_table({})


def test_limit_column_is_written_by_name(tmp_path):
    log = StepLog()
    for code in range(len(LIMIT_NAMES)):
        log.record(
            StepRecord(float(code), 0, 1.0, 1, 0, 1, 1, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, code)
        )
    paths = write_outputs(tmp_path, [], log, simple_summary([], log))
    with paths["steps.csv"].open() as f:
        written = [row["limit"] for row in csv.DictReader(f)]
    assert written == ["none", "max_num_seqs", "token_budget", "kv_blocks", "policy"]
