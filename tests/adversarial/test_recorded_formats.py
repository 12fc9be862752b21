"""Every field ``pagesim import-run`` reads, of every format, given a hostile value: one
line naming the file (and line) and the field, exit code 2, nothing written.

The cases are generated field by field from small sound runs (tests/recorded/fixtures):
a wrong type (a string, a list, an object, a boolean where a number goes), a number out
of range (negative, 10^30, zero where at least one is needed), a missing field. Each
format's typed model (sim/recorded: lifecycle.Row and Meta, inference_perf.Config,
Report and RequestRecord, bench_json.Result, run.EngineConfig) is what refuses them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.adversarial.cli import one_line_error, run_cases
from tests.recorded.fixtures import (
    inference_perf_folder,
    inference_perf_request,
    lifecycle_folder,
    vllm_bench,
)

#: A value that means "remove the key".
GONE = object()


def _set(data: Any, path: str, value: Any) -> None:
    """``data[a][b][0]... = value`` for ``a.b[0]...`` (``GONE``: delete it)."""
    keys: list[Any] = []
    for part in path.split("."):
        name, *indices = re.split(r"\[(\d+)\]", part)
        keys += [name] if name else []
        keys += [int(i) for i in indices if i]
    node = data
    for key in keys[:-1]:
        node = node[key]
    if value is GONE:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value


# ----------------------------------------------------------------------------- lifecycle


def _lifecycle(edit):
    def build(folder: Path) -> tuple[list[str], list[str]]:
        source = lifecycle_folder(folder / "run")
        path = source / "requests.jsonl"
        culprits = edit(source)
        return ["import-run", "lifecycle", str(path), "--out", str(folder / "out")], culprits

    return build


def row(key: str, value: Any, *culprits: str):
    """The third request's ``key`` set to ``value``."""

    def edit(source: Path) -> list[str]:
        path = source / "requests.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        _set(rows[2], key, value)
        path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        return ["requests.jsonl:3", *(culprits or [key])]

    return _lifecycle(edit)


def meta(key: str, value: Any, *culprits: str):
    def edit(source: Path) -> list[str]:
        data = json.loads((source / "meta.json").read_text())
        _set(data, key, value)
        (source / "meta.json").write_text(json.dumps(data))
        return ["meta.json", *(culprits or [key.split(".")[-1]])]

    return _lifecycle(edit)


def prompts(lines: list[Any], *culprits: str):
    """``--prompts FILE`` holding ``lines`` (JSON values, one a line)."""

    def build(folder: Path) -> tuple[list[str], list[str]]:
        args, _ = _lifecycle(lambda source: [])(folder)
        path = folder / "prompts.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        return [*args, "--prompts", str(path)], ["prompts.jsonl", *culprits]

    return build


def series(text: str, *culprits: str):
    def edit(source: Path) -> list[str]:
        (source / "timeseries.csv").write_text(text)
        return ["timeseries.csv", *culprits]

    return _lifecycle(edit)


_IDS = [{"input_tok_ids": [1, 2, 3]}] * 6
_SERIES = "t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n"

