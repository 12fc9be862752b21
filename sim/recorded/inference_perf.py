"""kubernetes-sigs/inference-perf's reports: ``pagesim import-run inference-perf DIR``.

DIR is the run's report folder (``stage_N_lifecycle_metrics.json``,
``summary_lifecycle_metrics.json``, ``config.yaml``, optionally
``per_request_lifecycle_metrics.json``) or a folder holding it as ``results/`` or
``inference-perf-data/``. What each file gives:

* ``config.yaml`` (inference-perf's dump of the config it ran; required): the load
  stages (``load.type`` ``constant`` draws exactly ``int(rate x duration)`` arrivals with
  exponential gaps scaled to the stage: ``poisson-count`` here; ``poisson``), the data
  generator (``shared_prefix``: ``num_groups`` x ``num_prompts_per_group`` prompts of a
  ``system_prompt_len``-token system prompt and a ``question_len``-token question, sent
  in turn, so repeats are whole-prompt prefix hits; ``random``/``synthetic``: the
  input and output distributions), ``server.ignore_eos`` and ``load.request_timeout``.
* stage and summary files (required, one of them at least): each stage's published
  TTFT, TPOT, ITL and request latency (mean, median, p90, p99), counts and throughput.
* the per-request file (optional): each request's ``start_time``, ``end_time``,
  ``info.output_token_times`` and ``error``; the replay is then a trace of these requests
  (arrival, prompt identity from the request's text, lengths).

Clocks: every request time is ``time.perf_counter()`` of the client host (CLOCK_MONOTONIC
on Linux: seconds since boot, not the epoch); they are shifted so the first send is 0.

Conversions, each written into the imported run's notes:

* Versions before inference-perf 3631096 (2025-11-14) timestamp every *line* of the
  SSE stream, the blank line after each event included, so a stream of N tokens has
  2N + 2 timestamps: their ``time_per_output_token`` is the decode interval x (N - 1) /
  (2N + 1) and half the inter-token gaps are microseconds. Detected from the ITL
  quantiles (median below a tenth of the mean) or the per-request times (every second
  gap tiny); the TPOT is then scaled back by (2N + 1) / (N - 1) with N the asked output
  length, and the ITL (an artifact) is left out.
* ``prompt_len`` / ``output_len`` are the client's re-tokenisation of the text (BOS
  included; special tokens the engine does not render are lost), not the engine's
  counts. With ``ignore_eos`` the engine generated exactly ``output_len`` (max_tokens)
  tokens, which the replay uses.
* Without ``load.request_timeout`` the client's aiohttp session gives up after its
  default 300 s total: failures clustered there are client timeouts, and the replay
  times requests out alike.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BeforeValidator, Field

from sim.recorded.fields import Count, Published, Seconds
from sim.recorded.files import Record, parse, read_json, read_yaml, sha256_of
from sim.recorded.run import (
    EngineConfig,
    RecordedRequests,
    RecordedRun,
    RecordError,
    StageFigures,
)

#: aiohttp's default ClientTimeout (total, seconds), which inference-perf's client had
#: when ``load.request_timeout`` is unset.
AIOHTTP_DEFAULT_TIMEOUT_S = 300.0

_LATENCIES = {
    "ttft_s": "time_to_first_token",
    "tpot_s": "time_per_output_token",
    "itl_s": "inter_token_latency",
    "e2e_s": "request_latency",
}
_QUANTILE_KEYS = {"mean": "mean", "p50": "median", "p90": "p90", "p99": "p99"}
_STAGE_FILE = re.compile(r"stage_(\d+)_lifecycle_metrics\.json$")


# --------------------------------------------------------------------------------------
# The files, as typed models (what the import reads of each; other keys are ignored)
# --------------------------------------------------------------------------------------

#: A positive finite number (a stage's rate or duration, a length's mean).
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
#: A count of prompts or groups a shared-prefix generator makes.
Prompts = Annotated[Count, Field(ge=1, le=10**6)]


class LoadStage(Record):
    rate: Positive
    duration: Positive


class Load(Record):
    type: Literal["constant", "poisson"] = "constant"
    stages: Annotated[list[LoadStage], Field(min_length=1)]
    request_timeout: Published = None


class SharedPrefix(Record):
    num_groups: Prompts
    num_prompts_per_group: Prompts
    system_prompt_len: Count
    question_len: Annotated[Count, Field(ge=1)]
    output_len: Annotated[Count, Field(ge=1)]


class LengthSpread(Record):
    """inference-perf's ``{min, max, mean, std_dev}`` of a random generator's lengths."""

    mean: Annotated[float, Field(ge=1, allow_inf_nan=False)]
    std_dev: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    min: Published = None
    max: Published = None


class Data(Record):
    type: str | None = None
    shared_prefix: SharedPrefix | None = None
    input_distribution: LengthSpread | None = None
    output_distribution: LengthSpread | None = None


class Server(Record):
    model_name: str | None = None
    ignore_eos: bool = False


class Config(Record):
    """config.yaml: inference-perf's dump of the configuration it ran."""

    load: Load
    data: Data
    server: Server | None = None


