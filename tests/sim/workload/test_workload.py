"""The workload generator: determinism, rates, length means, sharing, sessions, traces."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from sim.catalog.presets import MODEL_PRESETS
from sim.config.workload import LENGTH_PRESETS, PresetLength, WorkloadSpec
from sim.inputs.traces import TraceError, load_trace
from sim.workload.generate import WorkloadError, generate_requests
from sim.workload.sampling import sample_lengths
from sim.workload.tokens import (
    MOONCAKE_BLOCK_TOKENS,
    SyntheticOutputs,
    output_stream_states,
    output_token_ids,
    stream_id,
)

# A huge vocabulary makes an accidental shared token (1 in 2**30) a non-event, so tests
# can demand that unrelated requests share nothing.
WIDE = MODEL_PRESETS["tiny"].model_copy(update={"vocab_size": 1 << 30, "max_model_len": 8192})
TINY = MODEL_PRESETS["tiny"]


def workload(**fields) -> WorkloadSpec:
    fields.setdefault("arrival", {"kind": "poisson", "rate_rps": 10.0})
    return WorkloadSpec.model_validate(fields)


def generate(spec, model=WIDE, seed=0, **limits):
    limits.setdefault("num_requests", 200)
    return generate_requests(spec, model, rng=np.random.default_rng(seed), **limits)


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


# --- determinism -----------------------------------------------------------------------


def test_same_seed_gives_identical_requests_and_another_seed_differs():
    spec = workload(prefix={"num_groups": 3}, sessions={"turns": 3}, n=2)
    first, again, other = generate(spec), generate(spec), generate(spec, seed=1)
    assert [r.arrival_s for r in first] == [r.arrival_s for r in again]
    assert all(np.array_equal(a.prompt, b.prompt) for a, b in zip(first, again))
    assert [r.output_len for r in first] == [r.output_len for r in again]
    assert [r.arrival_s for r in first] != [r.arrival_s for r in other]
    assert not np.array_equal(first[0].prompt, other[0].prompt)


def test_requests_are_sorted_with_req_id_equal_to_index():
    requests = generate(workload(sessions={"turns": 4, "think_time_s": 0.5}), num_requests=300)
    assert [r.req_id for r in requests] == list(range(300))
    arrivals = np.array([r.arrival_s for r in requests])
    assert np.all(np.diff(arrivals) >= 0)
    assert all(r.prompt.dtype == np.int32 for r in requests)


# --- arrivals ----------------------------------------------------------------------------


def test_poisson_rate_and_exponential_gaps():
    requests = generate(workload(input=4, output=4), num_requests=20_000)
    gaps = np.diff([0.0] + [r.arrival_s for r in requests])
    assert gaps.mean() == pytest.approx(0.1, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)


def test_gamma_arrivals_have_the_requested_burstiness():
    spec = workload(arrival={"kind": "gamma", "rate_rps": 5.0, "cv": 4.0}, input=4, output=4)
    gaps = np.diff([0.0] + [r.arrival_s for r in generate(spec, num_requests=40_000)])
    assert gaps.mean() == pytest.approx(0.2, rel=0.1)
    assert gaps.std() / gaps.mean() == pytest.approx(4.0, rel=0.15)


def test_constant_arrivals_are_evenly_spaced():
    spec = workload(arrival={"kind": "constant", "rate_rps": 4.0}, input=4, output=4)
    arrivals = [r.arrival_s for r in generate(spec, num_requests=50)]
    assert np.allclose(np.diff(arrivals), 0.25)


def staged(process="poisson", stages=((8.0, 60.0), (20.0, 30.0)), **fields):
    rows = [{"rate_rps": rate, "duration_s": seconds} for rate, seconds in stages]
    arrival = {"kind": "stages", "process": process, "stages": rows, **fields}
    return workload(arrival=arrival, input=4, output=4)


def test_staged_constant_arrivals_send_each_stage_at_its_own_interval():
    requests = generate(staged("constant"), num_requests=None, duration_s=90.0)
    arrivals = np.array([r.arrival_s for r in requests])
    first, second = arrivals[arrivals < 60.0], arrivals[arrivals >= 60.0]
    assert len(first) == 480 and len(second) == 600  # rate x duration each
    assert first[0] == 0.0 and second[0] == 60.0  # a stage sends at its start
    assert np.allclose(np.diff(first), 1 / 8) and np.allclose(np.diff(second), 1 / 20)


def test_staged_poisson_arrivals_follow_each_stage_rate():
    spec = staged(stages=((5.0, 2000.0), (50.0, 200.0)))
    arrivals = np.array([r.arrival_s for r in generate(spec, num_requests=None, duration_s=2200)])
    assert arrivals.max() < 2200.0
    assert (arrivals < 2000).sum() == pytest.approx(10_000, rel=0.05)
    assert (arrivals >= 2000).sum() == pytest.approx(10_000, rel=0.05)
    gaps = np.diff(arrivals[arrivals < 2000])
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)


def test_staged_poisson_count_arrivals_send_exactly_rate_times_duration():
    requests = generate(staged("poisson-count"), num_requests=None, duration_s=90.0)
    arrivals = np.array([r.arrival_s for r in requests])
    assert (arrivals < 60).sum() == 480 and (arrivals >= 60).sum() == 600
    assert 59.99 < arrivals[arrivals < 60].max() < 60.0 and arrivals.max() < 90.0
    gaps = np.diff(arrivals[arrivals < 60])
    assert 0.8 < gaps.std() / gaps.mean() < 1.2  # exponential gaps, not even ones


def test_staged_arrivals_stop_at_the_request_limit_and_the_duration():
    assert len(generate(staged("constant"), num_requests=500, duration_s=None)) == 500
    short = generate(staged("constant"), num_requests=None, duration_s=61.0)
    assert len(short) == 480 + 20


def test_a_staged_scenario_runs_its_stages_whole_by_default():
    from sim.config.loader import validate_scenario

    stages = [{"rate_rps": 2, "duration_s": 10}, {"rate_rps": 4, "duration_s": 5}]
    arrival = {"kind": "stages", "process": "constant", "stages": stages}
    scenario = validate_scenario({"workload": {"arrival": arrival}})
    assert scenario.simulation.duration_s == 15.0 and scenario.simulation.num_requests is None
    fixed = validate_scenario({"workload": {"arrival": arrival}, "simulation": {"num_requests": 7}})
    assert fixed.simulation.num_requests == 7 and fixed.simulation.duration_s is None


def test_a_prompt_pool_reuses_whole_prompts_in_a_cycle():
    spec = workload(
        prefix={"num_groups": 3, "length": 20},
        prompts={"distinct": 6},
        input={"kind": "uniform", "min": 5, "max": 50},
        output=4,
    )
    requests = generate(spec, num_requests=24)
    prompts = [tuple(r.prompt.tolist()) for r in requests]
    assert len(set(prompts)) == 6
    assert prompts[:6] == prompts[6:12] == prompts[18:24]  # one shuffled order, repeated
    heads = {p[:20] for p in prompts}
    assert len(heads) == 3  # entry e carries group e mod 3's system prompt
    for request, prompt in zip(requests, prompts):
        assert len(prompt) == request.prompt_len
        assert prompt[:20] == tuple(requests[0].source.group_prompt(request.prefix_group))


def test_a_uniform_prompt_pool_picks_entries_at_random():
    spec = workload(prompts={"distinct": 5, "order": "uniform"}, input=8, output=4)
    prompts = [tuple(r.prompt.tolist()) for r in generate(spec, num_requests=400)]
    counts = sorted(prompts.count(p) for p in set(prompts))
    assert len(counts) == 5 and counts[0] > 50  # each entry ~80 times
    assert prompts[:5] != prompts[5:10]


def test_a_prompt_pool_does_not_combine_with_sessions():
    with pytest.raises(ValueError, match="prompt pool"):
        workload(prompts={"distinct": 5}, sessions={"turns": 2})


def test_duration_limit_keeps_only_arrivals_inside_it():
    requests = generate(workload(input=4, output=4), num_requests=None, duration_s=300.0)
    assert max(r.arrival_s for r in requests) < 300.0
    assert len(requests) == pytest.approx(3000, rel=0.1)  # 10 rps x 300 s


def test_the_first_limit_reached_wins():
    requests = generate(workload(input=4, output=4), num_requests=50, duration_s=1e6)
    assert len(requests) == 50


def test_no_limit_is_an_error():
    with pytest.raises(ValueError, match="num_requests or duration_s"):
        generate(workload(), num_requests=None)


# --- lengths -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sharegpt", "alpaca"])
@pytest.mark.parametrize("role", ["input", "output"])
def test_length_presets_match_the_published_means(name, role):
    lengths = sample_lengths(PresetLength(name=name), 400_000, np.random.default_rng(3), role)
    assert lengths.min() >= 1
    assert lengths.mean() == pytest.approx(LENGTH_PRESETS[name][role][0], rel=0.03)


def test_preset_means_survive_generation_with_room_to_spare():
    big = WIDE.model_copy(update={"max_model_len": 1 << 20})
    requests = generate(workload(input="alpaca", output="alpaca"), big, num_requests=30_000)
    assert np.mean([r.prompt_len for r in requests]) == pytest.approx(19.31, rel=0.03)
    assert np.mean([r.output_len for r in requests]) == pytest.approx(58.45, rel=0.03)


def test_lognormal_mean_and_cv():
    spec = workload(input={"kind": "lognormal", "mean": 300, "cv": 0.5})
    lengths = sample_lengths(spec.input, 200_000, np.random.default_rng(0))
    assert lengths.mean() == pytest.approx(300, rel=0.02)
    assert lengths.std() / lengths.mean() == pytest.approx(0.5, rel=0.05)


def test_uniform_and_fixed_lengths():
    spec = workload(input={"kind": "uniform", "min": 3, "max": 9}, output=7)
    requests = generate(spec, num_requests=2000)
    prompt_lens = {r.prompt_len for r in requests}
    assert prompt_lens == set(range(3, 10))
    assert {r.output_len for r in requests} == {7}


def test_empirical_two_column_table_is_sampled_in_pairs(tmp_path):
    table = tmp_path / "lengths.txt"
    table.write_text("# input output\nin out\n10 100\n20 200\n30 300\n")
    spec = workload(
        input={"kind": "empirical", "path": str(table)},
        output={"kind": "empirical", "path": str(table)},
    )
    requests = generate(spec, num_requests=300)
    assert {(r.prompt_len, r.output_len) for r in requests} == {(10, 100), (20, 200), (30, 300)}


def test_bad_length_table_rows_are_reported(tmp_path):
    table = tmp_path / "lengths.txt"
    table.write_text("length\n5\nsix\n")
    with pytest.raises(ValueError, match=r"lengths.txt:3: column 0: expected a positive"):
        workload(input={"kind": "empirical", "path": str(table)})
    table.write_text("length\n5\n6\n")
    with pytest.raises(ValueError, match=r"column 1 not in"):
        workload(input={"kind": "empirical", "path": str(table), "column": 1})


def test_empirical_single_column(tmp_path):
    table = tmp_path / "out.txt"
    table.write_text("5\n6\n")
    spec = workload(input=4, output={"kind": "empirical", "path": str(table)})
    assert {r.output_len for r in generate(spec)} == {5, 6}


def test_lengths_are_clipped_to_the_model_length():
    short = TINY.model_copy(update={"max_model_len": 64})
    lengths = {"kind": "uniform", "min": 1, "max": 40}  # about 8 % of pairs exceed 64
    spec = workload(input=lengths, output=lengths, n=2)
    requests = generate(spec, short, num_requests=2000)
    assert all(r.prompt_len >= 1 and r.output_len >= 1 for r in requests)
    assert max(r.prompt_len + r.output_len for r in requests) == 64


def test_lengths_that_mostly_overshoot_the_model_are_an_error():
    short = TINY.model_copy(update={"max_model_len": 64})
    spec = workload(prefix={"num_groups": 2, "length": 40}, n=2)  # sharegpt lengths
    with pytest.raises(WorkloadError, match=r"\d+% of the drawn prompt \+ output lengths"):
        generate(spec, short, num_requests=2000)


# --- prefix groups, sessions, tenants ------------------------------------------------------


def test_prefix_groups_share_exactly_their_system_prompt():
    spec = workload(prefix={"num_groups": 3, "length": 100, "fraction": 0.7}, input=50)
    requests = generate(spec, num_requests=300)
    grouped = [r for r in requests if r.prefix_group >= 0]
    assert 0.6 < len(grouped) / len(requests) < 0.8
    for a, b in zip(requests, requests[1:]):
        shared = common_prefix(a.prompt, b.prompt)
        if a.prefix_group == b.prefix_group >= 0:
            assert shared == 100
        else:
            assert shared == 0


def test_zipf_pick_favours_the_first_group():
    spec = workload(prefix={"num_groups": 4, "pick": "zipf", "zipf_exponent": 1.5})
    counts = np.bincount([r.prefix_group for r in generate(spec, num_requests=4000)])
    assert list(counts) == sorted(counts, reverse=True)


def test_session_turns_extend_the_previous_prompt_and_output():
    spec = workload(
        sessions={"turns": 3, "think_time_s": 2.0, "think_time": "fixed"},
        prefix={"num_groups": 1, "length": 32},
        input=20,
        output=10,
    )
    requests = generate(spec, num_requests=120, token_seed=5)
    latest = {}
    for r in requests:
        if r.turn == 0:
            assert r.prompt_len == 32 + 20
        else:
            prev = latest[r.session]
            assert prev.turn == r.turn - 1
            assert r.arrival_s == pytest.approx(prev.arrival_s + 2.0)
            outputs = output_token_ids(
                5, stream_id(prev.req_id, 0), np.arange(prev.output_len), WIDE.vocab_size
            )
            expected_head = np.concatenate([prev.prompt, outputs])
            assert np.array_equal(r.prompt[: len(expected_head)], expected_head)
            assert r.prompt_len == len(expected_head) + 20
        latest[r.session] = r
    assert max(r.turn for r in requests) == 2


def test_sessions_end_when_the_history_fills_the_model():
    short = TINY.model_copy(update={"max_model_len": 200})
    spec = workload(sessions={"turns": 10, "think_time_s": 1.0}, input=40, output=30)
    requests = generate(spec, short, num_requests=500)
    assert all(r.prompt_len + r.output_len <= 200 for r in requests)
    assert max(r.turn for r in requests) < 9  # 10 turns of 70 tokens cannot fit


def test_tenants_priorities_and_samples():
    spec = workload(
        tenants={"count": 3, "pick": "weights", "weights": [0, 1, 3]},
        priorities={"count": 2},
        n=4,
    )
    requests = generate(spec, num_requests=2000)
    tenants = np.bincount([r.tenant for r in requests], minlength=3)
    assert tenants[0] == 0 and tenants[2] / tenants[1] == pytest.approx(3, rel=0.2)
    assert {r.priority for r in requests} == {0, 1}
    assert {r.n for r in requests} == {4}


# --- token ids -----------------------------------------------------------------------------


@given(
    seed=st.integers(0, 2**32),
    streams=st.lists(st.integers(0, 2**40), min_size=1, max_size=20),
    vocab=st.integers(1, 1 << 20),
)
def test_output_tokens_are_pure_elementwise_and_in_range(seed, streams, vocab):
    streams_arr = np.asarray(streams, dtype=np.int64)
    positions = np.arange(len(streams))
    together = output_token_ids(seed, streams_arr, positions, vocab)
    one_by_one = [output_token_ids(seed, s, p, vocab) for s, p in zip(streams, positions)]
    assert together.dtype == np.int32
    assert np.array_equal(together, np.asarray(one_by_one).reshape(-1))
    assert together.min() >= 0 and together.max() < vocab


def test_output_streams_differ_between_streams_and_seeds():
    positions = np.arange(64)
    a = output_token_ids(0, stream_id(7, 0), positions, 1 << 30)
    assert not np.array_equal(a, output_token_ids(0, stream_id(7, 1), positions, 1 << 30))
    assert not np.array_equal(a, output_token_ids(1, stream_id(7, 0), positions, 1 << 30))
    assert len(set(a.tolist())) == 64


# --- traces --------------------------------------------------------------------------------


def test_azure_trace_times_and_lengths_with_time_scale(tmp_path):
    trace = tmp_path / "azure.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.5000000,100,10\n"
        "2023-11-16 18:15:48.7500000,5000,20\n"
        "2023-11-16 18:15:47.0000000,0,0\n"
    )
    spec = workload(
        arrival={"kind": "trace", "format": "azure-csv", "path": str(trace), "time_scale": 2.0}
    )
    requests = generate(spec, TINY)
    assert [r.arrival_s for r in requests] == pytest.approx([0.0, 1.0, 4.5])
    assert [r.prompt_len for r in requests] == [100, 1, 2047]  # 0 -> 1, 5000 -> clipped
    assert [r.output_len for r in requests] == [10, 1, 1]


def test_mooncake_trace_equal_hash_ids_are_equal_blocks(tmp_path):
    trace = tmp_path / "mooncake.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 3]},
        {"timestamp": 1500, "input_length": 700, "output_length": 6, "hash_ids": [1, 4]},
        {"timestamp": 3000, "input_length": 600, "output_length": 7, "hash_ids": [9]},
    ]
    trace.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    spec = workload(
        arrival={"kind": "trace", "format": "mooncake-jsonl", "path": str(trace), "time_scale": 0.5}
    )
    a, b, c = generate(spec, WIDE)
    assert [a.arrival_s, b.arrival_s, c.arrival_s] == pytest.approx([0.0, 0.75, 1.5])
    assert [a.prompt_len, b.prompt_len, c.prompt_len] == [1100, 700, 600]
    assert [a.output_len, b.output_len, c.output_len] == [5, 6, 7]
    assert common_prefix(a.prompt, b.prompt) == MOONCAKE_BLOCK_TOKENS
    assert common_prefix(a.prompt, c.prompt) == 0
    # the same hash id gives the same tokens in another run too
    again = generate(spec, WIDE, seed=1)
    assert np.array_equal(again[0].prompt[:1024], a.prompt[:1024])


def test_a_request_trace_shares_prefix_blocks_by_hash_ids(tmp_path):
    """requests-jsonl rows with hash_ids: prompts agree on exactly the leading blocks
    (of arrival.hash_block_tokens tokens) whose ids agree, and a partial last block."""
    trace = tmp_path / "requests.jsonl"
    rows = [
        {"arrival_s": 0.0, "input_tokens": 40, "output_tokens": 2, "hash_ids": [0, 1, 2]},
        {"arrival_s": 0.5, "input_tokens": 37, "output_tokens": 2, "hash_ids": [0, 1, 3]},
        {"arrival_s": 1.0, "input_tokens": 40, "output_tokens": 2, "hash_ids": [0, 1, 2]},
        {"arrival_s": 1.5, "input_tokens": 20, "output_tokens": 2},  # its own prompt
    ]
    trace.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    arrival = {"kind": "trace", "format": "requests-jsonl", "path": str(trace)}
    a, b, c, d = generate(workload(arrival=arrival), WIDE)
    assert [r.prompt_len for r in (a, b, c, d)] == [40, 37, 40, 20]
    assert common_prefix(a.prompt, b.prompt) == 32  # two blocks of 16 (the default)
    assert np.array_equal(a.prompt, c.prompt)  # every id equal: the same prompt
    assert common_prefix(a.prompt, d.prompt) == 0
    wide = generate(workload(arrival={**arrival, "hash_block_tokens": 8}), WIDE)
    assert common_prefix(wide[0].prompt, wide[1].prompt) == 16
    assert wide[0].prompt_len == 40  # 3 blocks of 8 hashed, 16 tokens of its own


@pytest.mark.parametrize(
    "fmt, text, expected",
    [
        (
            "azure-csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,x,3\n",
            ":2: ContextTokens: expected a non-negative integer, got 'x'",
        ),
        (
            "azure-csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,3\n",
            ":2: TIMESTAMP: expected a date-time",
        ),
        (
            "mooncake-jsonl",
            '{"timestamp": 0, "input_length": 3, "output_length": 1}\n{oops\n',
            ":2: expected a JSON object",
        ),
        (
            "mooncake-jsonl",
            '{"timestamp": 0, "input_length": -3, "output_length": 1}\n',
            ":1: input_length: expected a non-negative integer, got -3",
        ),
    ],
)
def test_bad_trace_rows_name_file_line_and_column(tmp_path, fmt, text, expected):
    trace = tmp_path / "bad.trace"
    trace.write_text(text)
    with pytest.raises(TraceError) as info:
        load_trace(trace, fmt)
    message = str(info.value)
    assert message.startswith(f"{trace}:") and expected in message
    assert "\n" not in message


def test_a_whole_trace_replays_without_limits(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0,5,5\n1,6,6\n2,7,7\n")
    spec = workload(arrival={"kind": "trace", "format": "azure-csv", "path": str(trace)})
    assert [r.prompt_len for r in generate(spec, TINY, num_requests=None)] == [5, 6, 7]


length_dists = st.one_of(
    st.integers(1, 400),
    st.sampled_from(["sharegpt", "alpaca"]),
    st.builds(
        lambda a, b: {"kind": "uniform", "min": min(a, b), "max": max(a, b)},
        st.integers(1, 300),
        st.integers(1, 300),
    ),
    st.builds(
        lambda m, cv: {"kind": "lognormal", "mean": m, "cv": cv}, st.floats(1, 500), st.floats(0, 2)
    ),
)


@given(
    input_dist=length_dists,
    output_dist=length_dists,
    max_len=st.integers(2, 400),
    groups=st.integers(0, 3),
    prefix_len=st.integers(1, 500),
    turns=st.one_of(st.none(), st.integers(1, 5)),
    count=st.integers(1, 40),
    seed=st.integers(0, 2**16),
)
def test_any_workload_respects_the_stream_invariants(
    input_dist, output_dist, max_len, groups, prefix_len, turns, count, seed
):
    spec = workload(
        input=input_dist,
        output=output_dist,
        prefix={"num_groups": groups, "length": prefix_len},
        sessions=None if turns is None else {"turns": turns, "think_time_s": 1.0},
    )
    model = TINY.model_copy(update={"max_model_len": max_len})
    try:
        requests = generate(spec, model, seed=seed, num_requests=count)
    except WorkloadError:
        event("refused: most lengths overshoot max_model_len")
        return  # (its own test checks the refusal; here the streams that are made)
    assert 1 <= len(requests) <= count
    assert [r.req_id for r in requests] == list(range(len(requests)))
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(requests, requests[1:]))
    for r in requests:
        assert r.prompt_len >= 1 and r.output_len >= 1
        assert r.prompt_len + r.output_len <= max_len
        assert r.prompt.min() >= 0 and r.prompt.max() < model.vocab_size
    by_session = {}
    for r in requests:
        if r.session >= 0:
            assert r.turn == by_session.get(r.session, -1) + 1  # turns 0..k, in order
            by_session[r.session] = r.turn


@given(
    seed=st.integers(0, 2**63 - 1),
    req_id=st.integers(0, 2**40),
    sample=st.integers(0, 7),
)
def test_engine_stream_state_is_the_vectorised_one(seed, req_id, sample):
    """The engine seeds each sequence's stream with Python integers; the workload (and
    every test of token ids) with numpy: the same int64 bit pattern."""
    keys = np.asarray([stream_id(req_id, sample)], dtype=np.int64)
    expected = int(output_stream_states(seed, keys).view(np.int64)[0])
    assert SyntheticOutputs(seed, 128).stream_state(req_id, sample) == expected
