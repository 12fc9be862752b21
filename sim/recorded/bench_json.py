"""Benchmark clients' result files: ``vllm bench serve --save-result --save-detailed``
(one JSON object; ``--append-result`` lines read too) and SGLang's ``bench_serving
--output-file ... --output-details`` (JSON lines, NaN and Infinity allowed as it writes
them): the last result with per-request lists is read. ``pagesim import-run
vllm-bench|sglang-bench FILE``.

What each needs:

* the per-request lists (``--save-detailed`` / ``--output-details``): ``input_lens``,
  ``output_lens``, ``ttfts`` (seconds), ``itls`` (seconds, gaps between streamed chunks)
  and ``errors`` ('' for a success). Without them there is nothing to replay (one line
  says so);
* send times: vLLM's ``start_times`` (since vllm#32667, 2026-01; the client's
  ``time.perf_counter()``, shifted so the first send is 0). Files without them (older
  vLLM, every SGLang) get their arrivals *regenerated* from ``request_rate``,
  ``burstiness`` and the seed (``seed`` in the file's metadata, else the client's
  default: vLLM 0, SGLang 1) as the client draws them: vLLM since #21108 (2025-07) draws
  all gaps from numpy's legacy generator as gamma(burstiness) and scales them to end at
  N / rate; SGLang sends the first at 0 and then exponential gaps. Only the arrival
  *process* is then the same, not each instant (the note says so), and a
  ``max_concurrency`` client, whose sends wait for a free slot, cannot be regenerated.
* engine arguments: the ``--metadata KEY=VALUE`` entries of vLLM's file (vLLM's names,
  e.g. ``tensor_parallel_size=2``), a ``--metadata FILE`` of the same, or
  ``--engine-args``. ``gpu`` or ``hardware`` there names the GPU.

A request's first token is its send plus its TTFT and its end the send plus its TTFT
plus its ITL gaps (``latencies`` where the file has them); its output length is
``output_lens`` (the server's usage count where the client read one).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BeforeValidator, Field

from sim.recorded.bench_aggregates import Burstiness, SendRate, aggregate_run
from sim.recorded.engine_args import engine_config, is_engine_argument, merged
from sim.recorded.fields import Count, Elapsed, Published, Seconds
from sim.recorded.files import Record, parse, parse_value, read_json, read_json_lines, sha256_of
from sim.recorded.lifecycle import hardware_preset
from sim.recorded.run import EngineConfig, RecordedRequests, RecordedRun, RecordError

_LISTS = ("input_lens", "output_lens", "ttfts", "itls", "errors")
_DEFAULT_SEED = {"vllm-bench": 0, "sglang-bench": 1}
#: Result keys that are not metadata (everything else a vLLM file holds at the top level
#: and is a string is a ``--metadata`` entry).
_RESULT_KEYS = {
    "date",
    "endpoint_type",
    "backend",
    "label",
    "model_id",
    "tokenizer_id",
    "dataset_name",
    "tag",
    "server_info",
}


def _no_failure(value: Any) -> Any:
    return "" if value is None else value


class Result(Record):
    """One benchmark result object (module doc: what each list holds)."""

    input_lens: list[Count]
    output_lens: list[Count]
    ttfts: list[Elapsed]
    itls: list[list[Elapsed]]
    errors: list[Annotated[str, BeforeValidator(_no_failure)]]
    start_times: list[Seconds] | None = None
    latencies: list[Published] | None = None
    request_rate: SendRate = math.inf
    burstiness: Burstiness = 1.0
    max_concurrency: Count | None = None
    model_id: str | None = None


#: A client's random seed (numpy's legacy generator takes 32 bits); a decimal string is
#: the number (vllm bench --metadata writes every value as text).
Seed = Annotated[Count, Field(le=2**32 - 1)]


def read_run(
    path: Path,
    fmt: str,
    *,
    engine: EngineConfig,
    model: str | None,
    hardware: str | None,
    metadata: Path | None = None,
) -> RecordedRun:
    """The recorded run in ``path`` (module doc)."""
    files = {str(path): sha256_of(path)}
    raw = _result(path)
    where = str(path)
    meta = {k: v for k, v in raw.items() if isinstance(v, str) and k not in _RESULT_KEYS}
    # The file's --metadata entries are any KEY=VALUE a user typed: its engine arguments
    # are read, the rest kept as the client kept them.
    recorded = engine_config({k: v for k, v in meta.items() if is_engine_argument(k)}, where)
    if metadata is not None:
        files[str(metadata)] = sha256_of(metadata)
        given, context = _metadata_file(metadata)
        recorded = merged(recorded, given)
        meta.update(context)
    gpu = meta.get("gpu") or meta.get("hardware")
    run = RecordedRun(
        format=fmt,
        source=str(path),
        model=model,
        engine=merged(recorded, engine),
        hardware=hardware or hardware_preset(gpu) or gpu,
        files=files,
    )
    if all(raw.get(key) is None for key in _LISTS):
        return aggregate_run(raw, run, where)
    missing = [key for key in _LISTS if raw.get(key) is None]
    if missing:
        flag = "--save-detailed" if fmt == "vllm-bench" else "--output-details"
        raise RecordError(
            f"{where}: {missing[0]}: missing; a replay needs every per-request "
            f"list the client writes with {flag}, or none (aggregates)"
        )
    result = parse(Result, raw, where)
    size = len(result.ttfts)
    for key in _LISTS:
        if len(getattr(result, key)) != size:
            raise RecordError(
                f"{where}: {key}: {len(getattr(result, key))} entries, ttfts has {size}"
            )
    if size == 0:
        raise RecordError(f"{where}: ttfts: no requests")
    notes: list[str] = []
    send = _send_times(result, fmt, size, meta, where, notes)
    return dataclasses.replace(
        run,
        model=model or result.model_id,
        notes=tuple(notes),
        requests=_requests(result, send, where),
    )


def _metadata_file(path: Path) -> tuple[EngineConfig, dict[str, Any]]:
    """``--metadata FILE``: a JSON object of engine arguments, each one pagesim maps (an
    unknown name is an error, naming this file), and the run's ``gpu``, ``hardware`` and
    ``seed``."""
    values = read_json(path) if path.suffix == ".json" else None
    if not isinstance(values, dict):
        raise RecordError(f"{path}: expected a JSON object of engine arguments")
    context = {k: values.pop(k) for k in ("gpu", "hardware", "seed") if k in values}
    return engine_config(values, str(path)), context


def _result(path: Path) -> dict[str, Any]:
    """The file's one result object (the last line of a JSON-lines file)."""
    text_json = path.suffix == ".json"
    try:
        value = read_json(path) if text_json else None
    except RecordError:
        value = None  # appended results: JSON lines
    if value is None:
        rows = [row for _, row in read_json_lines(path, finite=False)]
        if not rows:
            raise RecordError(f"{path}: no result")
        detailed = [row for row in rows if isinstance(row, dict) and "ttfts" in row]
        value = (detailed or rows)[-1]  # the last run with per-request lists
    if not isinstance(value, dict):
        raise RecordError(f"{path}: expected a JSON object of results")
    return value


