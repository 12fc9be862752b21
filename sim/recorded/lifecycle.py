"""A per-request lifecycle JSONL: ``pagesim import-run lifecycle FILE``.

One JSON object a line, a request each, with the engine's own timestamps (vLLM's
``RequestStateStats`` as its ``EngineCoreEvent`` records them; LLMServingSim's
``bench/`` runner writes exactly these):

=====================  =======================================================  ========
field                  meaning                                                  needed
=====================  =======================================================  ========
queued_ts              the engine queued it (its arrival on the engine clock)   yes
first_token_ts         its first output token                                   yes
last_token_ts          its last output token                                    yes
input_toks             prompt tokens (``prompt_tokens`` also read)              yes
output_toks            output tokens (``output_tokens`` also read)              yes
scheduled_ts           first scheduled (queueing = scheduled - queued)          no
arrival_time           the client's wall-clock send (epoch): recorded, unused   no
request_id             carried into observed.csv's detail                       no
error                  a failure's kind ('' or absent: success)                 no
=====================  =======================================================  ========

Clocks: ``queued_ts``, ``scheduled_ts``, ``first_token_ts`` and ``last_token_ts`` are one
monotonic clock of the engine process; ``arrival_time`` is the client's wall clock and
is not mixed with them. Arrivals are the queued times shifted so the first is 0, so TTFT
is first token - queued (what the engine adds; the client's HTTP and tokenisation are
outside it) and E2E is last token - queued.

Beside the file, an optional ``timeseries.csv`` (the engine's running and waiting
requests and generated tokens each second) is kept for the step-level comparison, and an
optional ``meta.json`` (or ``--metadata FILE``) gives the engine:
``vllm_version``, ``engine_kwargs`` (vLLM's argument names) and ``kv_cache``
(``num_gpu_blocks``, ``block_size``, ``gpu_memory_utilization``,
``enable_prefix_caching``), and ``hardware.device_name``; and ``--prompts FILE`` (a JSONL
of the same requests in order with ``input_tok_ids``) gives prompt identity: requests
with equal token ids send the same prompt. Without token ids every prompt is its own
(a shared prefix shorter than the prompt is not recovered).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import AliasChoices, BeforeValidator, Field

from sim.inputs.textfile import reading
from sim.recorded.engine_args import engine_config, merged
from sim.recorded.fields import Count, Seconds
from sim.recorded.files import Record, parse, read_json, read_json_lines, sha256_of
from sim.recorded.prefixes import DEFAULT_BLOCK_TOKENS, shareable_note, token_blocks
from sim.recorded.run import EngineConfig, RecordedRequests, RecordedRun, RecordError


def _text_or_empty(value: Any) -> Any:
    return "" if value is None else value


class Row(Record):
    """One request of the lifecycle JSONL (module doc: its fields)."""

    queued_ts: Seconds
    first_token_ts: Seconds | None = None
    last_token_ts: Seconds | None = None
    input_toks: Count = Field(
        validation_alias=AliasChoices("input_toks", "prompt_tokens", "input_tokens")
    )
    output_toks: Count = Field(
        validation_alias=AliasChoices("output_toks", "output_tokens", "completion_tokens")
    )
    error: Annotated[str, BeforeValidator(_text_or_empty)] = ""


class KVCacheInfo(Record):
    """meta.json's ``kv_cache``: what the engine logged of its pool (values checked as
    engine arguments)."""

    num_gpu_blocks: Any = None
    block_size: Any = None
    gpu_memory_utilization: Any = None
    enable_prefix_caching: Any = None


class DeviceInfo(Record):
    device_name: str | None = None


def _version_text(value: Any) -> Any:
    # A version written as a number (0.9) is the same version.
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


class Meta(Record):
    """meta.json beside the JSONL (or ``--metadata FILE``)."""

    vllm_version: Annotated[str | None, BeforeValidator(_version_text)] = None
    model: str | None = None
    engine_kwargs: dict[str, Any] | None = None
    kv_cache: KVCacheInfo | None = None
    hardware: DeviceInfo | None = None


class PromptRow(Record):
    """One line of ``--prompts FILE``: the request's prompt token ids."""

    input_tok_ids: list[Annotated[int, Field(ge=0, lt=1 << 31, strict=True)]]