LIFECYCLE = {
    "queued_ts a string": row("queued_ts", "soon"),
    "queued_ts a list": row("queued_ts", [1]),
    "queued_ts true": row("queued_ts", True),
    "queued_ts null": row("queued_ts", None),
    "queued_ts missing": row("queued_ts", GONE),
    "first_token_ts a string": row("first_token_ts", "x"),
    "first_token_ts an object": row("first_token_ts", {"s": 1}),
    "first_token_ts missing in a success": row("first_token_ts", GONE),
    "last_token_ts before the first token": row("last_token_ts", 100.9, "first_token_ts"),
    "last_token_ts 1e400 (JSON infinity)": _lifecycle(
        lambda s: (
            (s / "requests.jsonl").write_text(
                '{"queued_ts": 1, "first_token_ts": 2, "last_token_ts": 1e400, '
                '"input_toks": 1, "output_toks": 1}\n'
            ),
            ["requests.jsonl:1"],
        )[1]
    ),
    "input_toks a fraction": row("input_toks", 12.5),
    "input_toks a string": row("input_toks", "many"),
    "input_toks true": row("input_toks", True),
    "input_toks missing (no alias either)": row("input_toks", GONE),
    "prompt_tokens (an alias) negative": _lifecycle(
        lambda s: (
            (s / "requests.jsonl").write_text(
                '{"queued_ts": 1, "first_token_ts": 2, "last_token_ts": 3, '
                '"prompt_tokens": -4, "output_toks": 1}\n'
            ),
            ["requests.jsonl:1", "prompt_tokens"],
        )[1]
    ),
    "output_toks 2^41": row("output_toks", 2**41),
    "output_toks a list": row("output_toks", [20]),
    "output_toks a text of digits": row("output_toks", "20"),
    "queued_ts a text of digits": row("queued_ts", "1.5"),
    "output_toks null": row("output_toks", None),
    "error a number": row("error", 500),
    "error an object": row("error", {"code": 500}),
    "a line that is a list": _lifecycle(
        lambda s: ((s / "requests.jsonl").write_text("[1, 2, 3]\n"), ["requests.jsonl:1"])[1]
    ),
    "a line that is a string": _lifecycle(
        lambda s: ((s / "requests.jsonl").write_text('"queued"\n'), ["requests.jsonl:1"])[1]
    ),
    "meta: vllm_version a list": meta("vllm_version", [0, 19]),
    "meta: model a number": meta("model", 7),
    "meta: hardware a string": meta("hardware", "RTX 4090"),
    "meta: hardware.device_name a list": meta("hardware.device_name", ["RTX"]),
    "meta: kv_cache a string": meta("kv_cache", "16 blocks"),
    "meta: kv_cache.num_gpu_blocks a string": meta("kv_cache.num_gpu_blocks", "many"),
    "meta: kv_cache.num_gpu_blocks 0": meta("kv_cache.num_gpu_blocks", 0),
    "meta: kv_cache.block_size -16": meta("kv_cache.block_size", -16),
    "meta: kv_cache.gpu_memory_utilization 1.5": meta("kv_cache.gpu_memory_utilization", 1.5),
    "meta: kv_cache.gpu_memory_utilization 'nan'": meta("kv_cache.gpu_memory_utilization", "nan"),
    "meta: kv_cache.enable_prefix_caching 'maybe'": meta("kv_cache.enable_prefix_caching", "maybe"),
    "meta: max_num_seqs 0": meta("engine_kwargs.max_num_seqs", 0),
    "meta: max_num_seqs true": meta("engine_kwargs.max_num_seqs", True),
    "meta: max_num_seqs 1.5": meta("engine_kwargs.max_num_seqs", 1.5),
    "meta: max_num_seqs a list": meta("engine_kwargs.max_num_seqs", [64]),
    "meta: max_num_batched_tokens 'lots'": meta("engine_kwargs.max_num_batched_tokens", "lots"),
    "meta: max_model_len -1": meta("engine_kwargs.max_model_len", -1),
    "meta: max_model_len 10^30": meta("engine_kwargs.max_model_len", 10**30),
    "meta: dtype a number": meta("engine_kwargs.dtype", 16),
    "meta: dtype unknown": meta("engine_kwargs.dtype", "float8", "dtype", "float16"),
    "meta: dtype 200 characters": meta("engine_kwargs.dtype", "b" * 200, "dtype"),
    "meta: enable_chunked_prefill 'sometimes'": meta(
        "engine_kwargs.enable_chunked_prefill", "sometimes"
    ),
    "meta: enable_expert_parallel a list": meta("engine_kwargs.enable_expert_parallel", [1]),
    "meta: tensor_parallel_size 0": meta("engine_kwargs.tensor_parallel_size", 0),
    "meta: data_parallel_size 2": meta("engine_kwargs.data_parallel_size", 2),
    "meta: cpu_offload_gib -8": meta("engine_kwargs.cpu_offload_gib", -8),
    "meta: an unknown engine argument": meta("engine_kwargs.speculative_magic", 3),
    "meta: the whole file a list": _lifecycle(
        lambda s: ((s / "meta.json").write_text("[]"), ["meta.json"])[1]
    ),
    "prompts: ids negative": prompts([{"input_tok_ids": [1, -2]}] * 6, "input_tok_ids"),
    "prompts: ids 2^31": prompts([{"input_tok_ids": [2**31]}] * 6, "input_tok_ids"),
    "prompts: ids booleans": prompts([{"input_tok_ids": [True]}] * 6, "input_tok_ids"),
    "prompts: ids a string": prompts([{"input_tok_ids": "1 2 3"}] * 6, "input_tok_ids"),
    "prompts: ids missing": prompts([{"ids": [1]}] * 6, "input_tok_ids"),
    "prompts: fewer than the requests": prompts(_IDS[:4], "4 prompts for 6"),
    "prompts: a line that is a list": prompts([[1, 2]] * 6, "prompts.jsonl:1"),
    "timeseries: a word for a number": series(_SERIES + "1,2,3,x,5,6\n", "running"),
    "timeseries: a negative count": series(_SERIES + "1,2,3,4,-5,6\n", "waiting"),
    "timeseries: NaN": series(_SERIES + "1,2,nan,4,5,6\n", "gen_throughput"),
    "timeseries: no running column": series("t,gen_throughput,waiting\n1,2,3\n", "running"),
}


