"""Small recorded runs of each format, written by hand for the tests (the shapes of the
real files, documented in each importer's module)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml


def latency_table(mean: float) -> dict[str, float]:
    return {"mean": mean, "median": mean, "p90": 1.2 * mean, "p99": 1.5 * mean}


def inference_perf_stage(
    count: int, rate: float, *, failed: int = 0, tpot: float = 0.004, itl_median: float = 3e-5
) -> dict:
    """A stage_N_lifecycle_metrics.json as inference-perf (e8e0aa9) writes it."""
    return {
        "load_summary": {
            "count": count,
            "send_duration": count / rate,
            "requested_rate": rate,
            "achieved_rate": rate,
        },
        "successes": {
            "count": count - failed,
            "latency": {
                "request_latency": latency_table(2.0),
                "time_to_first_token": latency_table(0.03),
                "time_per_output_token": latency_table(tpot),
                "inter_token_latency": {**latency_table(tpot), "median": itl_median},
            },
            "throughput": {"requests_per_sec": rate, "output_tokens_per_sec": 200 * rate},
            "prompt_len": {"median": 575.0, "mean": 575.0},
            "output_len": {"median": 249.0},
        },
        "failures": {"count": failed},
    }


def inference_perf_folder(
    folder: Path,
    *,
    failed: int = 0,
    per_request: list | None = None,
    stages=((8.0, 60), (20.0, 60)),
) -> Path:
    """A report folder: config.yaml, one stage file per stage, a summary."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "data": {
            "type": "shared_prefix",
            "shared_prefix": {
                "num_groups": 10,
                "num_prompts_per_group": 10,
                "system_prompt_len": 100,
                "question_len": 447,
                "output_len": 248,
            },
        },
        "load": {"type": "constant", "stages": [{"rate": r, "duration": d} for r, d in stages]},
        "server": {"type": "vllm", "model_name": "meta-llama/Llama-2-7b-hf", "ignore_eos": True},
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    for i, (rate, duration) in enumerate(stages):
        stage = inference_perf_stage(int(rate * duration), rate, failed=failed if i else 0)
        (folder / f"stage_{i}_lifecycle_metrics.json").write_text(json.dumps(stage))
    total = sum(int(r * d) for r, d in stages)
    (folder / "summary_lifecycle_metrics.json").write_text(
        json.dumps(inference_perf_stage(total, 10.0, failed=failed))
    )
    if per_request is not None:
        (folder / "per_request_lifecycle_metrics.json").write_text(json.dumps(per_request))
    return folder


def inference_perf_request(start: float, prompt: str, tokens: int, step: float = 0.01) -> dict:
    """One per-request record with line timestamps (two per token, then [DONE])."""
    times = []
    t = start + 0.03
    for _ in range(tokens):
        times += [t, t + 2e-6]
        t += step
    times += [t - step + 1e-4, t - step + 1.02e-4]
    return {
        "start_time": start,
        "end_time": times[-1] + 0.002,
        "request": json.dumps({"prompt": prompt, "max_tokens": tokens}),
        "response": "...",
        "info": {"input_tokens": 575, "output_tokens": tokens - 3, "output_token_times": times},
        "error": None,
    }