class SeriesRow(Record):
    """One second of LLMServingSim's ``timeseries.csv`` (CSV text: numbers parsed)."""

    t: Annotated[float, Field(allow_inf_nan=False)]
    running: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    waiting: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    gen_throughput: Annotated[float, Field(ge=0, allow_inf_nan=False)]


#: GPU names as CUDA reports them -> pagesim's hardware presets (the first match wins).
DEVICE_NAMES = (
    ("RTX PRO 6000 Blackwell Server", "rtx-pro-6000-server"),
    ("RTX PRO 6000 Blackwell", "rtx-pro-6000"),
    ("RTX 4090", "rtx-4090"),
    ("RTX 5090", "rtx-5090"),
    ("RTX 6000 Ada", "rtx-6000-ada"),
    ("L40S", "l40s"),
    ("L40", "l40"),
    ("A10G", "a10g"),
    ("L4", "l4"),
    ("A40", "a40"),
    ("H100 80GB HBM3", "h100-sxm"),
    ("H100 PCIe", "h100-pcie"),
    ("H100 NVL", "h100-nvl"),
    ("H200", "h200"),
    ("H20", "h20"),
    ("GH200", "gh200"),
    ("B200", "b200"),
    ("A100-SXM4-80GB", "a100-80gb"),
    ("A100-SXM4-40GB", "a100-40gb"),
    ("MI300X", "mi300x"),
)


def hardware_preset(device_name: str | None) -> str | None:
    """The preset for a CUDA device name (``NVIDIA GeForce RTX 4090`` -> ``rtx-4090``)."""
    if not device_name:
        return None
    for fragment, preset in DEVICE_NAMES:
        if fragment.lower() in device_name.lower():
            return preset
    return None


def read_run(
    path: Path,
    *,
    engine: EngineConfig,
    model: str | None,
    hardware: str | None,
    metadata: Path | None = None,
    prompts: Path | None = None,
) -> RecordedRun:
    """The recorded run in lifecycle JSONL ``path`` (module doc)."""
    files = {str(path): sha256_of(path)}
    rows = [(line, row) for line, row in read_json_lines(path)]
    if not rows:
        raise RecordError(f"{path}: no requests")
    meta_path = metadata or (path.parent / "meta.json")
    meta = None
    notes = []
    if meta_path.is_file():
        files[str(meta_path)] = sha256_of(meta_path)
        meta = parse(Meta, read_json(meta_path), str(meta_path))
    elif metadata is not None:
        raise RecordError(f"{metadata}: missing")
    recorded = _engine_of(meta, str(meta_path))
    engine = merged(recorded, engine)
    requests = _requests(rows, str(path))
    if prompts is not None:
        block = engine.block_size or DEFAULT_BLOCK_TOKENS
        chains = token_blocks(_prompt_ids(prompts, len(rows), files), requests.prompt_tokens, block)
        requests = requests._replace(prefix_blocks=chains, prefix_block_tokens=block)
        notes.append(shareable_note(requests, "prompt token ids (--prompts)"))
    notes.append(
        "arrivals are the engine's queued times (first at 0): TTFT and E2E count from the "
        "engine queueing the request, not from the client's send"
    )
    if prompts is None:
        notes.append("no prompt token ids (--prompts): every prompt is its own")
    series = _series(path.parent / "timeseries.csv", files)
    device = meta.hardware.device_name if meta and meta.hardware else None
    return RecordedRun(
        format="lifecycle",
        source=str(path),
        model=model or _model_of(meta),
        hardware=hardware or hardware_preset(device),
        engine=engine,
        requests=requests,
        clock="engine",
        notes=tuple(notes),
        series=series,
        files=files,
    )