# ------------------------------------------------------------------------ inference-perf


def _inference_perf(edit, per_request: list | None = None):
    def build(folder: Path) -> tuple[list[str], list[str]]:
        source = inference_perf_folder(folder / "run", per_request=per_request)
        culprits = edit(source)
        return [
            "import-run",
            "inference-perf",
            str(source),
            "--out",
            str(folder / "out"),
            "--hardware",
            "h100-sxm",
        ], culprits

    return build


def config(key: str, value: Any, *culprits: str):
    def edit(source: Path) -> list[str]:
        data = yaml.safe_load((source / "config.yaml").read_text())
        _set(data, key, value)
        (source / "config.yaml").write_text(yaml.safe_dump(data))
        return ["config.yaml", *(culprits or [key])]

    return _inference_perf(edit)


def report(name: str, key: str, value: Any, *culprits: str):
    def edit(source: Path) -> list[str]:
        data = json.loads((source / name).read_text())
        _set(data, key, value)
        (source / name).write_text(json.dumps(data))
        return [name, *(culprits or [key])]

    return _inference_perf(edit)


def record(key: str, value: Any, *culprits: str):
    """The second per-request record's ``key`` set to ``value``."""
    records = [inference_perf_request(10.0 + i, f"prompt {i}", 6) for i in range(3)]
    _set(records[1], key, value)
    name = "per_request_lifecycle_metrics.json"
    return _inference_perf(lambda source: [name, "record 1", *(culprits or [key])], records)


def per_request(content: Any, *culprits: str):
    name = "per_request_lifecycle_metrics.json"
    return _inference_perf(lambda source: [name, *culprits], content)


_STAGE = "stage_0_lifecycle_metrics.json"
_SUMMARY = "summary_lifecycle_metrics.json"

