"""``pagesim import-run``: each format read as its module documents, the folder it
writes (what observe writes, plus the replay), and the conversions it notes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from sim.cli import main
from sim.config.loader import load_scenario
from sim.recorded import RecordError, import_run
from tests.recorded.fixtures import (
    inference_perf_folder,
    inference_perf_request,
    lifecycle_folder,
    vllm_bench,
)


def summary_of(out):
    return json.loads((out / "summary.json").read_text())


def test_inference_perf_aggregates_become_a_replayable_folder(tmp_path):
    source = inference_perf_folder(tmp_path / "run" / "results")
    out = tmp_path / "imported"
    summary = import_run(
        "inference-perf",
        tmp_path / "run",
        out,
        hardware="h100-sxm",
        model="meta-llama/Llama-2-7b-hf",
        html=False,
    )
    recorded = summary["recorded"]
    assert [s["index"] for s in recorded["stages"]] == [0, 1]
    assert recorded["clock"] == "client" and recorded["request_timeout_s"] == 300.0
    # per-line timestamps (ITL median far below its mean): TPOT scaled by (2N+1)/(N-1)
    tpot = recorded["stages"][0]["latency"]["tpot_s"]["mean"]
    assert tpot == pytest.approx(0.004 * 497 / 247)
    assert "itl_s" not in recorded["stages"][0]["latency"]
    assert set(recorded["files"]) == {
        "results/config.yaml",
        "results/stage_0_lifecycle_metrics.json",
        "results/stage_1_lifecycle_metrics.json",
        "results/summary_lifecycle_metrics.json",
    }
    assert all(len(digest) == 64 for digest in recorded["files"].values())
    assert source.is_dir()
    scenario = load_scenario(str(out / "scenario.yaml"))
    arrival = scenario.workload.arrival
    assert arrival.kind == "stages" and arrival.process == "poisson-count"
    assert [(s.rate_rps, s.duration_s) for s in arrival.stages] == [(8.0, 60), (20.0, 60)]
    assert scenario.workload.prompts.distinct == 100 and scenario.workload.prefix.num_groups == 10
    assert scenario.workload.input.value == 475  # 575 measured less the 100-token system prompt
    assert scenario.workload.output.value == 248 and scenario.workload.request_timeout_s == 300
    assert scenario.model.name == "Llama-2-7b-hf" and scenario.model.num_kv_heads == 32
    assert (out / "requests.csv").read_text().count("\n") == 1  # aggregates: a header only


def test_inference_perf_per_request_records_become_a_trace(tmp_path):
    records = [inference_perf_request(1000.0 + i, f"prompt {i % 2}", 5) for i in range(4)]
    inference_perf_folder(tmp_path / "run", per_request=records, stages=((4.0, 1),))
    out = tmp_path / "imported"
    import_run(
        "inference-perf",
        tmp_path / "run",
        out,
        hardware="h100-sxm",
        model="meta-llama/Llama-2-7b-hf",
        html=False,
    )
    rows = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert [r["arrival_s"] for r in rows] == [0.0, 1.0, 2.0, 3.0]
    chains = [r["hash_ids"] for r in rows]
    assert chains[0] == chains[2] and chains[1] == chains[3]  # equal texts, equal prompts
    # "prompt 0" and "prompt 1" agree on 7 characters: at this fixture's 575 tokens for 8
    # characters a block is one character, so 7 blocks are shared
    assert chains[0][:7] == chains[1][:7] and chains[0][7] != chains[1][7]
    assert {r["output_tokens"] for r in rows} == {248}  # ignore_eos: what was asked
    tokens = [line.split(",") for line in (out / "tokens.csv").read_text().splitlines()[1:]]
    first = [float(t[2]) for t in tokens if t[0] == "0"]
    assert len(first) == 5  # one time a token: the blank SSE lines and [DONE] dropped
    assert np.allclose(np.diff(first), 0.01)


def test_inference_perf_prompt_texts_share_their_system_prompt(tmp_path):
    """Per-request texts of a shared_prefix run: prompts of one group share the blocks
    their system prompt fills, at the run's characters per token; other groups do not."""
    system = {g: f"system prompt of group {g}: " + "lorem ipsum dolor " * 40 for g in (0, 1)}
    texts = [system[i % 2] + f"question {i} " * 20 for i in range(6)]
    records = [inference_perf_request(1000.0 + i, text, 5) for i, text in enumerate(texts)]
    for record, text in zip(records, texts):
        record["info"]["input_tokens"] = len(text) // 4  # ~4 characters a token
    inference_perf_folder(tmp_path / "run", per_request=records, stages=((6.0, 1),))
    out = tmp_path / "imported"
    summary = import_run(
        "inference-perf",
        tmp_path / "run",
        out,
        hardware="h100-sxm",
        model="meta-llama/Llama-2-7b-hf",
        html=False,
    )
    chains = [json.loads(line)["hash_ids"] for line in (out / "requests.jsonl").open()]
    shared = len(system[0]) // (16 * 4)  # whole blocks within the system prompt
    assert chains[0][:shared] == chains[2][:shared] == chains[4][:shared]
    assert chains[0][shared + 1] != chains[2][shared + 1]  # the questions differ
    assert chains[0][0] != chains[1][0]  # the groups' prompts differ from "0" on
    assert any(
        "prompt text" in note and "block by block" in note for note in summary["recorded"]["notes"]
    )