def _send_times(result: Result, fmt, size, meta, where, notes) -> np.ndarray:
    starts = result.start_times
    if starts is not None:
        if len(starts) != size:
            raise RecordError(f"{where}: start_times: {len(starts)} entries for {size} requests")
        values = np.asarray(starts, dtype=np.float64)
        notes.append("send times from start_times (the client's perf_counter), first at 0")
        return values - values.min()
    rate = result.request_rate
    if result.max_concurrency not in (None, 0):
        raise RecordError(
            f"{where}: max_concurrency: sends waited for a free slot and the file has no "
            "start_times, so the arrivals cannot be regenerated"
        )
    if math.isinf(rate):
        notes.append("request_rate inf: every request sent at 0")
        return np.zeros(size)
    seed = parse_value(Seed, meta.get("seed", _DEFAULT_SEED[fmt]), where, "seed")
    burst = result.burstiness
    state = np.random.RandomState(seed)
    if fmt == "vllm-bench":
        gaps = state.gamma(shape=burst, scale=1.0 / (rate * burst), size=size)
        times = np.cumsum(gaps)
        times *= (size / rate) / times[-1]
    else:
        times = np.concatenate([[0.0], np.cumsum(state.exponential(1.0 / rate, size - 1))])
    notes.append(
        f"no send times recorded: arrivals regenerated at {rate:g} req/s (burstiness "
        f"{burst:g}, seed {seed}) as the client draws them; the process, not each instant"
    )
    return times - times.min()


def _requests(result: Result, send: np.ndarray, where: str) -> RecordedRequests:
    size = send.shape[0]
    first, end, errors, times = [], [], [], []
    for i in range(size):
        error = result.errors[i]
        ttft, gaps = result.ttfts[i], np.asarray(result.itls[i], dtype=np.float64)
        ok = not error
        start = float(send[i])
        stamps = start + ttft + np.concatenate([[0.0], np.cumsum(gaps)]) if ok else np.zeros(0)
        total = start + ttft + float(gaps.sum())
        latency = result.latencies[i] if result.latencies and i < len(result.latencies) else None
        if ok and latency is not None:
            total = start + latency
        first.append(start + ttft if ok else math.nan)
        end.append(total if ok else math.nan)
        errors.append(_error_kind(error))
        times.append(stamps)
    return RecordedRequests(
        send,
        np.asarray(first),
        np.asarray(end),
        np.asarray(result.input_lens, dtype=np.int64),
        np.asarray(result.output_lens, dtype=np.int64),
        np.full(size, -1, dtype=np.int64),
        tuple(errors),
        tuple(times),
    )


def _error_kind(error: str) -> str:
    """A failure's one-line kind: the last line of its text (a traceback's exception)."""
    lines = error.strip().splitlines()
    return (lines[-1][:80] if lines else "error") if error else ""