INFERENCE_PERF = {
    "config: load missing": config("load", GONE),
    "config: load a list": config("load", [1]),
    "config: load.stages empty": config("load.stages", []),
    "config: load.stages a string": config("load.stages", "8 req/s"),
    "config: a stage without a rate": config("load.stages[0].rate", GONE),
    "config: a stage rate 'fast'": config("load.stages[0].rate", "fast"),
    "config: a stage duration -60": config("load.stages[1].duration", -60),
    "config: a stage duration .inf": config("load.stages[1].duration", float("inf")),
    "config: load.type a number": config("load.type", 3),
    "config: data missing": config("data", GONE),
    "config: data.type unknown": config("data.type", "sharegpt", "data.type"),
    "config: shared_prefix missing": config("data.shared_prefix", GONE),
    "config: num_groups 0": config("data.shared_prefix.num_groups", 0),
    "config: num_groups 10^7": config("data.shared_prefix.num_groups", 10**7),
    "config: num_prompts_per_group true": config("data.shared_prefix.num_prompts_per_group", True),
    "config: system_prompt_len -1": config("data.shared_prefix.system_prompt_len", -1),
    "config: question_len 0": config("data.shared_prefix.question_len", 0),
    "config: output_len 'long'": config("data.shared_prefix.output_len", "long"),
    "config: random without an input distribution": config(
        "data", {"type": "random", "output_distribution": {"mean": 10}}, "input_distribution"
    ),
    "config: a distribution mean 0": config(
        "data",
        {"type": "random", "input_distribution": {"mean": 0}, "output_distribution": {"mean": 10}},
        "input_distribution.mean",
    ),
    "config: a distribution std_dev -1": config(
        "data",
        {
            "type": "random",
            "input_distribution": {"mean": 100, "std_dev": -1},
            "output_distribution": {"mean": 10},
        },
        "input_distribution.std_dev",
    ),
    "config: server.ignore_eos 'maybe'": config("server.ignore_eos", "maybe"),
    "config: server a string": config("server", "vllm"),
    "config: server.model_name a list": config("server.model_name", ["a"]),
    # sound as recorded values, but no replay: the scenario's own check names the run
    "config: a stage of 10^12 req/s": config(
        "load.stages[0].rate", 1e12, "replay would not be a valid scenario", "rate_rps"
    ),
    "config: a stage of 10^12 s": config(
        "load.stages[1].duration", 1e12, "replay would not be a valid scenario", "duration_s"
    ),
    "config: 10,001 stages": _inference_perf(
        lambda source: (
            (source / "config.yaml").write_text(
                yaml.safe_dump(
                    {
                        **yaml.safe_load((source / "config.yaml").read_text()),
                        "load": {
                            "type": "constant",
                            "stages": [{"rate": 1, "duration": 1}] * 10_001,
                        },
                    }
                )
            ),
            ["config.yaml", "stages"],
        )[1]
    ),
    "config: a shared-prefix pool of 10^12 prompts": _inference_perf(
        lambda source: (
            (source / "config.yaml").write_text(
                (source / "config.yaml")
                .read_text()
                .replace("num_groups: 10", "num_groups: 1000000")
                .replace("num_prompts_per_group: 10", "num_prompts_per_group: 1000000")
            ),
            ["config.yaml", "replay would not be a valid scenario", "prompts"],
        )[1]
    ),
    "config: a request timeout of 0": config(
        "load.request_timeout", 0, "replay would not be a valid scenario", "timeout"
    ),
    "config: a request timeout of -5": config(
        "load.request_timeout", -5, "load.request_timeout", "expected a figure >= 0"
    ),
    "stage: successes missing": report(_STAGE, "successes", GONE),
    "stage: successes.latency a list": report(_STAGE, "successes.latency", [1]),
    "stage: a latency table a string": report(
        _STAGE, "successes.latency.time_to_first_token", "fast", "time_to_first_token"
    ),
    "stage: successes.count -1": report(_STAGE, "successes.count", -1),
    "stage: successes.throughput a list": report(_STAGE, "successes.throughput", [2]),
    "stage: load_summary.count 'x'": report(_STAGE, "load_summary.count", "x"),
    "stage: load_summary a number": report(_STAGE, "load_summary", 480),
    "stage: failures.count true": report(_STAGE, "failures.count", True),
    "stage: failures a string": report(_STAGE, "failures", "none"),
    "stage: the file a list": _inference_perf(
        lambda s: ((s / _STAGE).write_text("[]"), [_STAGE])[1]
    ),
    "summary: successes.prompt_len a number": report(_SUMMARY, "successes.prompt_len", 575),
    "summary: more failures than requests": report(
        _SUMMARY, "failures.count", 10**6, "failures.count"
    ),
    "per-request: an object, not a list": per_request({"a": 1}, "list of request records"),
    "per-request: an empty list": per_request([], "list of request records"),
    "per-request: a record that is a number": per_request([1, 2], "record 0"),
    "per-request: start_time missing": record("start_time", GONE),
    "per-request: start_time a string": record("start_time", "noon"),
    "per-request: end_time before start_time": record("end_time", 1.0, "end_time"),
    "per-request: info a list": record("info", [1]),
    "per-request: output_token_times a string": record("info.output_token_times", "1 2 3"),
    "per-request: output_token_times decreasing": record(
        "info.output_token_times", [11.5, 11.4], "output_token_times"
    ),
    "per-request: input_tokens -5": record("info.input_tokens", -5),
    "per-request: output_tokens 1.5": record("info.output_tokens", 1.5),
    "per-request: error a number": record("error", 404),
    "per-request: error a list": record("error", ["timeout"]),
}