def test_lifecycle_jsonl_with_its_metadata(tmp_path):
    folder = lifecycle_folder(tmp_path / "vllm")
    out = tmp_path / "imported"
    summary = import_run("lifecycle", folder / "requests.jsonl", out, html=False)
    assert summary["recorded"]["clock"] == "engine"
    assert summary["num_requests"] == 6 and summary["num_rejected"] == 0
    assert summary["ttft_s"]["p50"] == pytest.approx(0.05)
    assert summary["tpot_s"]["mean"] == pytest.approx(0.012)
    raw = yaml.safe_load((out / "scenario.yaml").read_text())
    assert raw["hardware"] == "rtx-4090"  # from the CUDA device name
    assert raw["cache"]["num_blocks"] == 2588  # as logged; the vllm-v1 profile keeps
    assert load_scenario(out / "scenario.yaml").kv_pool.device_blocks == 2587  # its null block
    assert raw["scheduler"] == {
        "engine": "vllm-v1",
        "watermark": 0.0,
        "max_num_seqs": 64,
        "max_num_batched_tokens": 2048,
        "async_scheduling": True,
    }
    assert raw["cost_model"] == {"params": {"cpu_overlap": True}}  # vLLM 0.19
    assert raw["model"]["max_model_len"] == 32768 and raw["model"]["dtype_bytes"] == 2
    rows = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert [r["arrival_s"] for r in rows] == [0.5 * i for i in range(6)]
    assert [r["input_tokens"] for r in rows] == [300 + 10 * i for i in range(6)]
    assert (
        main(
            [
                "run",
                str(out / "scenario.yaml"),
                "--out",
                str(tmp_path / "sim"),
                "--quiet",
                "--no-report",
            ]
        )
        == 0
    )


