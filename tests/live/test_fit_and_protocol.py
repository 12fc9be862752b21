"""The pure parts of sim/live: the observed fit recovers known costs from synthetic
timings and refuses runs that cannot identify them; the comparison's arithmetic; the
server's request parsing and chunks; the metrics' buckets; and ``--observed``'s bad
inputs as one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sim.costs.calibrated import CalibrationError
from sim.live.api import BadRequest, Chunks, parse, tenant_of, word_id
from sim.live.compare import compare_runs, format_report
from sim.live.fit import Timings, decode_gaps, fit_observed, lone_prefills
from sim.live.metrics import series
from tests.adversarial.cli import one_line_error, run_cli


def synthetic(prefill_s=2e-3, per_token_s=1e-5, step_s=1e-3, per_seq_s=2e-4) -> Timings:
    """Six lone requests (prompt 10..60, TTFT exactly linear), then three requests sent
    together and decoding side by side for 10 steps (ITL = step + per_seq * batch)."""
    req, send, first, end, prompt, tok_req, tok_choice, tok_s = ([] for _ in range(8))
    t = 0.0
    for i in range(6):  # alone: one at a time, 1 s apart
        length = 10 * (i + 1)
        ttft = prefill_s + per_token_s * length
        req.append(i), send.append(t), first.append(t + ttft), prompt.append(length)
        times = [t + ttft + k * (step_s + per_seq_s) for k in range(3)]
        end.append(times[-1])
        tok_req += [i] * 3
        tok_choice += [0] * 3
        tok_s += times
        t += 1.0
    start = t + ttft_of(prefill_s, per_token_s, 20)
    for j in range(3):  # three decoding together: every gap is one 3-sequence step
        i = 6 + j
        times = [start + k * (step_s + 3 * per_seq_s) for k in range(10)]
        req.append(i), send.append(t), first.append(times[0]), end.append(times[-1])
        prompt.append(20)
        tok_req += [i] * 10
        tok_choice += [0] * 10
        tok_s += times
    arrays = [np.asarray(v, dtype=np.float64) for v in (req, send, first, end, prompt)]
    tokens = [np.asarray(v, dtype=np.float64) for v in (tok_req, tok_choice, tok_s)]
    return Timings(*arrays, *tokens)


def ttft_of(prefill_s, per_token_s, length):
    return prefill_s + per_token_s * length


def test_the_fit_recovers_the_sums_it_can_identify():
    timings = synthetic()
    assert lone_prefills(timings).tolist() == [0, 1, 2, 3, 4, 5]  # not the three together
    gaps, batch = decode_gaps(timings)
    assert set(batch.tolist()) == {1, 3}
    fitted = fit_observed(timings, token_budget=512, source="run")
    c = fitted.coefficients
    assert c["tokens"] == pytest.approx(1e-5, rel=1e-3)
    assert c["step"] + c["prefill_chunks"] + c["seqs"] == pytest.approx(2e-3, rel=1e-3)
    assert c["step"] + c["decode_step"] == pytest.approx(1e-3, rel=1e-3)
    assert c["tokens"] + c["seqs"] == pytest.approx(2e-4, rel=1e-3)
    for name in ("decode_context", "decode_padded", "prefill_cached_pairs", "swapped_blocks"):
        assert c[name] == 0.0  # not identifiable from request timings
    assert "per layer" in fitted.fit["not_identified"]
    assert fitted.fit["ttft_fit"]["mape"] < 1e-6


def test_a_run_without_lone_requests_cannot_be_fitted():
    timings = synthetic()
    crowded = Timings(
        *(getattr(timings, f) for f in ("req_id",)),
        np.zeros_like(timings.send_s),
        *(
            getattr(timings, f)
            for f in (
                "first_token_s",
                "end_s",
                "prompt_tokens",
                "token_req",
                "token_choice",
                "token_s",
            )
        ),
    )
    with pytest.raises(CalibrationError, match="run: 0 request"):
        fit_observed(crowded, token_budget=512, source="run")


def test_the_comparison_is_simulated_against_observed():
    observed = {
        "ttft_s": {"p50": 0.01, "p90": 0.02, "p99": None},
        "throughput_rps": 4.0,
        "benchmark": {"median_itl_ms": 2.0},
        "steady_state": {"verdict": "stable"},
    }
    simulated = {
        "ttft_s": {"p50": 0.012, "p90": 0.01, "p99": 0.5},
        "throughput_rps": 3.0,
        "benchmark": {"median_itl_ms": 1.0},
        "steady_state": {"verdict": "too short"},
    }
    report = compare_runs(observed, simulated)
    metrics = report["metrics"]
    assert metrics["ttft_s.p50"]["rel_error"] == pytest.approx(0.2)
    assert metrics["ttft_s.p90"]["rel_error"] == pytest.approx(-0.5)
    assert metrics["ttft_s.p99"]["rel_error"] is None  # nothing observed to compare with
    assert metrics["itl_s.p50"] == {"observed": 0.002, "simulated": 0.001, "rel_error": -0.5}
    assert metrics["throughput_rps"]["rel_error"] == pytest.approx(-0.25)
    assert report["verdict"] == {"observed": "stable", "simulated": "too short"}
    # the MAPE averages the corpus table's figures both sides have: here 3 of them
    assert report["mape"] == {"value": pytest.approx((0.2 + 0.5 + 0.25) / 3), "figures": 3}
    assert "verdict too short: no window long enough" in format_report(
        {**report, "errors": {}, "date": "d", "simulated_cost_model": {"kind": "analytic"}}
    )


def test_the_mape_counts_what_the_corpus_table_counts():
    """One run's MAPE line reads as its row of the recorded-runs table: the same figures
    (TTFT, TPOT, E2E at mean, p50, p90, p99, and requests/s)."""
    from sim.live.compare import MAPE_FIGURES
    from sim.recorded.stages import COMPARED

    assert set(MAPE_FIGURES) == {f"{m}.{q}" for m, q in COMPARED} | {"throughput_rps"}
    observed = {
        m: {"mean": 1.0, "p50": 1.0, "p90": 1.0, "p99": 1.0} for m in ("ttft_s", "tpot_s", "e2e_s")
    }
    simulated = {m: {q: 1.1 for q in v} for m, v in observed.items()}
    report = compare_runs({**observed, "throughput_rps": 2.0}, {**simulated, "throughput_rps": 1.0})
    assert report["mape"]["figures"] == 13
    assert report["mape"]["value"] == pytest.approx((12 * 0.1 + 0.5) / 13)


def test_a_body_is_parsed_or_refused_naming_the_field():
    ask = parse(
        {
            "prompt": [1, 2, 3],
            "max_tokens": 5,
            "n": 2,
            "stream": True,
            "stream_options": {"include_usage": True},
            "cache_salt": "tenant-4",
        },
        chat=False,
        vocab_size=512,
        max_model_len=64,
    )
    assert tuple(ask) == ([1, 2, 3], 5, 2, True, True, 0, 4)
    text = parse({"prompt": "7 hello 7"}, chat=False, vocab_size=512, max_model_len=64)
    assert text.prompt[0] == text.prompt[2] == 7 and text.prompt[1] == word_id("hello", 512)
    assert text.max_tokens == 16 and not text.stream
    chat = parse(
        {"messages": [{"role": "user", "content": "1 2"}], "max_completion_tokens": 3},
        chat=True,
        vocab_size=512,
        max_model_len=64,
    )
    assert chat.prompt == [1, 2] and chat.max_tokens == 3
    bad = [
        ({"prompt": [1, 600]}, "prompt: token id 600"),
        ({"prompt": 5}, "prompt: expected"),
        ({"prompt": [1], "max_tokens": 0}, "max_tokens"),
        ({"prompt": [1], "max_tokens": 64}, "max_tokens"),  # no room left in the model
        ({"prompt": [1], "n": True}, "n: expected"),
        ({"messages": "hi"}, "messages"),
    ]
    for body, message in bad:
        with pytest.raises(BadRequest, match=message):
            parse(body, chat="messages" in body, vocab_size=512, max_model_len=64)
    assert tenant_of(None) == 0 and tenant_of("tenant-3") == 3
    assert tenant_of("acme") == tenant_of("acme") != tenant_of("other")


def test_chunks_have_openais_shapes():
    chunks = Chunks(3, "tiny", chat=False)
    assert chunks.tokens(1, " 5")["choices"] == [
        {"index": 1, "text": " 5", "logprobs": None, "finish_reason": None}
    ]
    chat = Chunks(3, "tiny", chat=True)
    assert chat.tokens(0, " 5")["choices"][0]["delta"] == {"content": " 5"}
    assert chat.finish(0)["choices"][0]["finish_reason"] == "length"
    assert chat.usage(4, 6, 2)["usage"]["prompt_tokens_details"] == {"cached_tokens": 2}


def test_buckets_are_a_one_two_and_a_half_five_series():
    assert series(1e-3, 0.02) == pytest.approx([1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2])
    assert series(1, 16384)[-1] >= 16384


def test_observed_inputs_that_are_not_an_observed_run_are_one_line(tmp_path):
    run = tmp_path / "simulated"
    scenario = tmp_path / "s.yaml"
    scenario.write_text("model: tiny\ncache: {num_blocks: 32}\nsimulation: {num_requests: 5}\n")
    made = run_cli(["run", str(scenario), "--out", str(run), "--quiet", "--no-report"])
    assert made.returncode == 0, made.describe()
    result = run_cli(["calibrate", "--observed", str(run), "--out", str(tmp_path / "c.json")])
    assert one_line_error(result, "observed.csv") == ""
    result = run_cli(["validate", str(scenario), "--observed", str(run)])
    assert one_line_error(result, "not an observed run") == ""
    result = run_cli(["calibrate", "p.csv", "--observed", str(run)])
    assert one_line_error(result, "--observed") == ""
    summary = json.loads((run / "summary.json").read_text())
    summary["observed"] = {"errors": {}}
    (run / "summary.json").write_text(json.dumps(summary))
    other = tmp_path / "other.yaml"
    other.write_text(scenario.read_text().replace("num_requests: 5", "num_requests: 6"))
    result = run_cli(["validate", str(other), "--observed", str(run)])
    assert one_line_error(result, "simulation.num_requests") == ""
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    result = run_cli(
        [
            "validate",
            str(scenario),
            "--observed",
            str(run),
            "--calibration",
            str(bad),
            "--out",
            str(tmp_path / "v"),
        ]
    )
    assert one_line_error(result, "bad.json", "not a pagesim calibration") == ""
    assert not (tmp_path / "c.json").exists() and not (tmp_path / "v").exists()