# ------------------------------------------------------------------- vllm-bench, sglang


def bench(extra: dict, *culprits: str, start: bool = True, fmt: str = "vllm-bench"):
    def build(folder: Path) -> tuple[list[str], list[str]]:
        fields = dict(extra)
        starts = {"start_times": fields.pop("start_times")} if "start_times" in fields else {}
        path = vllm_bench(folder / "result.json", start_times=start, **fields)
        if starts:  # the fixture's own flag has this name: write the list over it
            result = json.loads(path.read_text())
            path.write_text(json.dumps({**result, **starts}))
        return [
            "import-run",
            fmt,
            str(path),
            "--out",
            str(folder / "out"),
            "--hardware",
            "h100-sxm",
        ], ["result.json", *culprits]

    return build


def metadata(values: Any, *culprits: str):
    def build(folder: Path) -> tuple[list[str], list[str]]:
        args, _ = bench({})(folder)
        path = folder / "engine.json"
        path.write_text(json.dumps(values))
        return [*args, "--metadata", str(path)], ["engine.json", *culprits]

    return build


def _whole_file(folder: Path, content: str, *culprits: str) -> tuple[list[str], list[str]]:
    (folder / "result.json").write_text(content)
    return [
        "import-run",
        "vllm-bench",
        str(folder / "result.json"),
        "--out",
        str(folder / "out"),
        "--hardware",
        "h100-sxm",
    ], ["result.json", *culprits]


BENCH = {
    "input_lens a negative length": bench({"input_lens": [512, -1, 530]}, "input_lens[1]"),
    "input_lens a string": bench({"input_lens": "512 498 530"}, "input_lens"),
    "output_lens a fraction": bench({"output_lens": [4, 4.5, 0]}, "output_lens[1]"),
    "output_lens a boolean": bench({"output_lens": [4, True, 0]}, "output_lens[1]"),
    "ttfts a string": bench({"ttfts": [0.07, "fast", 0.0]}, "ttfts[1]"),
    "ttfts a list of lists": bench({"ttfts": [[0.07], [0.06], [0.0]]}, "ttfts[0]"),
    "itls not lists": bench({"itls": [0.01, 0.01, 0.01]}, "itls[0]"),
    "itls a negative gap": bench({"itls": [[0.01, -0.01], [0.01], []]}, "itls[0][1]"),
    "errors a number": bench({"errors": ["", 500, ""]}, "errors[1]"),
    "start_times a word": bench({"start_times": [1.0, "later", 3.0]}, "start_times[1]"),
    "start_times of another length": bench({"start_times": [1.0, 2.0]}, "start_times"),
    "request_rate 'fast'": bench({"request_rate": "fast"}, "request_rate", start=False),
    "request_rate 0": bench({"request_rate": 0}, "request_rate", start=False),
    "request_rate -2": bench({"request_rate": -2}, "request_rate", start=False),
    "request_rate true": bench({"request_rate": True}, "request_rate", start=False),
    "burstiness 10^4": bench({"burstiness": 1e4}, "burstiness", start=False),
    "max_concurrency without send times": bench(
        {"max_concurrency": 4}, "max_concurrency", start=False
    ),
    "max_concurrency a string": bench({"max_concurrency": "four"}, "max_concurrency"),
    "seed 2^33": bench({"seed": str(2**33)}, "seed", start=False),
    "seed -1": bench({"seed": "-1"}, "seed", start=False),
    "model_id a number": bench({"model_id": 8}, "model_id"),
    "metadata max_num_seqs 'lots'": bench({"max_num_seqs": "lots"}, "max_num_seqs"),
    "metadata gpu_memory_utilization '1.5'": bench(
        {"gpu_memory_utilization": "1.5"}, "gpu_memory_utilization"
    ),
    "metadata enable_prefix_caching 'perhaps'": bench(
        {"enable_prefix_caching": "perhaps"}, "enable_prefix_caching"
    ),
    "--metadata a list": metadata([1, 2], "engine arguments"),
    "--metadata block_size 0": metadata({"block_size": 0}, "block_size"),
    "--metadata --max-num-seqs -3 (as typed on a command line)": metadata(
        {"--max-num-seqs": -3}, "--max-num-seqs"
    ),
    "--metadata an unknown argument": metadata({"warp": 9}, "warp"),
    "the file a list": lambda folder: _whole_file(folder, "[1, 2]", "JSON object"),
    "the file a bare number": lambda folder: _whole_file(folder, "3", "JSON object"),
    "sglang: ttfts a string": bench({"ttfts": "x"}, "ttfts", fmt="sglang-bench"),
    "sglang: request_rate NaN": bench(
        {"request_rate": float("nan")}, "request_rate", start=False, fmt="sglang-bench"
    ),
    "sglang: output_lens negative": bench(
        {"output_lens": [4, -4, 0]}, "output_lens[1]", fmt="sglang-bench"
    ),
}