def test_lifecycle_prompts_share_prefixes_block_by_block(tmp_path):
    """Token ids (--prompts) give block-level identity: prompts that share a 100-token
    system prompt share its six full 16-token blocks in the replay, the rest their own;
    equal ids are equal prompts; the trace carries block ids, never the tokens."""
    folder = lifecycle_folder(tmp_path / "vllm", rows=4)
    system = list(range(1000, 1100))
    prompts = tmp_path / "workload.jsonl"
    ids = [system + [1] * 200, system + [2] * 210, [7] * 320, system + [1] * 200]
    prompts.write_text("".join(json.dumps({"input_tok_ids": i}) + "\n" for i in ids))
    rows = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines()]
    for row, tokens in zip(rows, ids):
        row["input_toks"] = len(tokens)
    (folder / "requests.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "imported"
    summary = import_run("lifecycle", folder / "requests.jsonl", out, prompts=prompts, html=False)
    trace = [json.loads(line) for line in (out / "requests.jsonl").open()]
    chains = [row["hash_ids"] for row in trace]
    assert [len(c) for c in chains] == [19, 20, 20, 19]  # ceil(tokens / 16)
    assert chains[0][:6] == chains[1][:6] and chains[0][6] != chains[1][6]
    assert chains[3] == chains[0] and set(chains[2]).isdisjoint(chains[0])
    assert "1000" not in (out / "requests.jsonl").read_text()
    note = next(n for n in summary["recorded"]["notes"] if "block by block" in n)
    assert "(16-token blocks)" in note and "31.2 %" in note  # (96 + 18 x 16) of 1,230
    scenario = load_scenario(out / "scenario.yaml")
    assert scenario.workload.arrival.hash_block_tokens == 16
    from sim.workload.generate import generate_requests

    a, b, c, d = generate_requests(scenario, scenario.model, rng=np.random.default_rng(0))
    common = int(np.argmin(a.prompt[:300] == b.prompt[:300]))
    assert common == 96 and np.array_equal(a.prompt, d.prompt)
    assert a.prompt[0] != c.prompt[0]


def test_lifecycle_prompt_ids_shorter_than_the_engine_count_still_make_equal_prompts(tmp_path):
    folder = lifecycle_folder(tmp_path / "vllm", rows=3)  # 300, 310, 320 tokens logged
    prompts = tmp_path / "workload.jsonl"
    prompts.write_text(
        "".join(json.dumps({"input_tok_ids": i}) + "\n" for i in ([1, 2, 3], [4, 5], [1, 2, 3]))
    )
    import_run("lifecycle", folder / "requests.jsonl", tmp_path / "a", prompts=prompts, html=False)
    chains = [json.loads(line)["hash_ids"] for line in (tmp_path / "a" / "requests.jsonl").open()]
    assert [len(c) for c in chains] == [19, 20, 20]
    assert chains[2][:19] == chains[0] and chains[1][0] != chains[0][0]


def test_vllm_bench_with_start_times_and_a_failure(tmp_path):
    out = tmp_path / "imported"
    summary = import_run("vllm-bench", vllm_bench(tmp_path / "result.json"), out, html=False)
    assert summary["num_rejected"] == 1
    assert summary["rejected_reasons"] == {"ConnectionResetError: reset by peer": 1}
    rows = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert [r["arrival_s"] for r in rows] == pytest.approx([0.0, 0.41, 1.23])
    assert json.loads((out / "scenario.json").read_text())["hardware"]["name"] == "h100-sxm"
    attempts = (out / "observed.csv").read_text().splitlines()[1:]
    end = float(attempts[0].split(",")[4])
    assert end == pytest.approx(0.0712 + 0.0121 + 0.0119 + 0.0123)


def test_vllm_bench_without_send_times_regenerates_the_process(tmp_path):
    path = vllm_bench(tmp_path / "r.json", start_times=False, num_prompts=3)
    summary = import_run("vllm-bench", path, tmp_path / "a", html=False)
    assert any("regenerated at 2 req/s" in n for n in summary["recorded"]["notes"])
    rows = [json.loads(x) for x in (tmp_path / "a" / "requests.jsonl").read_text().split("\n") if x]
    assert rows[0]["arrival_s"] == 0.0 and rows[-1]["arrival_s"] > 0
    closed = vllm_bench(tmp_path / "c.json", start_times=False, max_concurrency=2)
    with pytest.raises(RecordError, match="max_concurrency"):
        import_run("vllm-bench", closed, tmp_path / "b", html=False)


def test_sglang_bench_lines_with_infinity(tmp_path):
    line = {
        "backend": "sglang",
        "request_rate": float("inf"),
        "input_lens": [100, 200],
        "output_lens": [3, 3],
        "ttfts": [0.05, 0.06],
        "itls": [[0.01, 0.01], [0.01, 0.02]],
        "errors": ["", ""],
    }
    path = tmp_path / "bench.jsonl"
    path.write_text(
        json.dumps({"backend": "sglang", "request_rate": 1.0}) + "\n" + json.dumps(line) + "\n"
    )
    assert "Infinity" in path.read_text()
    summary = import_run(
        "sglang-bench",
        path,
        tmp_path / "a",
        hardware="l40s",
        model="meta-llama/Llama-3.1-8B",
        html=False,
    )
    assert summary["num_requests"] == 2
    assert any("request_rate inf" in n for n in summary["recorded"]["notes"])


def test_validate_observed_times_a_client_timed_run_as_its_client(tmp_path):
    inference_perf_folder(tmp_path / "run", stages=((2.0, 20),))
    out = tmp_path / "imported"
    import_run(
        "inference-perf",
        tmp_path / "run",
        out,
        hardware="h100-sxm",
        model="meta-llama/Llama-2-7b-hf",
        html=False,
    )
    assert summary_of(out)["throughput_tok_s"] is None  # the client's re-tokenised count
    report_dir = tmp_path / "validation"
    assert (
        main(
            [
                "validate",
                str(out / "scenario.yaml"),
                "--observed",
                str(out),
                "--out",
                str(report_dir),
                "--no-report",
            ]
        )
        == 0
    )
    report = json.loads((report_dir / "validation.json").read_text())
    simulated = summary_of(report_dir / "simulated")
    for metric in ("ttft_s", "e2e_s"):
        shown = report["metrics"][f"{metric}.p50"]["simulated"]
        assert shown == pytest.approx(simulated[metric]["p50"] + 0.011)
    tpot = report["metrics"]["tpot_s.p50"]["simulated"]
    assert tpot == pytest.approx(simulated["tpot_s"]["p50"])  # not shifted


def _lifecycle_with(folder, **engine):
    meta = json.loads((folder / "meta.json").read_text())
    meta["engine_kwargs"].update(engine)
    meta["model"] = meta["engine_kwargs"]["model"] = "Qwen/Qwen3-30B-A3B"
    (folder / "meta.json").write_text(json.dumps(meta))
    return folder


def test_an_expert_parallel_run_replays_with_expert_parallel(tmp_path):
    folder = _lifecycle_with(
        lifecycle_folder(tmp_path / "vllm", blocks=None),
        tensor_parallel_size=2,
        enable_expert_parallel=True,
    )
    out = tmp_path / "imported"
    import_run("lifecycle", folder / "requests.jsonl", out, html=False, hardware="h100-sxm")
    raw = yaml.safe_load((out / "scenario.yaml").read_text())
    assert raw["expert_parallel"] is True and raw["tensor_parallel"] == 2
    assert load_scenario(out / "scenario.yaml").model.moe.num_experts == 128


def test_data_parallel_ranks_are_refused_naming_the_argument(tmp_path):
    folder = _lifecycle_with(
        lifecycle_folder(tmp_path / "vllm"), data_parallel_size=2, enable_expert_parallel=True
    )
    with pytest.raises(RecordError, match="engine_kwargs.data_parallel_size: data-parallel"):
        import_run("lifecycle", folder / "requests.jsonl", tmp_path / "o", html=False)


def test_vllm_bench_metadata_strings_are_read_as_vllm_writes_them(tmp_path):
    """``vllm bench serve --metadata k=v`` stores every value as a string: decimals too."""
    path = vllm_bench(
        tmp_path / "r.json",
        gpu_memory_utilization="0.85",
        max_num_seqs="64",
        enable_prefix_caching="true",
    )
    import_run("vllm-bench", path, tmp_path / "a", html=False)
    raw = yaml.safe_load((tmp_path / "a" / "scenario.yaml").read_text())
    assert raw["cache"]["gpu_memory_utilization"] == 0.85
    assert raw["scheduler"]["max_num_seqs"] == 64
    for bad in ("nan", "0.9x", "1.5"):
        path = vllm_bench(tmp_path / "b.json", gpu_memory_utilization=bad)
        with pytest.raises(RecordError, match="gpu_memory_utilization: expected"):
            import_run("vllm-bench", path, tmp_path / f"b-{bad}", html=False)


def test_every_model_name_list_models_prints_is_taken_by_model(capsys):
    """``--model`` takes each name ``pagesim list models`` prints: a preset, or a shipped
    config by its name (codellama-34b-instruct was refused)."""
    from sim.recorded.models import resolve_model_source

    assert main(["list", "models"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:] if line]
    assert "codellama-34b-instruct" in names and "llama-3-8b" in names
    for name in names:
        source = resolve_model_source(name)
        assert source == name or source.stem == name
    with pytest.raises(RecordError, match="not a preset"):
        resolve_model_source("codellama-35b")


def _shared_system_prompt_run(tmp_path):
    """Six requests of an 800-token system prompt and their own tokens, the prompts'
    token ids, and a vLLM log whose last stats line says 80.2 % of prefix hits."""
    folder = lifecycle_folder(tmp_path / "vllm", rows=6)
    ids = [list(range(1000, 1800)) + [i] * (20 + 10 * i) for i in range(6)]
    rows = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines()]
    for row, tokens in zip(rows, ids):
        row["input_toks"] = len(tokens)
    (folder / "requests.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp_path / "prompts.jsonl").write_text(
        "".join(json.dumps({"input_tok_ids": i}) + "\n" for i in ids)
    )
    stats = (
        "INFO 12-05 10:00:0{} [loggers.py:123] Engine 000: Avg prompt throughput: 10.0 "
        "tokens/s, Avg generation throughput: 5.0 tokens/s, Running: 1 reqs, Waiting: 0 "
        "reqs, Preemptions: 0, GPU KV cache usage: 1.0%, Prefix cache hit rate: {}%\n"
    )
    (tmp_path / "vllm.log").write_text(
        "INFO starting\n"
        + stats.format(0, "40.0")
        + "a line of something else\n"
        + stats.format(5, "80.2")
    )
    return folder / "requests.jsonl"