class Quantiles(Record):
    mean: Published = None
    median: Published = None
    p90: Published = None
    p99: Published = None


class Latencies(Record):
    time_to_first_token: Quantiles | None = None
    time_per_output_token: Quantiles | None = None
    inter_token_latency: Quantiles | None = None
    request_latency: Quantiles | None = None


class Throughput(Record):
    requests_per_sec: Published = None
    output_tokens_per_sec: Published = None


class Successes(Record):
    count: Count | None = None
    latency: Latencies | None = None
    throughput: Throughput | None = None
    prompt_len: Quantiles | None = None


class Failures(Record):
    count: Count | None = None


class LoadSummary(Record):
    count: Count | None = None
    requested_rate: Published = None
    send_duration: Published = None


class Report(Record):
    """A stage_N_lifecycle_metrics.json or summary_lifecycle_metrics.json."""

    load_summary: LoadSummary | None = None
    successes: Successes
    failures: Failures | None = None


def _failure_kind(value: Any) -> str:
    """A request's ``error``: null (a success), the message itself (some versions) or
    ``{error_type, ...}``; its kind, at most 80 characters ('' for a success)."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        return value[:80]
    if isinstance(value, dict):
        return str(value.get("error_type", "error"))[:80]
    raise ValueError(f"expected null, a message or an object with error_type, got {value!r}"[:120])


class RequestInfo(Record):
    output_token_times: list[Seconds] | None = None
    input_tokens: Count = 0
    output_tokens: Count = 0


class RequestRecord(Record):
    """One entry of per_request_lifecycle_metrics.json."""

    start_time: Seconds
    end_time: Seconds
    info: RequestInfo | None = None
    error: Annotated[str, BeforeValidator(_failure_kind)] = ""
    request: Any = None


def report_folder(path: Path) -> Path:
    """The folder holding the report files: ``path`` or its ``results/`` or
    ``inference-perf-data/``."""
    for candidate in (path, path / "results", path / "inference-perf-data"):
        if (candidate / "config.yaml").is_file():
            return candidate
    raise RecordError(
        f"{path}: no inference-perf report here (expected config.yaml beside "
        "stage_N_lifecycle_metrics.json, or in results/)"
    )


def read_run(path: Path, *, engine: EngineConfig, model: str | None,
             hardware: str | None) -> RecordedRun:  # fmt: skip
    """The recorded run in inference-perf's report folder ``path`` (module doc)."""
    folder = report_folder(path)
    files: dict[str, str] = {}
    config_path = folder / "config.yaml"
    config = parse(Config, read_yaml(config_path), str(config_path))
    files[str(config_path)] = sha256_of(config_path)
    workload, out_len, notes = _workload(config, str(config_path))
    stages = []
    for stage_path in sorted(folder.glob("stage_*_lifecycle_metrics.json"), key=_stage_index):
        files[str(stage_path)] = sha256_of(stage_path)
        report = parse(Report, read_json(stage_path), str(stage_path))
        stages.append(_figures(report, _stage_index(stage_path), str(stage_path)))
    summary = None
    summary_path = folder / "summary_lifecycle_metrics.json"
    if summary_path.is_file():
        files[str(summary_path)] = sha256_of(summary_path)
        report = parse(Report, read_json(summary_path), str(summary_path))
        summary = _figures(report, -1, str(summary_path))
    if not stages and summary is None:
        raise RecordError(f"{folder}: no stage_N_lifecycle_metrics.json nor a summary")
    _attach_stage_load(stages, workload, str(config_path))
    notes += _measured_prompt_length(workload, summary or (stages[0] if stages else None))
    requests = None
    per_request = folder / "per_request_lifecycle_metrics.json"
    if per_request.is_file():
        files[str(per_request)] = sha256_of(per_request)
        requests, line_times = _requests(read_json(per_request), str(per_request), out_len)
    else:
        line_times = any(_line_timestamps(s) for s in (*stages, summary) if s is not None)
    if line_times:
        stages = [_per_token(s, out_len) for s in stages]
        summary = _per_token(summary, out_len) if summary is not None else None
        notes.append(
            "inference-perf timestamped every SSE line (versions before 3631096): TPOT scaled "
            f"by (2N + 1) / (N - 1) with N = {out_len}, ITL left out"
        )
    timeout, timeout_note = _timeout(config, stages, summary)
    notes += [timeout_note] if timeout_note else []
    return RecordedRun(
        format="inference-perf", source=str(path), model=model or _model(config),
        hardware=hardware, engine=engine, requests=requests, stages=tuple(stages),
        summary=summary, workload=workload if requests is None else None,
        request_timeout_s=timeout, notes=tuple(notes), files=files,
        origins=_origins(config, config_path.name),
    )  # fmt: skip


