"""``pagesim observe`` against endpoints that misbehave: every failure is counted by its
kind in a complete run folder, never a crash; an endpoint nobody answers at is one line
and exit code 2, with nothing written. The servers are tests/live/servers.py's, on
loopback ports."""

from __future__ import annotations

import csv
import json
import math
import os

import numpy as np
import pytest

from sim.live.client import DISCONNECTED, MALFORMED, TIMEOUT, USAGE_DISAGREES, Attempt
from sim.live.observed import outcome_of, token_gaps
from sim.live.replay import ReplayOptions, api_url, replay, request_body
from sim.workload.request import Request
from tests.adversarial.cli import one_line_error, run_cli, snapshot
from tests.live import servers

NUM_REQUESTS = 5

SCENARIO = f"""
name: endpoints
model: tiny
cache: {{block_size: 16, num_blocks: 64}}
workload:
  arrival: {{kind: poisson, rate_rps: 200}}
  input: {{kind: uniform, min: 4, max: 12}}
  output: {{kind: uniform, min: 2, max: 5}}
simulation: {{num_requests: {NUM_REQUESTS}, seed: 3}}
"""


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "endpoints.yaml"
    path.write_text(SCENARIO)
    return path


def observe(scenario, url, out, *extra):
    return run_cli(
        [
            "observe",
            str(scenario),
            "--endpoint",
            url,
            "--out",
            str(out),
            "--no-report",
            "--quiet",
            "--time-limit",
            "20",
            *extra,
        ]
    )


def read_run(out):
    summary = json.loads((out / "summary.json").read_text())
    with (out / "requests.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    return summary, rows


@pytest.mark.parametrize(
    ("handler", "kind", "extra"),
    [
        (servers.server_error, "http 500", ()),
        (servers.stops_mid_stream, DISCONNECTED, ()),
        (servers.malformed_sse, MALFORMED, ()),
        (servers.never_answers, TIMEOUT, ("--request-timeout", "0.5")),
        (servers.claims_a_billion_tokens, USAGE_DISAGREES, ()),
        (servers.claims_absurd_counts, USAGE_DISAGREES, ()),
        (servers.done_without_a_token, MALFORMED, ()),
        (servers.ten_megabyte_line, MALFORMED, ()),
    ],
    ids=[
        "http-500",
        "stops-mid-stream",
        "malformed-sse",
        "timeout",
        "usage-10^9",
        "usage-10^30-and-negative",
        "done-without-a-token",
        "10-MB-line",
    ],
)
def test_a_misbehaving_endpoint_is_a_count_of_its_kind(scenario, tmp_path, handler, kind, extra):
    out = tmp_path / "observed"
    with servers.Loopback(handler) as server:
        result = observe(scenario, server.url, out, *extra)
    assert result.returncode == 0, result.describe()
    assert "Traceback" not in result.stderr
    assert f"0 of {NUM_REQUESTS} requests completed" in result.stdout
    assert f"{kind}: {NUM_REQUESTS}" in result.stdout
    summary, rows = read_run(out)
    assert summary["observed"]["errors"] == {kind: NUM_REQUESTS}
    assert summary["rejected_reasons"] == {kind: NUM_REQUESTS}
    assert summary["num_finished"] == 0 and summary["num_requests"] == NUM_REQUESTS
    assert [row["rejected_reason"] for row in rows] == [kind] * NUM_REQUESTS
    if handler is servers.stops_mid_stream:  # what came before the break is kept
        assert {row["output_tokens"] for row in rows} == {"2"}
        assert all(row["ttft_s"] != "nan" for row in rows)
    if kind == USAGE_DISAGREES:  # the tokens that came are counted, not the claim
        streamed = [int(row["output_tokens"]) for row in rows]
        assert all(0 < n <= 5 for n in streamed), streamed


def test_an_endpoint_nobody_answers_at_is_one_line_and_nothing_written(scenario, tmp_path):
    before = snapshot(tmp_path)
    url = f"http://127.0.0.1:{servers.closed_port()}"
    result = observe(scenario, url, tmp_path / "observed")
    assert one_line_error(result, "--endpoint", url, "cannot connect") == ""
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    ("endpoint", "culprit"),
    [("ftp://127.0.0.1:1", "--endpoint"), ("http://127.0.0.1:99999", "--endpoint")],
)
def test_a_bad_endpoint_url_is_one_line(scenario, tmp_path, endpoint, culprit):
    result = observe(scenario, endpoint, tmp_path / "observed")
    assert one_line_error(result, culprit) == ""
    assert not (tmp_path / "observed").exists()