@pytest.mark.parametrize("with_prompts", [False, True])
def test_validate_prints_the_engines_prefix_hit_rate_beside_the_replays(
    tmp_path, capsys, with_prompts
):
    """The engine log's last hit rate (vLLM's last 1,000 requests) is kept by import-run
    and set beside the replay's over the same requests; a replay that lost the shared
    system prompt (no --prompts) is 80 points off, and says so."""
    path = _shared_system_prompt_run(tmp_path)
    out = tmp_path / "run"
    extra = ["--prompts", str(tmp_path / "prompts.jsonl")] if with_prompts else []
    assert (
        main(
            [
                "import-run",
                "lifecycle",
                str(path),
                "--out",
                str(out),
                "--engine-log",
                str(tmp_path / "vllm.log"),
                "--quiet",
                "--no-report",
                *extra,
            ]
        )
        == 0
    )
    assert summary_of(out)["recorded"]["prefix_hit_rate"] == pytest.approx(0.802)
    capsys.readouterr()
    assert (
        main(
            [
                "validate",
                str(out / "scenario.yaml"),
                "--observed",
                str(out),
                "--out",
                str(tmp_path / "v"),
                "--no-report",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    line = next(x for x in printed.splitlines() if x.startswith("prefix cache hit rate"))
    assert "(engine log: the last 1,000 requests): recorded 80.2 %" in line
    replay = float(line.rsplit("replay ", 1)[1].rstrip(" %")) / 100
    report = json.loads((tmp_path / "v" / "validation.json").read_text())
    assert report["prefix_hit_rate"]["replay"] == pytest.approx(replay, abs=1e-3)
    if with_prompts:  # 5 of 6 requests find the 800-token prompt: 50 blocks of 16 each
        assert replay == pytest.approx(5 * 800 / sum(800 + 20 + 10 * i for i in range(6)), abs=0.02)
        assert "warning" not in printed
    else:
        assert replay == 0.0 and "warning: the replay's prefix cache hits are -80.2" in printed


def test_an_engine_log_without_stats_lines_is_one_line(tmp_path):
    path = _shared_system_prompt_run(tmp_path)
    (tmp_path / "other.log").write_text("INFO starting\nINFO ready\n")
    with pytest.raises(RecordError, match="other.log: no vLLM stats line"):
        import_run("lifecycle", path, tmp_path / "a", engine_log=tmp_path / "other.log")
    (tmp_path / "odd.log").write_text(
        "Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: "
        "1.0%, Prefix cache hit rate: 180.0%\n"
    )
    with pytest.raises(RecordError, match="odd.log: Prefix cache hit rate: 180.0%"):
        import_run("lifecycle", path, tmp_path / "b", engine_log=tmp_path / "odd.log")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def _aggregates(**extra) -> dict:
    """A ``vllm bench serve --save-result`` file without --save-detailed."""
    return {
        "date": "20260921-101502",
        "backend": "vllm",
        "model_id": "meta-llama/Llama-3.1-8B",
        "num_prompts": 200,
        "request_rate": 4.0,
        "burstiness": 1.0,
        "max_concurrency": None,
        "duration": 52.1,
        "completed": 198,
        "failed": 2,
        "total_input_tokens": 198 * 1024,
        "total_output_tokens": 198 * 128,
        "request_throughput": 3.84,
        "output_throughput": 491.5,
        "mean_ttft_ms": 45.2,
        "median_ttft_ms": 41.0,
        "p99_ttft_ms": 120.3,
        "mean_tpot_ms": 9.8,
        "median_tpot_ms": 9.6,
        "p99_tpot_ms": 12.4,
        "mean_itl_ms": 9.7,
        "median_itl_ms": 9.5,
        "p99_itl_ms": 25.0,
        "mean_e2el_ms": 1290.0,
        "median_e2el_ms": 1270.0,
        "p99_e2el_ms": 1500.0,
        "tensor_parallel_size": "1",
        "gpu": "NVIDIA H100 80GB HBM3",
        **extra,
    }


def test_an_aggregate_only_benchmark_result_imports_and_validates(tmp_path, capsys):
    """Without --save-detailed: the replay sends num_prompts requests of the mean lengths
    at the recorded rate, and validate --observed compares the figures the file has."""
    path = tmp_path / "result.json"
    path.write_text(json.dumps(_aggregates()))
    out = tmp_path / "run"
    summary = import_run("vllm-bench", path, out, html=False)
    assert (summary["num_requests"], summary["num_rejected"]) == (200, 2)
    assert summary["ttft_s"]["mean"] == pytest.approx(0.0452)
    assert summary["ttft_s"]["p99"] == pytest.approx(0.1203) and "p90" not in summary["ttft_s"]
    assert summary["benchmark"]["median_itl_ms"] == pytest.approx(9.5)
    scenario = load_scenario(out / "scenario.yaml")
    assert scenario.simulation.num_requests == 200 and scenario.hardware.name == "h100-sxm"
    assert scenario.workload.arrival.kind == "poisson" and scenario.workload.arrival.rate_rps == 4
    assert (scenario.workload.input.value, scenario.workload.output.value) == (1024, 128)
    assert any("aggregates only" in note for note in summary["recorded"]["notes"])
    capsys.readouterr()
    assert (
        main(
            [
                "validate",
                str(out / "scenario.yaml"),
                "--observed",
                str(out),
                "--out",
                str(tmp_path / "v"),
                "--no-report",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "| ttft_s.p90 | n/a |" in printed and "| itl_s.p50 | 9.50 ms |" in printed
    report = json.loads((tmp_path / "v" / "validation.json").read_text())
    assert report["mape"]["figures"] == 10  # 3 x (mean, p50, p99) and requests/s


@pytest.mark.parametrize(
    "extra, kind, detail",
    [
        ({"request_rate": "inf"}, "constant", 1e9),
        ({"burstiness": 4.0}, "gamma", 0.5),  # cv = 1 / sqrt(burstiness)
    ],
)
def test_an_aggregate_results_send_process(tmp_path, extra, kind, detail):
    path = tmp_path / "result.json"
    path.write_text(json.dumps(_aggregates(**extra)))
    import_run("vllm-bench", path, tmp_path / "run", html=False)
    arrival = load_scenario(tmp_path / "run" / "scenario.yaml").workload.arrival
    assert arrival.kind == kind
    assert (arrival.rate_rps if kind == "constant" else arrival.cv) == pytest.approx(detail)


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"max_concurrency": 8}, "max_concurrency: sends waited for a free slot"),
        ({"completed": 0}, "completed: no request completed"),
        ({"num_prompts": 100}, "num_prompts: 100, fewer than completed"),
        ({"ttfts": [0.1]}, "input_lens: missing; a replay needs every per-request list"),
        (
            {
                "mean_ttft_ms": None,
                "median_ttft_ms": None,
                "p99_ttft_ms": None,
                "mean_e2el_ms": None,
                "median_e2el_ms": None,
                "p99_e2el_ms": None,
            },
            "mean_ttft_ms: missing",
        ),
        ({"total_input_tokens": -5}, "total_input_tokens"),
    ],
)
def test_an_aggregate_result_that_cannot_be_replayed_is_one_line(tmp_path, extra, message):
    path = tmp_path / "result.json"
    path.write_text(json.dumps(_aggregates(**extra)))
    with pytest.raises(RecordError, match=message):
        import_run("vllm-bench", path, tmp_path / "run", html=False)
    assert not (tmp_path / "run").exists()


def test_vllm_request_spans_import_with_the_engine_log(tmp_path):
    """OTLP/JSON spans (vLLM 0.33.0's llm_request) become a trace on the engine's clock;
    the engine log gives the version (async scheduling), the non-default args and the
    prefix hit rate; spans of other names are skipped."""
    from tests.recorded.fixtures import VLLM_LOG, otel_export, otel_span

    spans = [
        otel_span(1.7e9 + 0.5 * i, 0.05 + 0.01 * i, 0.5 + 0.1 * i, 300 + i, 20) for i in range(5)
    ] + [otel_span(1.7e9, 0, 0, 0, 0, name="http_request")]
    path = otel_export(tmp_path / "traces.jsonl", spans)
    (tmp_path / "vllm.log").write_text(VLLM_LOG)
    out = tmp_path / "run"
    summary = import_run(
        "otel",
        path,
        out,
        hardware="h100-sxm",
        model="llama-3.1-8b",
        engine_log=tmp_path / "vllm.log",
        html=False,
    )
    assert summary["num_requests"] == 5 and summary["recorded"]["clock"] == "engine"
    assert summary["ttft_s"]["p50"] == pytest.approx(0.07)
    rows = [json.loads(line) for line in (out / "requests.jsonl").open()]
    assert [r["arrival_s"] for r in rows] == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0])
    assert [r["input_tokens"] for r in rows] == [300, 301, 302, 303, 304]
    engine = summary["recorded"]["engine"]
    assert (engine["max_num_seqs"], engine["version"]) == (64, "0.33.0")
    assert summary["recorded"]["prefix_hit_rate"] == pytest.approx(0.125)
    scenario = load_scenario(out / "scenario.yaml")
    assert scenario.scheduler.async_scheduling and scenario.scheduler.max_num_batched_tokens == 4096
    assert (
        main(
            [
                "run",
                str(out / "scenario.yaml"),
                "--out",
                str(tmp_path / "sim"),
                "--quiet",
                "--no-report",
            ]
        )
        == 0
    )


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: s["attributes"].pop(1), "gen_ai.latency.e2e: missing"),
        (lambda s: s["attributes"][3]["value"].update(intValue="-3"), "prompt_tokens"),
        (lambda s: s.update(startTimeUnixNano="soon"), "start_ns"),
        (lambda s: s["attributes"][0]["value"].update(doubleValue=9.0), "before"),
        (lambda s: s.update(name="other"), "no 'llm_request' span"),
    ],
)
def test_a_bad_span_is_one_line(tmp_path, change, message):
    from tests.recorded.fixtures import otel_export, otel_span

    span = otel_span(1.7e9, 0.05, 0.5, 300, 20)
    change(span)
    path = otel_export(tmp_path / "traces.jsonl", [span])
    with pytest.raises(RecordError, match=message):
        import_run("otel", path, tmp_path / "run", hardware="h100-sxm", model="llama-3.1-8b")
    assert not (tmp_path / "run").exists()