def _origins(config: Config, name: str) -> dict[str, str]:
    """The replay's workload fields -> the config.yaml fields they are made from."""
    origins = {
        "workload.arrival": f"{name}: load",
        "workload.request_timeout_s": f"{name}: load.request_timeout",
        "workload.prompts": f"{name}: data.shared_prefix (num_groups x num_prompts_per_group)",
        "workload.prefix": f"{name}: data.shared_prefix",
        "workload.input": f"{name}: data",
        "workload.output": f"{name}: data",
    }
    for i in range(len(config.load.stages)):
        at = f"workload.arrival.stages[{i}]"
        origins[f"{at}.rate_rps"] = f"{name}: load.stages[{i}].rate"
        origins[f"{at}.duration_s"] = f"{name}: load.stages[{i}].duration"
    return origins


def _stage_index(path: Path) -> int:
    match = _STAGE_FILE.search(path.name)
    return int(match.group(1)) if match else 1 << 30


def _model(config: Config) -> str | None:
    return config.server.model_name if config.server else None


def _workload(config: Config, where: str) -> tuple[dict[str, Any], int | None, list[str]]:
    """The scenario ``workload`` that regenerates the run's requests, the output length
    every request was asked for (None if it varied), and notes."""
    kind = config.load.type
    rows = [{"rate_rps": s.rate, "duration_s": s.duration} for s in config.load.stages]
    process = "poisson-count" if kind == "constant" else "poisson"
    arrival = {"kind": "stages", "process": process, "stages": rows}
    data = config.data
    ignore_eos = config.server.ignore_eos if config.server else False
    notes = [f"load.type {kind}: {process} arrivals in {len(rows)} stage(s)"]
    if data.type == "shared_prefix":
        shared = data.shared_prefix
        if shared is None:
            raise RecordError(f"{where}: data.shared_prefix: missing")
        groups, per_group = shared.num_groups, shared.num_prompts_per_group
        system, question, out = shared.system_prompt_len, shared.question_len, shared.output_len
        notes.append(
            f"shared_prefix: {groups} x {per_group} prompts ({system}-token system prompt, "
            f"{question}-token question) sent in turn"
        )
        workload = {
            "arrival": arrival,
            "input": question,
            "output": out,
            "prompts": {"distinct": groups * per_group, "order": "cycle"},
        }
        if system:
            workload["prefix"] = {"num_groups": groups, "length": system}
        return workload, (out if ignore_eos else None), notes
    if data.type in ("random", "synthetic"):
        lengths = {role: _distribution(getattr(data, f"{role}_distribution"), where,
                                       f"data.{role}") for role in ("input", "output")}  # fmt: skip
        fixed = lengths["output"] if isinstance(lengths["output"], int) else None
        return {"arrival": arrival, **lengths}, (fixed if ignore_eos else None), notes
    raise RecordError(
        f"{where}: data.type: expected shared_prefix, random or synthetic (the generators "
        f"a replay can regenerate), got {data.type!r}; record per-request metrics "
        "(report.request_lifecycle.per_request) to replay any other"
    )