def test_a_good_endpoint_gives_every_token_and_the_scenarios_requests(scenario, tmp_path):
    out = tmp_path / "observed"
    with servers.Loopback(servers.good_stream) as server:
        result = observe(scenario, server.url, out, "--max-connections", "2")
    assert result.returncode == 0, result.describe()
    summary, rows = read_run(out)
    assert summary["observed"]["errors"] == {} and summary["num_finished"] == NUM_REQUESTS
    simulated = json.loads((out / "scenario.json").read_text())
    assert simulated["simulation"]["num_requests"] == NUM_REQUESTS
    tokens = list(csv.DictReader((out / "tokens.csv").open()))
    assert len(tokens) == sum(int(row["output_tokens"]) for row in rows)
    assert summary["benchmark"]["completed"] == NUM_REQUESTS
    assert summary["benchmark"]["median_itl_ms"] is not None
    assert summary["cost_model"] == {"kind": "observed", "endpoint": server.url + "/v1/completions"}


# -- in-process: the client's reading of streams, and what an attempt becomes ----------


def _options(url, api="completions", **kw):
    return ReplayOptions(url=api_url(url, api), model="m", api=api, **kw)


def _requests(count=3, output_len=4):
    prompt = np.arange(6, dtype=np.int32)
    return [Request(i, 0.01 * i, prompt, output_len) for i in range(count)]


def test_the_replay_streams_each_token_with_its_time():
    with servers.Loopback(servers.good_stream) as server:
        result = replay(_requests(), _options(server.url, max_connections=1))
    for attempt in result.attempts:
        assert attempt.finished and attempt.error == ""
        times = attempt.token_times[0]
        assert len(times) == 4 and times == sorted(times)
        assert attempt.send_s >= attempt.scheduled_s
        assert attempt.first_token_s == times[0] < attempt.end_s
        assert attempt.completion_tokens == 4 and attempt.prompt_tokens == 6
    sends = sorted(a.send_s for a in result.attempts)  # one connection: one at a time
    ends = sorted(a.end_s for a in result.attempts)
    assert all(send >= end for send, end in zip(sends[1:], ends[:-1]))


def test_a_time_limit_marks_what_was_still_running():
    with servers.Loopback(servers.never_answers) as server:
        result = replay(_requests(2), _options(server.url, time_limit_s=0.3))
    assert result.timed_out
    assert [a.error for a in result.attempts] == ["unfinished at time limit"] * 2


def test_an_attempt_becomes_an_outcome_with_what_was_streamed():
    request = Request(7, 1.0, np.arange(5, dtype=np.int32), output_len=9, n=2)
    attempt = Attempt(
        7,
        1.0,
        send_s=1.5,
        first_token_s=1.6,
        end_s=2.0,
        token_times={0: [1.6, 1.7, 1.9], 1: [1.65, 1.75, 1.95]},
    )
    outcome = outcome_of(request, attempt)
    assert outcome.arrival_s == 1.5 and outcome.finish_s == 2.0 and outcome.finished
    assert outcome.output_len == 3 and outcome.output_tokens == 6  # streamed, not asked
    gaps, counts = token_gaps([attempt])
    assert np.allclose(sorted(gaps), [0.1, 0.1, 0.2, 0.2]) and counts.tolist() == [1] * 4
    attempt.fail("http 503")
    failed = outcome_of(request, Attempt(7, 1.0, error="http 503"))
    assert failed.rejected_reason == "http 503" and math.isnan(failed.finish_s)
    assert failed.arrival_s == 1.0  # never sent: the scheduled time


def test_the_body_asks_for_exactly_the_scenarios_request():
    request = Request(1, 0.0, np.array([5, 6, 7], dtype=np.int32), 12, tenant=2, priority=1, n=3)
    body = request_body(request, _options("http://h:1"))
    assert body["prompt"] == [5, 6, 7] and body["max_tokens"] == 12 and body["ignore_eos"]
    assert body["n"] == 3 and body["cache_salt"] == "tenant-2" and body["priority"] == 1
    assert body["stream"] and body["stream_options"] == {"include_usage": True}
    text = request_body(request, _options("http://h:1", prompt_mode="text"))
    assert text["prompt"] == "5 6 7"
    chat = request_body(request, _options("http://h:1", api="chat"))
    assert chat["messages"] == [{"role": "user", "content": "5 6 7"}] and "prompt" not in chat
    assert api_url("http://h:1/", "chat") == "http://h:1/v1/chat/completions"
    assert api_url("http://h:1/v1/completions", "chat") == "http://h:1/v1/completions"


def test_without_the_serve_extra_both_commands_are_one_line(scenario, tmp_path):
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "aiohttp.py").write_text("raise ImportError('not installed (test)')\n")
    env = {**os.environ, "PYTHONPATH": str(hidden)}
    url = f"http://127.0.0.1:{servers.closed_port()}"
    for args in (
        ["observe", str(scenario), "--endpoint", url, "--out", str(tmp_path / "o")],
        ["serve", str(scenario), "--port", "0"],
    ):
        result = run_cli(args, env=env)
        assert one_line_error(result, "aiohttp", "[serve]") == ""
    assert not (tmp_path / "o").exists()