def test_a_guidellm_report_imports_one_benchmark(tmp_path, capsys):
    """A sweep's report: --benchmark picks one (none given: one line listing them); its
    requests become a trace, prompts sharing their text's start share blocks, failures
    are counted, and the cached tokens the server reported give the recorded hit rate."""
    from tests.recorded.fixtures import guidellm_report, guidellm_request

    system = "you are a helpful assistant. " * 30
    ok = [
        guidellm_request(
            1000.0 + 0.5 * i, system + f"question {i} " * 10, 8, cached=0 if i == 0 else 200
        )
        for i in range(6)
    ]
    bad = [guidellm_request(1001.2, "short", 4, error="Traceback ...\nTimeoutError: 300 s")]
    path = guidellm_report(
        tmp_path / "benchmarks.json", [("synchronous", ok[:2], []), ("constant", ok, bad)]
    )
    with pytest.raises(RecordError, match=r"2 benchmarks \(0: synchronous, 1: constant\)"):
        import_run("guidellm", path, tmp_path / "a", hardware="h100-sxm", model="llama-3-8b")
    out = tmp_path / "run"
    summary = import_run(
        "guidellm", path, out, hardware="h100-sxm", model="llama-3-8b", benchmark=1, html=False
    )
    assert (summary["num_requests"], summary["num_rejected"]) == (7, 1)
    assert summary["rejected_reasons"] == {"TimeoutError: 300 s": 1}
    assert summary["ttft_s"]["p50"] == pytest.approx(0.04)  # as the client timed it
    rows = [json.loads(line) for line in (out / "requests.jsonl").open()]
    assert rows[0]["arrival_s"] == 0.0 and rows[1]["hash_ids"][:5] == rows[0]["hash_ids"][:5]
    assert any("strategy constant at 2" in n for n in summary["recorded"]["notes"])
    capsys.readouterr()
    assert (
        main(
            [
                "validate",
                str(out / "scenario.yaml"),
                "--observed",
                str(out),
                "--out",
                str(tmp_path / "v"),
                "--no-report",
            ]
        )
        == 0
    )
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("prefix cache"))
    assert "(cached prompt tokens the server reported, the whole run)" in line
    prompts = sum(r["prompt_tokens"] for r in ok)
    assert f"recorded {100 * 1000 / prompts:.1f} %" in line
    with pytest.raises(RecordError, match="benchmarks.json: --benchmark: 5: .* 0 to 1"):
        import_run(
            "guidellm", path, tmp_path / "b", hardware="h100-sxm", model="llama-3-8b", benchmark=5
        )