def lifecycle_folder(folder: Path, *, blocks: int | None = 2588, rows: int = 6) -> Path:
    """requests.jsonl and meta.json as LLMServingSim's bench runner writes them."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(rows):
        queued = 100.0 + 0.5 * i
        lines.append(
            json.dumps(
                {
                    "request_id": f"bench-{i}",
                    "input_toks": 300 + 10 * i,
                    "output_toks": 20,
                    "arrival_time": 1.7e9 + i,
                    "queued_ts": queued,
                    "scheduled_ts": queued + 0.001,
                    "first_token_ts": queued + 0.05,
                    "last_token_ts": queued + 0.05 + 19 * 0.012,
                }
            )
        )
    (folder / "requests.jsonl").write_text("\n".join(lines) + "\n")
    meta = {
        "model": "meta-llama/Llama-3.1-8B",
        "vllm_version": "0.19.0",
        "engine_kwargs": {
            "model": "meta-llama/Llama-3.1-8B",
            "tensor_parallel_size": 1,
            "data_parallel_size": 1,
            "enable_expert_parallel": False,
            "max_num_seqs": 64,
            "max_num_batched_tokens": 2048,
            "max_model_len": 32768,
            "dtype": "bfloat16",
            "seed": 42,
        },
        "hardware": {"device_name": "NVIDIA GeForce RTX 4090"},
    }
    if blocks is not None:
        meta["kv_cache"] = {
            "num_gpu_blocks": blocks,
            "block_size": 16,
            "gpu_memory_utilization": 0.9,
            "enable_prefix_caching": True,
        }
    (folder / "meta.json").write_text(json.dumps(meta))
    return folder


def vllm_bench(path: Path, *, start_times: bool = True, **extra) -> Path:
    """A ``vllm bench serve --save-result --save-detailed`` result of three requests."""
    result = {
        "date": "20260921-101502",
        "backend": "openai",
        "model_id": "meta-llama/Llama-3.1-8B",
        "num_prompts": 3,
        "tensor_parallel_size": "1",
        "gpu": "NVIDIA H100 80GB HBM3",
        "request_rate": 2.0,
        "burstiness": 1.0,
        "max_concurrency": None,
        "duration": 1.35,
        "completed": 2,
        "failed": 1,
        "input_lens": [512, 498, 530],
        "output_lens": [4, 4, 0],
        "ttfts": [0.0712, 0.0655, 0.0],
        "itls": [[0.0121, 0.0119, 0.0123], [0.0118, 0.024], []],
        "generated_texts": ["a", "b", ""],
        "errors": ["", "", "Traceback ...\nConnectionResetError: reset by peer"],
    }
    if start_times:
        result["start_times"] = [353399.70, 353400.11, 353400.93]
    result.update(extra)
    path.write_text(json.dumps(result))
    return path


def otel_span(
    start_s: float, ttft: float, e2e: float, prompt: int, output: int, name: str = "llm_request"
) -> dict:
    """One span as vLLM 0.33.0's do_tracing emits it, in OTLP/JSON (64-bit ints as text)."""
    attributes = {
        "gen_ai.latency.time_to_first_token": {"doubleValue": ttft},
        "gen_ai.latency.e2e": {"doubleValue": e2e},
        "gen_ai.latency.time_in_queue": {"doubleValue": 0.001},
        "gen_ai.usage.prompt_tokens": {"intValue": str(prompt)},
        "gen_ai.usage.completion_tokens": {"intValue": str(output)},
        "gen_ai.request.id": {"stringValue": f"cmpl-{start_s}"},
    }
    return {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": "eee19b7ec3c1b174",
        "name": name,
        "kind": 2,
        "startTimeUnixNano": str(int(start_s * 1e9)),
        "endTimeUnixNano": str(int((start_s + e2e) * 1e9)),
        "attributes": [{"key": k, "value": v} for k, v in attributes.items()],
    }


def otel_export(path: Path, spans: list[dict], *, per_line: int = 2) -> Path:
    """A collector's file output: ``per_line`` spans an ExportTraceServiceRequest a line."""
    lines = []
    for i in range(0, len(spans), per_line):
        lines.append(
            json.dumps(
                {
                    "resourceSpans": [
                        {
                            "resource": {
                                "attributes": [
                                    {"key": "service.name", "value": {"stringValue": "vllm"}}
                                ]
                            },
                            "scopeSpans": [
                                {
                                    "scope": {"name": "vllm.llm_engine"},
                                    "spans": spans[i : i + per_line],
                                }
                            ],
                        }
                    ]
                }
            )
        )
    path.write_text("\n".join(lines) + "\n")
    return path


#: Lines of a vLLM 0.33.0 server's log as it writes them (written here, in its format):
#: the non-default args (one not a literal), the version, one stats line.
VLLM_LOG = (Path(__file__).parent / "data" / "vllm-serve.log").read_text()


def guidellm_request(
    start: float,
    prompt: str,
    tokens: int,
    *,
    ttft: float = 0.04,
    step: float = 0.01,
    cached: int | None = 0,
    error: str | None = None,
) -> dict:
    """One GenerativeRequestStats as GuideLLM (report schema 2) serialises it, with the
    fields a replay reads and some it does not."""
    end = start + ttft + step * (tokens - 1)
    return {
        "type_": "generative_request_stats",
        "request_id": f"req-{start}",
        "request_args": json.dumps(
            {"method": "POST", "stream": True, "body": {"prompt": prompt, "max_tokens": tokens}}
        ),
        "output": "x" * tokens,
        "info": {
            "request_id": f"req-{start}",
            "status": "errored" if error else "completed",
            "error": error,
            "timings": {"request_start": start, "request_end": end},
        },
        "input_metrics": {"total_tokens": len(prompt) // 4},
        "output_metrics": {"total_tokens": tokens},
        "request_start_time": start,
        "request_end_time": end,
        "request_latency": end - start,
        "prompt_tokens": len(prompt) // 4,
        "cached_tokens": cached,
        "output_tokens": tokens,
        "time_to_first_token_ms": None if error else 1e3 * ttft,
    }


def guidellm_report(path: Path, benchmarks: list[tuple[str, list, list]]) -> Path:
    """benchmarks.json: a (strategy, successful, errored) triple a benchmark."""
    report = {
        "metadata": {"version": 2, "guidellm_version": "0.4.0"},
        "config": {"profile": "sweep"},
        "benchmarks": [
            {
                "type_": "generative_benchmark",
                "config": {
                    "strategy": {"type_": kind, "rate": 2.0 if kind != "synchronous" else None}
                },
                "metrics": {},
                "scheduler_state": {},
                "scheduler_metrics": {},
                "requests": {"successful": ok, "errored": bad, "incomplete": []},
            }
            for kind, ok, bad in benchmarks
        ],
    }
    path.write_text(json.dumps(report))
    return path
