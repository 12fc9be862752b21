"""``pagesim import-run`` given hostile files: one line naming the file, the line and the
field, exit code 2, nothing written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.adversarial.cli import one_line_error, run_cases
from tests.recorded.fixtures import inference_perf_folder, lifecycle_folder, vllm_bench


def _lifecycle(folder: Path, edit) -> tuple[list[str], list[str]]:
    source = lifecycle_folder(folder / "run")
    path = source / "requests.jsonl"
    culprits = edit(path, source)
    return ["import-run", "lifecycle", str(path), "--out", str(folder / "out")], culprits


def _row_edit(change, culprit):
    def edit(path, source):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        change(rows[2])
        path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        return ["requests.jsonl:3", culprit]

    return edit


def _text(content, *culprits):
    def edit(path, source):
        path.write_text(content)
        return ["requests.jsonl", *culprits]

    return edit


def _meta_edit(change, culprit):
    def edit(path, source):
        meta = json.loads((source / "meta.json").read_text())
        change(meta)
        (source / "meta.json").write_text(json.dumps(meta))
        return [str(path.parent.name), culprit]

    return edit


def _existing_out(folder: Path) -> tuple[list[str], list[str]]:
    """``--out`` that already holds a run (not ours to replace without --force)."""
    args, _ = _lifecycle(folder, lambda path, source: [])
    out = folder / "out"
    out.mkdir()
    (out / "summary.json").write_text("{}")
    return args, ["--out", "--force"]


def _inference_perf(folder: Path, edit) -> tuple[list[str], list[str]]:
    source = inference_perf_folder(folder / "run")
    culprits = edit(source)
    return [
        "import-run",
        "inference-perf",
        str(source),
        "--out",
        str(folder / "out"),
        "--hardware",
        "h100-sxm",
        "--model",
        "meta-llama/Llama-2-7b-hf",
    ], culprits


def _json_edit(name, change, *culprits):
    def edit(source):
        data = json.loads((source / name).read_text())
        change(data)
        (source / name).write_text(json.dumps(data))
        return [name, *culprits]

    return edit


def _replace(name, content, *culprits):
    def edit(source):
        (source / name).write_text(content)
        return [name, *culprits]

    return edit


def _vllm(folder: Path, extra, culprits, *options, start=True) -> tuple[list[str], list[str]]:
    path = vllm_bench(folder / "result.json", start_times=start, **extra)
    return ["import-run", "vllm-bench", str(path), "--out", str(folder / "out"), *options], culprits


CASES = {
    "lifecycle: truncated line": lambda f: _lifecycle(
        f, _text('{"queued_ts": 1, "inp', "not JSON")
    ),
    "lifecycle: empty file": lambda f: _lifecycle(f, _text("", "no requests")),
    "lifecycle: negative count": lambda f: _lifecycle(
        f, _row_edit(lambda r: r.update(output_toks=-3), "output_toks")
    ),
    "lifecycle: huge count": lambda f: _lifecycle(
        f, _row_edit(lambda r: r.update(input_toks=10**30), "input_toks")
    ),
    "lifecycle: NaN time": lambda f: _lifecycle(
        f,
        _text(
            '{"queued_ts": NaN, "first_token_ts": 1, "last_token_ts": 2, "input_toks": 1, '
            '"output_toks": 1}\n',
            "requests.jsonl:1",
        ),
    ),
    "lifecycle: first token before queued": lambda f: _lifecycle(
        f, _row_edit(lambda r: r.update(first_token_ts=0.0), "first_token_ts")
    ),
    "lifecycle: missing field": lambda f: _lifecycle(
        f, _row_edit(lambda r: r.pop("last_token_ts"), "last_token_ts")
    ),
    "lifecycle: bad metadata": lambda f: _lifecycle(
        f, lambda path, source: ((source / "meta.json").write_text("[1, 2"), ["meta.json"])[1]
    ),
    "lifecycle: unknown engine argument": lambda f: _lifecycle(
        f,
        lambda path, source: (
            (source / "meta.json").write_text(json.dumps({"engine_kwargs": {"warp_drive": 9}})),
            ["meta.json", "warp_drive"],
        )[1],
    ),
    "lifecycle: not UTF-8": lambda f: _lifecycle(
        f, lambda path, source: (path.write_bytes(b'{"a": "\xff\xfe"}\n'), ["requests.jsonl"])[1]
    ),
    "lifecycle: a folder as the file": lambda f: _lifecycle(
        f, lambda path, source: (path.unlink(), path.mkdir(), ["requests.jsonl"])[2]
    ),
    "inference-perf: no config": lambda f: _inference_perf(
        f, lambda s: ((s / "config.yaml").unlink(), ["config.yaml"])[1]
    ),
    "inference-perf: broken stage JSON": lambda f: _inference_perf(
        f, _replace("stage_0_lifecycle_metrics.json", '{"load_summary": {', "not JSON")
    ),
    "inference-perf: stage count mismatch": lambda f: _inference_perf(
        f, lambda s: ((s / "stage_1_lifecycle_metrics.json").unlink(), ["load.stages"])[1]
    ),
    "inference-perf: unknown load type": lambda f: _inference_perf(
        f,
        _replace(
            "config.yaml",
            "load: {type: tidal, stages: [{rate: 1, duration: 1}]}\ndata: {type: shared_prefix}\n",
            "load.type",
        ),
    ),
    "inference-perf: zero rate": lambda f: _inference_perf(
        f,
        _replace(
            "config.yaml",
            "load: {type: constant, stages: [{rate: 0, duration: 1}]}\n"
            "data: {type: shared_prefix}\n",
            "load.stages[0].rate",
        ),
    ),
    "inference-perf: unknown model": lambda f: (
        _inference_perf(f, lambda s: [])[0][:-1] + ["no-such/model"],
        ["no-such/model"],
    ),
    "vllm-bench: no per-request lists": lambda f: _vllm(
        f, {"ttfts": None}, ["result.json", "ttfts", "--save-detailed"], "--hardware", "h100-sxm"
    ),
    "vllm-bench: lists of different lengths": lambda f: _vllm(
        f, {"itls": [[0.1]]}, ["result.json", "itls"], "--hardware", "h100-sxm"
    ),
    "vllm-bench: negative ttft": lambda f: _vllm(
        f, {"ttfts": [-1.0, 0.1, 0.0]}, ["result.json", "ttfts[0]"]
    ),
    # What the replay would hold is refused before anything is written, naming the run
    # and the scenario field (the scenario's own validation, not a traceback).
    "lifecycle: a pool of 10^12 logged blocks": lambda f: _lifecycle(
        f, _meta_edit(lambda m: m["kv_cache"].update(num_gpu_blocks=10**12), "cache.num_blocks")
    ),
    "lifecycle: tensor parallel 3": lambda f: _lifecycle(
        f,
        _meta_edit(lambda m: m["engine_kwargs"].update(tensor_parallel_size=3), "tensor_parallel"),
    ),
    "lifecycle: tensor parallel 2^40": lambda f: _lifecycle(
        f,
        _meta_edit(
            lambda m: m["engine_kwargs"].update(tensor_parallel_size=2**40), "tensor_parallel"
        ),
    ),
    "vllm-bench: tensor parallel 3 in its metadata": lambda f: _vllm(
        f,
        {"tensor_parallel_size": "3"},
        ["result.json", "tensor_parallel"],
        "--hardware",
        "h100-sxm",
    ),
    "lifecycle: an existing --out without --force": lambda f: _existing_out(f),
    # files that are not regular files would block or never end: refused before opening
    "lifecycle: requests.jsonl is /dev/zero": lambda f: _lifecycle(
        f,
        lambda path, source: (
            path.unlink(),
            path.symlink_to("/dev/zero"),
            ["requests.jsonl", "not a regular file"],
        )[2],
    ),
    "lifecycle: requests.jsonl is a FIFO": lambda f: _lifecycle(
        f,
        lambda path, source: (
            path.unlink(),
            os.mkfifo(path),
            ["requests.jsonl", "not a regular file"],
        )[2],
    ),
    "lifecycle: timeseries.csv not UTF-8": lambda f: _lifecycle(
        f,
        lambda path, source: (
            (source / "timeseries.csv").write_bytes(
                b"t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n1,\xff,2,3,4,5\n"
            ),
            ["timeseries.csv", "UTF-8"],
        )[1],
    ),
    # fields of the wrong type: one line naming the field (they were AttributeErrors)
    "lifecycle: engine_kwargs a list": lambda f: _lifecycle(
        f, _meta_edit(lambda m: m.update(engine_kwargs=[1, 2]), "engine_kwargs")
    ),
    "lifecycle: engine_kwargs a string": lambda f: _lifecycle(
        f, _meta_edit(lambda m: m.update(engine_kwargs="tp=2"), "engine_kwargs")
    ),
    "lifecycle: kv_cache a list": lambda f: _lifecycle(
        f, _meta_edit(lambda m: m.update(kv_cache=[16]), "kv_cache")
    ),
    "inference-perf: successes a list": lambda f: _inference_perf(
        f,
        _json_edit(
            "stage_0_lifecycle_metrics.json", lambda d: d.update(successes=[1]), "successes"
        ),
    ),
    "inference-perf: more failures than requests": lambda f: _inference_perf(
        f,
        _json_edit(
            "stage_1_lifecycle_metrics.json",
            lambda d: d["failures"].update(count=2000),
            "failures.count",
        ),
    ),
    "vllm-bench: a rate of 1e308": lambda f: _vllm(
        f,
        {"request_rate": 1e308},
        ["result.json", "request_rate"],
        "--hardware",
        "h100-sxm",
        start=False,
    ),
    "vllm-bench: a burstiness of -1": lambda f: _vllm(
        f,
        {"burstiness": -1},
        ["result.json", "burstiness"],
        "--hardware",
        "h100-sxm",
        start=False,
    ),
    "vllm-bench: a burstiness of 'x'": lambda f: _vllm(
        f,
        {"burstiness": "x"},
        ["result.json", "burstiness"],
        "--hardware",
        "h100-sxm",
        start=False,
    ),
    "vllm-bench: a seed of 'abc'": lambda f: _vllm(
        f,
        {"seed": "abc"},
        ["result.json", "seed"],
        "--hardware",
        "h100-sxm",
        start=False,
    ),
    "vllm-bench: unknown hardware": lambda f: _vllm(
        f, {}, ["hardware", "h100-sxn", "h100-sxm"], "--hardware", "h100-sxn"
    ),
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    return run_cases(CASES, lambda: tmp_path_factory.mktemp("case"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_recorded_runs_end_in_one_line(outcomes, name):
    outcome = outcomes[name]
    assert one_line_error(outcome.result, *outcome.culprits) == ""
    assert outcome.after == outcome.before  # nothing written