def test_validate_sets_the_recorded_time_series_beside_the_replays(tmp_path, capsys):
    """A recording with the engine's own series (timeseries.csv): validate --observed prints
    its time-averaged running and waiting requests and generated tokens a second beside the
    replay's, as the corpus bench does."""
    folder = lifecycle_folder(tmp_path / "vllm", rows=6)
    rows = ["t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct"]
    rows += [f"{t},300.0,{40.0 + t},{2 + t % 2},0,{1.5}" for t in range(4)]
    (folder / "timeseries.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "run"
    import_run("lifecycle", folder / "requests.jsonl", out, html=False)
    capsys.readouterr()
    assert (
        main(
            [
                "validate",
                str(out / "scenario.yaml"),
                "--observed",
                str(out),
                "--out",
                str(tmp_path / "v"),
                "--no-report",
            ]
        )
        == 0
    )
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("step level"))
    series = json.loads((tmp_path / "v" / "validation.json").read_text())["series"]
    # averaged over the seconds both cover (the replay ends before the recording's t = 3)
    assert 2 < series["running"][0] < 3 and series["gen_tok_s"][0] > 40
    recorded, simulated = series["running"]
    assert f"running {recorded:,.1f} / {simulated:,.1f}" in line


def test_a_guessed_gpu_is_checked_against_the_recorded_decode_speed(tmp_path):
    """A run that names no GPU, recorded (here: simulated) on an H100: imported with a
    guessed --hardware rtx-4090, its note says the RTX 4090 prices the decode steps far
    slower and the H100 fits nearest; a run that names its GPU is not checked."""
    import csv

    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "model: llama-3-8b\nhardware: h100-sxm\n"
        "workload: {arrival: {kind: poisson, rate_rps: 4}, input: {kind: uniform, min: 200, "
        "max: 800}, output: {kind: uniform, min: 50, max: 300}}\n"
        "simulation: {num_requests: 120, seed: 3}\n"
    )
    assert (
        main(["run", str(scenario), "--out", str(tmp_path / "h100"), "--quiet", "--no-report"]) == 0
    )
    with (tmp_path / "h100" / "requests.csv").open() as handle:
        rows = [
            json.dumps(
                {
                    "queued_ts": 50 + float(r["arrival_s"]),
                    "first_token_ts": 50 + float(r["first_token_s"]),
                    "last_token_ts": 50 + float(r["finish_s"]),
                    "input_toks": int(r["prompt_tokens"]),
                    "output_toks": int(r["output_tokens"]),
                }
            )
            for r in csv.DictReader(handle)
        ]
    (tmp_path / "requests.jsonl").write_text("\n".join(rows) + "\n")
    summary = import_run(
        "lifecycle",
        tmp_path / "requests.jsonl",
        tmp_path / "run",
        hardware="rtx-4090",
        model="llama-3-8b",
        html=False,
    )
    note = next(n for n in summary["recorded"]["notes"] if n.startswith("GPU:"))
    slower = float(note.split("rtx-4090 prices its decode steps ")[1].split(" %")[0])
    assert slower > 50 and "% slow" in note  # a 4090 decodes 8B far slower than an H100
    assert note.split("nearest presets: ")[1].startswith("h100-sxm")
    folder = lifecycle_folder(tmp_path / "named")  # meta.json names an RTX 4090
    named = import_run(
        "lifecycle",
        folder / "requests.jsonl",
        tmp_path / "named-run",
        hardware="rtx-4090",
        html=False,
    )
    assert not any(n.startswith("GPU:") for n in named["recorded"]["notes"])