# -------------------------------------------------- aggregates, otel, guidellm, engine log


def aggregates(change: dict, *culprits: str):
    """An aggregate-only ``vllm bench serve`` result with ``change`` applied."""
    base = {
        "num_prompts": 20,
        "request_rate": 2.0,
        "completed": 20,
        "failed": 0,
        "total_input_tokens": 20 * 512,
        "total_output_tokens": 20 * 64,
        "duration": 11.0,
        "mean_ttft_ms": 40.0,
        "median_ttft_ms": 38.0,
        "p99_ttft_ms": 90.0,
        "mean_e2el_ms": 700.0,
        "median_e2el_ms": 690.0,
        "p99_e2el_ms": 900.0,
        "model_id": "meta-llama/Llama-3.1-8B",
    }
    return lambda folder: _whole_file(folder, json.dumps({**base, **change}), *culprits)


def spans(change, *culprits: str, keep: bool = True):
    """An OTLP/JSON export of two vLLM request spans, the second changed by ``change``
    (``keep`` False: spans of another name only)."""
    from tests.recorded.fixtures import otel_export, otel_span

    def build(folder: Path) -> tuple[list[str], list[str]]:
        name = "llm_request" if keep else "http_request"
        items = [otel_span(1.7e9 + i, 0.05, 0.5, 300, 20, name=name) for i in range(2)]
        change(items[1])
        path = otel_export(folder / "traces.jsonl", items)
        return [
            "import-run",
            "otel",
            str(path),
            "--out",
            str(folder / "out"),
            "--hardware",
            "h100-sxm",
            "--model",
            "llama-3.1-8b",
        ], ["traces.jsonl", *culprits]

    return build


def guide(change, *culprits: str, extra: tuple[str, ...] = ()):
    """A GuideLLM report of one constant-rate benchmark, its second request changed."""
    from tests.recorded.fixtures import guidellm_report, guidellm_request

    def build(folder: Path) -> tuple[list[str], list[str]]:
        ok = [guidellm_request(1000.0 + i, f"prompt {i} " * 40, 8) for i in range(3)]
        change(ok[1])
        path = guidellm_report(folder / "benchmarks.json", [("constant", ok, [])])
        return [
            "import-run",
            "guidellm",
            str(path),
            "--out",
            str(folder / "out"),
            "--hardware",
            "h100-sxm",
            "--model",
            "llama-3-8b",
            *extra,
        ], ["benchmarks.json", *culprits]

    return build


def engine_log(text: str, *culprits: str):
    def build(folder: Path) -> tuple[list[str], list[str]]:
        args, _ = _lifecycle(lambda source: [])(folder)
        (folder / "vllm.log").write_text(text)
        return [*args, "--engine-log", str(folder / "vllm.log")], ["vllm.log", *culprits]

    return build


