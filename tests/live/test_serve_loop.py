"""The loop closed on this machine: ``pagesim serve`` (the tiny model on the CPU, on a
loopback port), ``pagesim observe`` against it, ``pagesim calibrate --observed`` and
``pagesim validate --observed`` between the observed run and a simulation with that
calibration, then ``pagesim compare`` of the two and the server's /metrics.

What is asserted is structure and that both sides measured something, not accuracy
(which depends on the machine: README, "Live endpoints", records what it was here). The
first five requests are a second apart, so they run alone however slow or loaded the
machine is: calibrate --observed fits TTFT on them, and nothing asserted depends on the
machine's speed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest

from sim.costs.calibrated import FEATURES, load
from sim.output.steady import VERDICTS
from tests.adversarial.cli import ROOT, one_line_error, run_cli

pytest.importorskip("torch")
pytest.importorskip("aiohttp")

NUM_REQUESTS = 24

SCENARIO = f"""
name: loop
model: tiny
cache: {{block_size: 16, num_blocks: 64}}
scheduler: {{max_num_seqs: 8, max_num_batched_tokens: 256}}
workload:
  arrival:
    kind: stages
    process: constant
    stages: [{{rate_rps: 1, duration_s: 5}}, {{rate_rps: 12, duration_s: 1.6}}]
  input: {{kind: uniform, min: 16, max: 64}}
  output: {{kind: uniform, min: 4, max: 16}}