def test_an_imported_runs_report_says_what_a_client_cannot_know(chromium, tmp_path):
    """A recording has no steps, KV cache or scheduling instants: its report says "not
    observable" there (never "none", which claims the engine did nothing), names no cost
    model, and its time axis is the recording's, not simulated time."""
    from tests.browser import check_page

    folder = lifecycle_folder(tmp_path / "vllm")
    out = tmp_path / "imported"
    import_run("lifecycle", folder / "requests.jsonl", out, html=True)
    page = (out / "report.html").read_text()
    result = check_page(chromium, out / "report.html")
    assert result["errors"] == []
    notes = {plot["id"]: " ".join(plot["notes"]) for plot in result["plots"]}
    for engine_side in ("kv", "cache", "swap", "load", "preemptions"):
        assert notes[engine_side].startswith("not observable"), notes[engine_side]
    assert "not observable: a client does not see when a request is scheduled" in notes["arrival"]
    assert "none:" not in " ".join(notes.values())
    assert "simulated time" not in page and "time since the run began, as recorded" in page
    assert "<td>cost model</td><td>none: times measured (recorded lifecycle" in page
    for row in ("preemptions", "mean batch", "prefix blocks evicted", "limited by"):
        assert f"<td>{row}</td><td class=num>not observable</td>" in page, row
