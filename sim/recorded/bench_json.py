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

import math
from pathlib import Path
from typing import Any

import numpy as np

from sim.recorded.engine_args import engine_config, is_engine_argument, merged
from sim.recorded.files import count, number, read_json, read_json_lines, sha256_of
from sim.recorded.lifecycle import hardware_preset
from sim.recorded.run import EngineConfig, RecordedRequests, RecordedRun, RecordError

_LISTS = ("input_lens", "output_lens", "ttfts", "itls", "errors")
_DEFAULT_SEED = {"vllm-bench": 0, "sglang-bench": 1}
#: Result keys that are not metadata (everything else a vLLM file holds at the top level
#: and is a string is a ``--metadata`` entry).
_RESULT_KEYS = {"date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id",
                "dataset_name", "tag", "server_info"}  # fmt: skip


def read_run(path: Path, fmt: str, *, engine: EngineConfig, model: str | None,
             hardware: str | None, metadata: Path | None = None) -> RecordedRun:  # fmt: skip
    """The recorded run in ``path`` (module doc)."""
    files = {str(path): sha256_of(path)}
    result = _result(path)
    where = str(path)
    lists = {key: result.get(key) for key in _LISTS}
    missing = [key for key, value in lists.items() if not isinstance(value, list)]
    if missing:
        flag = "--save-detailed" if fmt == "vllm-bench" else "--output-details"
        raise RecordError(f"{where}: {missing[0]}: missing; a replay needs the per-request "
                          f"lists the client writes with {flag}")  # fmt: skip
    size = len(lists["ttfts"])
    for key, value in lists.items():
        if len(value) != size:
            raise RecordError(f"{where}: {key}: {len(value)} entries, ttfts has {size}")
    if size == 0:
        raise RecordError(f"{where}: ttfts: no requests")
    meta = {k: v for k, v in result.items() if isinstance(v, str) and k not in _RESULT_KEYS}
    if metadata is not None:
        files[str(metadata)] = sha256_of(metadata)
        extra = read_json(metadata) if metadata.suffix == ".json" else None
        if not isinstance(extra, dict):
            raise RecordError(f"{metadata}: expected a JSON object of engine arguments")
        meta.update(extra)
    notes: list[str] = []
    send = _send_times(result, fmt, size, meta, where, notes)
    gpu = meta.pop("gpu", None) or meta.pop("hardware", None)
    seed = meta.pop("seed", None)
    del seed  # used by _send_times already
    recorded = engine_config({k: v for k, v in meta.items() if is_engine_argument(k)}, where)
    requests = _requests(lists, result.get("latencies"), send, where)
    return RecordedRun(
        format=fmt, source=str(path), model=model or result.get("model_id"),
        hardware=hardware or hardware_preset(gpu) or gpu, engine=merged(recorded, engine),
        requests=requests, notes=tuple(notes), files=files,
    )  # fmt: skip


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


def _send_times(result, fmt, size, meta, where, notes) -> np.ndarray:
    starts = result.get("start_times")
    if isinstance(starts, list):
        if len(starts) != size:
            raise RecordError(f"{where}: start_times: {len(starts)} entries for {size} requests")
        values = np.asarray([_seconds(v, where, "start_times") for v in starts])
        notes.append("send times from start_times (the client's perf_counter), first at 0")
        return values - values.min()
    rate = result.get("request_rate")
    rate = math.inf if rate in ("inf", None) or rate == math.inf else rate
    if not math.isinf(rate):  # a finite rate a client can send at (NaN and 1e308 are not)
        rate = number(rate, where, "request_rate", low=1e-9, high=1e6)
    if result.get("max_concurrency") not in (None, 0):
        raise RecordError(
            f"{where}: max_concurrency: sends waited for a free slot and the file has no "
            "start_times, so the arrivals cannot be regenerated"
        )
    if math.isinf(rate):
        notes.append("request_rate inf: every request sent at 0")
        return np.zeros(size)
    seed = meta.get("seed", _DEFAULT_SEED[fmt])
    decimal = isinstance(seed, str) and seed.isdecimal() and len(seed) <= 12
    seed = count(int(seed) if decimal else seed, where,
                 "seed", high=2**32 - 1)  # fmt: skip
    burst = number(result.get("burstiness", 1.0) or 1.0, where, "burstiness", low=1e-3,
                   high=1e3)  # fmt: skip
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


def _seconds(value: Any, where: str, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RecordError(f"{where}: {field}: expected finite seconds, got {value!r}"[:200])
    return float(value)


def _requests(lists, latencies, send: np.ndarray, where: str) -> RecordedRequests:
    size = send.shape[0]
    first, end, prompt, output, errors, times = [], [], [], [], [], []
    for i in range(size):
        error = lists["errors"][i] or ""
        if not isinstance(error, str):
            raise RecordError(f"{where}: errors[{i}]: expected a string")
        ttft = _seconds(lists["ttfts"][i], where, f"ttfts[{i}]")
        gaps = lists["itls"][i]
        if not isinstance(gaps, list):
            raise RecordError(f"{where}: itls[{i}]: expected a list of seconds")
        gaps = np.asarray([_seconds(g, where, f"itls[{i}]") for g in gaps])
        if ttft < 0 or np.any(gaps < 0):
            raise RecordError(f"{where}: ttfts[{i}]: negative time")
        ok = not error
        start = float(send[i])
        stamps = start + ttft + np.concatenate([[0.0], np.cumsum(gaps)]) if ok else np.zeros(0)
        total = start + ttft + float(gaps.sum())
        if ok and isinstance(latencies, list) and i < len(latencies):
            total = start + _seconds(latencies[i], where, f"latencies[{i}]")
        first.append(start + ttft if ok else math.nan)
        end.append(total if ok else math.nan)
        prompt.append(_tokens(lists["input_lens"][i], where, f"input_lens[{i}]"))
        output.append(_tokens(lists["output_lens"][i], where, f"output_lens[{i}]"))
        errors.append(_error_kind(error))
        times.append(stamps)
    return RecordedRequests(
        send, np.asarray(first), np.asarray(end), np.asarray(prompt, dtype=np.int64),
        np.asarray(output, dtype=np.int64), np.full(size, -1, dtype=np.int64),
        tuple(errors), ("",) * size, tuple(times),
    )  # fmt: skip


def _error_kind(error: str) -> str:
    """A failure's one-line kind: the last line of its text (a traceback's exception)."""
    lines = error.strip().splitlines()
    return (lines[-1][:80] if lines else "error") if error else ""


def _tokens(value: Any, where: str, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1 << 40:
        raise RecordError(f"{where}: {field}: expected a token count, got {value!r}"[:200])
    return value
