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

import re
from pathlib import Path

from sim.recorded.files import parse, read_json, read_yaml, sha256_of
from sim.recorded.inference_perf.config import Config, model_name, origins, replay_workload
from sim.recorded.inference_perf.records import requests_of
from sim.recorded.inference_perf.reports import Report, figures, line_timestamps, per_token
from sim.recorded.prefixes import DEFAULT_BLOCK_TOKENS, shareable_note
from sim.recorded.run import EngineConfig, RecordedRun, RecordError, StageFigures

#: aiohttp's default ClientTimeout (total, seconds), which inference-perf's client had
#: when ``load.request_timeout`` is unset.
AIOHTTP_DEFAULT_TIMEOUT_S = 300.0

_STAGE_FILE = re.compile(r"stage_(\d+)_lifecycle_metrics\.json$")


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


def read_run(
    path: Path, *, engine: EngineConfig, model: str | None, hardware: str | None
) -> RecordedRun:
    """The recorded run in inference-perf's report folder ``path`` (module doc)."""
    folder = report_folder(path)
    files: dict[str, str] = {}
    config_path = folder / "config.yaml"
    config = parse(Config, read_yaml(config_path), str(config_path))
    files[str(config_path)] = sha256_of(config_path)
    workload, out_len, notes = replay_workload(config, str(config_path))
    stages = []
    for stage_path in sorted(folder.glob("stage_*_lifecycle_metrics.json"), key=_stage_index):
        files[str(stage_path)] = sha256_of(stage_path)
        report = parse(Report, read_json(stage_path), str(stage_path))
        stages.append(figures(report, _stage_index(stage_path), str(stage_path)))
    summary = None
    summary_path = folder / "summary_lifecycle_metrics.json"
    if summary_path.is_file():
        files[str(summary_path)] = sha256_of(summary_path)
        report = parse(Report, read_json(summary_path), str(summary_path))
        summary = figures(report, -1, str(summary_path))
    if not stages and summary is None:
        raise RecordError(f"{folder}: no stage_N_lifecycle_metrics.json nor a summary")
    _attach_stage_load(stages, workload, str(config_path))
    notes += _measured_prompt_length(workload, summary or (stages[0] if stages else None))
    requests = None
    per_request = folder / "per_request_lifecycle_metrics.json"
    if per_request.is_file():
        files[str(per_request)] = sha256_of(per_request)
        block = engine.block_size or DEFAULT_BLOCK_TOKENS
        requests, line_times = requests_of(read_json(per_request), str(per_request), out_len, block)
        if requests.prefix_blocks is not None:
            notes.append(shareable_note(requests, "prompt text (the records' request payloads)"))
    else:
        line_times = any(line_timestamps(s) for s in (*stages, summary) if s is not None)
    if line_times:
        stages = [per_token(s, out_len) for s in stages]
        summary = per_token(summary, out_len) if summary is not None else None
        notes.append(
            "inference-perf timestamped every SSE line (versions before 3631096): TPOT scaled "
            f"by (2N + 1) / (N - 1) with N = {out_len}, ITL left out"
        )
    timeout, timeout_note = _timeout(config, stages, summary)
    notes += [timeout_note] if timeout_note else []
    return RecordedRun(
        format="inference-perf",
        source=str(path),
        model=model or model_name(config),
        hardware=hardware,
        engine=engine,
        requests=requests,
        stages=tuple(stages),
        summary=summary,
        workload=workload if requests is None else None,
        request_timeout_s=timeout,
        notes=tuple(notes),
        files=files,
        origins=origins(config, config_path.name),
    )


def _stage_index(path: Path) -> int:
    match = _STAGE_FILE.search(path.name)
    return int(match.group(1)) if match else 1 << 30


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