def _distribution(spec: LengthSpread | None, where: str, field: str) -> Any:
    """inference-perf's {min, max, mean, std_dev} as a length: fixed when it cannot vary,
    else a lognormal of that mean and spread (its draws are clipped to [min, max])."""
    if spec is None:
        raise RecordError(f"{where}: {field}_distribution: missing")
    mean, spread = spec.mean, spec.std_dev
    low = spec.min if spec.min is not None else mean
    high = spec.max if spec.max is not None else mean
    if not spread or low == high:
        return max(1, round(mean))
    return {"kind": "lognormal", "mean": mean, "cv": min(spread / mean, 100.0)}


def _figures(report: Report, index: int, where: str) -> StageFigures:
    """One stage's (or the summary's) published figures."""
    ok = report.successes
    load = report.load_summary or LoadSummary()
    latency = {}
    for metric, key in _LATENCIES.items():
        table = getattr(ok.latency, key) if ok.latency else None
        if table is not None:
            values = {q: getattr(table, k) for q, k in _QUANTILE_KEYS.items()}
            latency[metric] = {q: v for q, v in values.items() if v is not None}
    throughput = ok.throughput or Throughput()
    sent = load.count if load.count is not None else (ok.count or 0)
    failures = (report.failures.count if report.failures else None) or 0
    if failures > sent:  # else the run would report fewer than no finished requests
        raise RecordError(f"{where}: failures.count: {failures} failures of {sent} requests")
    return StageFigures(
        index=index,
        rate_rps=load.requested_rate,
        duration_s=load.send_duration,
        sent=sent,
        failed=failures,
        latency=latency,
        throughput_rps=throughput.requests_per_sec,
        output_tok_s=throughput.output_tokens_per_sec,
        prompt_tokens_p50=ok.prompt_len.median if ok.prompt_len else None,
    )


def _attach_stage_load(stages: list[StageFigures], workload: dict, where: str) -> None:
    rows = workload["arrival"]["stages"]
    if stages and len(stages) != len(rows):
        raise RecordError(
            f"{where}: load.stages: {len(rows)} stage(s) configured but "
            f"{len(stages)} stage_N_lifecycle_metrics.json file(s) found"
        )


def _measured_prompt_length(workload: dict, figures: StageFigures | None) -> list[str]:
    """A shared-prefix question of ``question_len`` random ids is decoded to text and
    tokenised again by the engine, which does not give the same count back (and adds a
    BOS): the replay's own length is the measured median prompt less the system prompt."""
    if "prompts" not in workload or figures is None or figures.prompt_tokens_p50 is None:
        return []
    system = (workload.get("prefix") or {}).get("length", 0)
    asked = workload["input"]
    workload["input"] = max(1, round(figures.prompt_tokens_p50) - system)
    return [
        f"prompt length {round(figures.prompt_tokens_p50)} tokens as measured (median; "
        f"{system} system + {workload['input']} own), not {system} + {asked} as configured: "
        "decoded random ids tokenise again to more tokens, BOS included"
    ]


def _line_timestamps(figures: StageFigures) -> bool:
    itl = figures.latency.get("itl_s", {})
    return "p50" in itl and "mean" in itl and itl["p50"] < 0.1 * itl["mean"]