def _series(path: Path, files: dict[str, str]) -> dict[str, list[float]] | None:
    """LLMServingSim's ``timeseries.csv`` beside the file (``t, prompt_throughput,
    gen_throughput, running, waiting, kv_cache_pct`` each second), when there is one."""
    import csv

    if not path.is_file():
        return None
    files[str(path)] = sha256_of(path)
    series: dict[str, list[float]] = {"t": [], "running": [], "waiting": [], "gen_tok_s": []}
    with reading(path, RecordError), open(path, encoding="utf-8", newline="") as handle:
        for line, row in enumerate(csv.DictReader(handle), start=2):
            second = parse(SeriesRow, row, f"{path}:{line}")
            series["t"].append(second.t)
            series["running"].append(second.running)
            series["waiting"].append(second.waiting)
            series["gen_tok_s"].append(second.gen_throughput)
    return series


def _model_of(meta: Meta | None) -> str | None:
    if meta is None:
        return None
    named = (meta.engine_kwargs or {}).get("model")
    return meta.model or (named if isinstance(named, str) else None)


def _engine_of(meta: Meta | None, where: str) -> EngineConfig:
    if meta is None:
        return EngineConfig()
    values = dict(meta.engine_kwargs or {})
    values.pop("seed", None)
    if values.pop("data_parallel_size", None) not in (None, 1):
        raise RecordError(
            f"{where}: engine_kwargs.data_parallel_size: data-parallel ranks "
            "that step together (vLLM's DP attention, with expert parallelism "
            "across them) are not replayed: one replica, tensor and expert "
            "parallel within it"
        )
    if meta.kv_cache is not None:
        logged = meta.kv_cache.model_dump(exclude_none=True)
        values.update(logged)
    if meta.vllm_version:
        values["version"] = meta.vllm_version
    return engine_config(values, where)


def _requests(rows: list[tuple[int, Any]], path: str) -> RecordedRequests:
    queued, first, end, prompt, output, errors = [], [], [], [], [], []
    for line, raw in rows:
        where = f"{path}:{line}"
        row = parse(Row, raw, where)
        q, error = row.queued_ts, row.error
        ok = not error
        f = _time(row.first_token_ts, "first_token_ts", where, required=ok)
        e = _time(row.last_token_ts, "last_token_ts", where, required=ok)
        if ok and not q <= f <= e:
            raise RecordError(
                f"{where}: first_token_ts: expected queued_ts <= first_token_ts "
                f"<= last_token_ts, got {q!r}, {f!r}, {e!r}"
            )
        queued.append(q)
        first.append(f)
        end.append(e)
        prompt.append(row.input_toks)
        output.append(row.output_toks)
        errors.append(error[:80])
    origin = min(queued)
    shift = lambda values: np.asarray(values, dtype=np.float64) - origin  # noqa: E731
    return RecordedRequests(
        shift(queued),
        shift(first),
        shift(end),
        np.asarray(prompt, dtype=np.int64),
        np.asarray(output, dtype=np.int64),
        np.full(len(rows), -1, dtype=np.int64),
        tuple(errors),
        None,
    )


def _time(value: float | None, name: str, where: str, *, required: bool) -> float:
    if value is None:
        if required:
            raise RecordError(f"{where}: {name}: missing (a request without an error finished)")
        return math.nan
    return value


def _prompt_ids(path: Path, expected: int, files: dict[str, str]) -> list[np.ndarray]:
    """Each request's ``input_tok_ids``, in order."""
    files[str(path)] = sha256_of(path)
    ids = [
        np.asarray(parse(PromptRow, row, f"{path}:{line}").input_tok_ids, dtype=np.int64)
        for line, row in read_json_lines(path)
    ]
    if len(ids) != expected:
        raise RecordError(
            f"{path}: {len(ids)} prompts for {expected} requests; give the "
            "workload file the run was made from"
        )
    return ids