simulation: {{num_requests: {NUM_REQUESTS}, seed: 0}}
backend: {{kind: torch, device: cpu}}
"""

METRICS = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:num_preemptions_total",
    "vllm:time_to_first_token_seconds_bucket",
    "vllm:inter_token_latency_seconds_bucket",
    "vllm:time_per_output_token_seconds_bucket",
    "vllm:e2e_request_latency_seconds_count",
)


class Served:
    """A ``pagesim serve`` subprocess and the URL it printed."""

    def __init__(self, scenario, *extra):
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sim.cli", "serve", str(scenario), "--port", "0", *extra],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        self.first_line = ""
        reader = threading.Thread(target=self._read_first_line, daemon=True)
        reader.start()
        reader.join(60)  # torch's import and the model's build come first
        found = re.search(r"http://127\.0\.0\.1:(\d+)", self.first_line)
        if not found:
            self.process.kill()
            raise AssertionError(f"serve printed {self.first_line!r}: {self.process.stderr.read()}")
        self.url = f"http://127.0.0.1:{found.group(1)}"

    def _read_first_line(self) -> None:
        self.first_line = self.process.stdout.readline()

    def stop(self) -> tuple[int, str, str]:
        self.process.send_signal(signal.SIGTERM)
        out, err = self.process.communicate(timeout=20)
        return self.process.returncode, out, err


def post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text(SCENARIO)
    return path


def test_serve_observe_calibrate_validate(scenario, tmp_path):
    server = Served(scenario)
    try:
        observed, calibration, validation = (tmp_path / n for n in ("obs", "cal.json", "val"))
        result = run_cli(
            [
                "observe",
                str(scenario),
                "--endpoint",
                server.url,
                "--out",
                str(observed),
                "--quiet",
                "--no-report",
            ]
        )
        assert result.returncode == 0, result.describe()
        summary = json.loads((observed / "summary.json").read_text())
        assert summary["num_finished"] == NUM_REQUESTS and summary["observed"]["errors"] == {}
        assert summary["benchmark"]["median_itl_ms"] > 0 and summary["ttft_s"]["p50"] > 0

        # a request that can never fit the 64-block pool is an HTTP 400 with the reason
        status, body = post(
            server.url + "/v1/completions", {"prompt": [7] * 900, "max_tokens": 300}
        )
        assert status == 400 and "rejected: needs" in body["error"]["message"]
        status, body = post(
            server.url + "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "a b 7"}], "max_tokens": 3},
        )
        assert status == 200 and len(body["choices"][0]["message"]["content"].split()) == 3
        assert body["usage"]["prompt_tokens"] == 3

        with urllib.request.urlopen(server.url + "/metrics", timeout=10) as response:
            page = response.read().decode()
    finally:
        code, out, err = server.stop()
    assert code == 0 and "stopped" in out, err
    for name in METRICS:
        assert name in page, name
    finished = re.search(r"vllm:request_success_total\{[^}]*\} (\S+)", page)
    assert float(finished.group(1)) == NUM_REQUESTS + 1  # the chat request too

    result = run_cli(["calibrate", "--observed", str(observed), "--out", str(calibration)])
    assert result.returncode == 0, result.describe()
    assert "not identified" in result.stdout
    fitted = load(calibration)
    assert set(fitted.coefficients) == set(FEATURES)
    assert fitted.coefficients["step"] + fitted.coefficients["decode_step"] > 0
    assert fitted.fit["itl_fit"]["gaps"] > 0 and fitted.fit["ttft_fit"]["requests"] >= 3
    assert fitted.profile["device"] == "observed"

    result = run_cli(
        [
            "validate",
            str(scenario),
            "--observed",
            str(observed),
            "--calibration",
            str(calibration),
            "--out",
            str(validation),
            "--no-report",
        ]
    )
    assert result.returncode == 0, result.describe()
    report = json.loads((validation / "validation.json").read_text())
    assert report["kind"] == "observed" and report["simulated_cost_model"]["kind"] == "calibrated"
    latencies = ("ttft_s", "tpot_s", "e2e_s", "itl_s")
    expected = {f"{m}.{q}" for m in latencies for q in ("mean", "p50", "p90", "p99")}
    expected |= {"throughput_rps", "throughput_tok_s"}
    assert set(report["metrics"]) == expected
    for name, row in report["metrics"].items():  # both sides were measured
        assert row["observed"] > 0 and row["simulated"] > 0, name
        assert row["rel_error"] == pytest.approx(
            (row["simulated"] - row["observed"]) / row["observed"]
        )
    assert {report["verdict"]["observed"], report["verdict"]["simulated"]} <= set(VERDICTS)
    assert report["counts"]["simulated"]["num_finished"] == NUM_REQUESTS
    assert "| ttft_s.p50 |" in result.stdout and "| ttft_s.mean |" in result.stdout
    assert report["mape"]["figures"] == 13 and "MAPE" in result.stdout  # every figure measured

    result = run_cli(["compare", str(observed), str(validation / "simulated")])
    assert result.returncode == 0, result.describe()


def test_serve_refuses_what_it_cannot_serve_in_one_line(scenario, tmp_path):
    contiguous = tmp_path / "contiguous.yaml"
    allocator = "allocator: contiguous-max, block_size: 16,"
    contiguous.write_text(SCENARIO.replace("block_size: 16,", allocator))
    result = run_cli(["serve", str(contiguous), "--port", "0"])
    assert one_line_error(result, "cache.allocator: paged") == ""
    result = run_cli(["serve", str(scenario), "--port", "70000"])
    assert one_line_error(result, "--port") == ""


def _raw(url: str, data: bytes, path: str = "/v1/completions") -> tuple[int, str]:
    """POST ``data`` as it is (not necessarily JSON); (status, body text)."""
    request = urllib.request.Request(
        url + path, data, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _garbage(url: str, data: bytes) -> bytes:
    """Send bytes that are not HTTP/1.1 over a fresh connection; what came back."""
    import socket

    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(data)
        try:
            return sock.recv(200)
        except OSError:
            return b""


HOSTILE_BODIES = {
    "a 5,000-digit token id": b'{"prompt": [' + b"9" * 5000 + b'], "max_tokens": 2}',
    "a 5,000-digit max_tokens": b'{"prompt": [1, 2], "max_tokens": ' + b"7" * 5000 + b"}",
    "JSON nested 100,000 deep": b'{"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "not UTF-8": b'{"prompt": "\xff\xfe", "max_tokens": 2}',
}

#: Valid requests that once failed inside the server: served as written.
SERVED = {
    "a lone surrogate in the prompt": b'{"prompt": "a \\ud800 b", "max_tokens": 2}',
    "a lone surrogate in cache_salt": b'{"prompt": [1], "max_tokens": 2, "cache_salt": "\\udfff"}',
    "a 5,000-digit word": b'{"prompt": "' + b"8" * 5000 + b'", "max_tokens": 2}',
}

GARBAGE = {
    "a TLS client hello": bytes.fromhex("160301002c010000280303") + b"\x00" * 40,
    "HTTP/9.9": b"GET /health HTTP/9.9\r\nHost: x\r\n\r\n",
    "a lying Content-Length": b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
    b"Content-Length: -5\r\n\r\n{}",
}


def test_serve_answers_hostile_clients_with_400s_and_one_line_each(scenario):
    served = Served(scenario)
    try:
        for name, data in HOSTILE_BODIES.items():
            status, text = _raw(served.url, data)
            assert status == 400 and '"error"' in text, (name, status, text[:200])
        for name, data in SERVED.items():
            status, body = _raw(served.url, data)
            assert status == 200, (name, status, body[:200])
        for name, data in GARBAGE.items():
            answer = _garbage(served.url, data)
            assert answer == b"" or answer.startswith(b"HTTP/1.") and b" 400 " in answer, name
        with urllib.request.urlopen(served.url + "/health", timeout=10) as response:
            assert response.status == 200  # still up
    finally:
        code, _, err = served.stop()
    assert "Traceback" not in err, err[-3000:]
    assert len([line for line in err.splitlines() if "bad request" in line]) <= len(GARBAGE)