def _per_token(figures: StageFigures, out_len: int | None) -> StageFigures:
    """TPOT scaled from per-line to per-token intervals; the ITL dropped."""
    latency = dict(figures.latency)
    latency.pop("itl_s", None)
    if out_len is not None and out_len > 1 and "tpot_s" in latency:
        scale = (2 * out_len + 1) / (out_len - 1)
        latency["tpot_s"] = {q: v * scale for q, v in latency["tpot_s"].items()}
    else:
        latency.pop("tpot_s", None)  # no known N: no faithful conversion
    return StageFigures(**{**figures.__dict__, "latency": latency})


def _timeout(config: Config, stages, summary) -> tuple[float | None, str | None]:
    asked = config.load.request_timeout
    if asked is not None:
        return asked, f"load.request_timeout {asked:g} s: the replay times requests out alike"
    failed = sum(s.failed for s in stages) if stages else (summary.failed if summary else 0)
    if failed:
        return AIOHTTP_DEFAULT_TIMEOUT_S, (
            f"{failed} failed request(s) and no load.request_timeout: the client's aiohttp "
            f"default {AIOHTTP_DEFAULT_TIMEOUT_S:g} s total timeout is assumed"
        )
    return AIOHTTP_DEFAULT_TIMEOUT_S, None


def _requests(records: Any, where: str, out_len: int | None):
    """RecordedRequests from the per-request file, and whether its token times are per
    SSE line (two a token)."""
    if not isinstance(records, list) or not records:
        raise RecordError(f"{where}: expected a non-empty list of request records")
    send, first, end, prompt, output, keys, errors, times = [], [], [], [], [], [], [], []
    line_pairs = []
    for i, raw in enumerate(records):
        at = f"{where}: record {i}"
        record = parse(RequestRecord, raw, at)
        start, stop = record.start_time, record.end_time
        if stop < start:
            raise RecordError(f"{at}: end_time: before start_time ({stop!r} < {start!r})")
        info = record.info or RequestInfo()
        stamps = np.asarray(info.output_token_times or [], dtype=np.float64)
        if stamps.size and (np.any(np.diff(stamps) < 0) or stamps[0] < start):
            raise RecordError(f"{at}: info.output_token_times: not increasing from start_time")
        line_pairs.append(_paired(stamps))
        send.append(start)
        end.append(stop)
        first.append(float(stamps[0]) if stamps.size else np.nan)
        times.append(stamps)
        prompt.append(info.input_tokens)
        output.append(info.output_tokens)
        keys.append(_prompt_key(record.request))
        errors.append(record.error)
    line_times = bool(line_pairs) and np.mean(line_pairs) > 0.5
    if line_times:  # keep one time a token: the data lines (even indices), not [DONE]
        times = [t[0:-2:2] if t.size >= 2 else t for t in times]
    if out_len is not None:
        output = [out_len if not e else n for n, e in zip(output, errors)]
    origin = min(send)
    shift = lambda values: np.asarray(values, dtype=np.float64) - origin  # noqa: E731
    requests = RecordedRequests(
        shift(send), shift(first), shift(end), np.asarray(prompt, dtype=np.int64),
        np.asarray(output, dtype=np.int64), np.full(len(send), -1, dtype=np.int64),
        tuple(errors), tuple(keys), tuple(t - origin for t in times),
    )  # fmt: skip
    return requests, line_times


def _paired(stamps: np.ndarray) -> bool:
    """Whether a stream's times come two a line pair (an event's data line, then its blank
    line microseconds later): every gap from a data line to its blank one far shorter
    than the gaps between events."""
    gaps = np.diff(stamps)
    if gaps.size < 4:
        return False
    within, between = gaps[0::2], gaps[1::2]
    return bool(np.median(within) < 0.05 * max(np.median(between), 1e-12))


def _prompt_key(request: Any) -> str:
    """A digest of the request's prompt (its payload's ``prompt`` or ``messages``)."""
    if not isinstance(request, str):
        return ""
    try:
        payload = json.loads(request)
    except ValueError:
        payload = request
    text = payload.get("prompt", payload.get("messages")) if isinstance(payload, dict) else payload
    if text is None:
        return ""
    blob = text if isinstance(text, str) else json.dumps(text, sort_keys=True)
    return hashlib.blake2b(blob.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()