_STATS = (
    "Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 1.0 "
    "tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, Prefix "
    "cache hit rate: {}%\n"
)

OTHERS = {
    "aggregates: completed a word": aggregates({"completed": "all"}, "completed"),
    "aggregates: total_input_tokens negative": aggregates(
        {"total_input_tokens": -1}, "total_input_tokens"
    ),
    "aggregates: no completed request": aggregates({"completed": 0}, "completed"),
    "aggregates: more requests than num_prompts": aggregates({"num_prompts": 5}, "num_prompts"),
    "aggregates: max_concurrency": aggregates({"max_concurrency": 4}, "max_concurrency"),
    "aggregates: no latency figure": aggregates(
        {
            "mean_ttft_ms": None,
            "median_ttft_ms": None,
            "p99_ttft_ms": None,
            "mean_e2el_ms": None,
            "median_e2el_ms": None,
            "p99_e2el_ms": None,
        },
        "mean_ttft_ms",
    ),
    "aggregates: request_rate -1": aggregates({"request_rate": -1}, "request_rate"),
    "aggregates: a negative mean TTFT": aggregates({"mean_ttft_ms": -12.5}, "mean_ttft_ms"),
    "aggregates: a negative throughput": aggregates(
        {"request_throughput": -3.0}, "request_throughput"
    ),
    "aggregates: a mean prompt past any context": aggregates(
        {"total_input_tokens": 1 << 40}, "total_input_tokens"
    ),
    "aggregates: a mean output past any context": aggregates(
        {"total_output_tokens": 1 << 40}, "total_output_tokens"
    ),
    "otel: an attribute missing": spans(lambda s: s["attributes"].pop(0), "time_to_first_token"),
    "otel: a negative count": spans(
        lambda s: s["attributes"][3]["value"].update(intValue="-1"), "prompt_tokens"
    ),
    "otel: a start that is a word": spans(lambda s: s.update(startTimeUnixNano="x"), "start_ns"),
    "otel: E2E before the first token": spans(
        lambda s: s["attributes"][1]["value"].update(doubleValue=0.01), "e2e"
    ),
    "otel: attributes not a list": spans(lambda s: s.update(attributes={"a": 1}), "attributes"),
    "otel: no request span": spans(lambda s: None, "llm_request", keep=False),
    "guidellm: a start that is a word": guide(
        lambda r: r.update(request_start_time="noon"), "request_start_time"
    ),
    "guidellm: prompt tokens negative": guide(
        lambda r: r.update(prompt_tokens=-3), "prompt_tokens"
    ),
    "guidellm: a success without its TTFT": guide(
        lambda r: r.update(time_to_first_token_ms=None), "time_to_first_token_ms"
    ),
    "guidellm: more tokens cached than prompted": guide(
        lambda r: r.update(cached_tokens=10 * r["prompt_tokens"]), "cached_tokens"
    ),
    "guidellm: an end before its start": guide(
        lambda r: r.update(request_end_time=1.0), "request_end_time"
    ),
    "guidellm: --benchmark 3 of 1": guide(
        lambda r: None, "--benchmark", extra=("--benchmark", "3")
    ),
    "engine log: no stats and no arguments": engine_log("INFO starting\n", "stats line"),
    "engine log: a hit rate over 100 %": engine_log(_STATS.format("180.0"), "180.0"),
    "engine log: an argument of the wrong kind": engine_log(
        "non-default args: {'max_num_seqs': 'many'}\n", "max_num_seqs"
    ),
}


CASES = {
    **{name: build for name, build in OTHERS.items()},
    **{f"lifecycle: {name}": build for name, build in LIFECYCLE.items()},
    **{f"inference-perf: {name}": build for name, build in INFERENCE_PERF.items()},
    **{f"vllm-bench: {name}": build for name, build in BENCH.items()},
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    return run_cases(CASES, lambda: tmp_path_factory.mktemp("case"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_field_of_every_format_is_checked(outcomes, name):
    outcome = outcomes[name]
    assert one_line_error(outcome.result, *outcome.culprits) == ""
    assert outcome.after == outcome.before  # nothing written
