"""An observed run: what a live endpoint did with a scenario's requests, in the files
of a simulated run, so ``pagesim compare`` and the report read it unchanged.

requests.csv, summary.json and report.html come from the same code as a simulation's
(sim.output), fed with one :class:`~sim.engine.records.RequestOutcome` per request:

* ``arrival_s`` is when the request was *sent* (what the server saw; TTFT counts from
  it, as in ``vllm bench serve``), ``first_token_s`` / ``finish_s`` when its first token
  and its ``[DONE]`` came; times are seconds since the replay started.
* a request that failed has the failure's kind as ``rejected_reason`` (``http 500``,
  ``timeout``, ...: sim.live.client), so summary.json's ``rejected_reasons`` counts
  them per kind; one still running at the time limit is ``unfinished at time limit``.
* ``output_tokens`` is what arrived; a finished request's output length is what each
  sample streamed (its TPOT divides by that, not by what was asked).
* the client cannot see the server's steps, preemptions or scheduling: steps.csv has
  its header only, ``first_scheduled_s`` is empty and ``preemptions`` 0, and the KV
  figures are empty. The prefix hit rate is left empty too; prompt tokens the server
  reported as cached are in summary.json's ``observed`` block.

The run folder also holds ``observed.csv`` (each request's schedule, send, first token,
end, tokens, what the server reported and the error's detail) and ``tokens.csv`` (every
token's arrival: request, choice, seconds), which ``pagesim calibrate --observed`` fits.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sim.engine.records import RequestOutcome
from sim.live.client import Attempt
from sim.live.replay import ReplayOptions, ReplayResult
from sim.output.files import write_outputs
from sim.output.report import write_report
from sim.output.steplog import StepLog
from sim.output.summary import summarize
from sim.run.folders import atomic_folder, run_metadata
from sim.workload.request import Request

OBSERVED_COLUMNS = (
    "req_id",
    "scheduled_s",
    "send_s",
    "first_token_s",
    "end_s",
    "token_events",
    "completion_tokens",
    "prompt_tokens",
    "cached_tokens",
    "error",
    "detail",
)


def outcome_of(request: Request, attempt: Attempt) -> RequestOutcome:
    """The request's outcome as the client saw it (module docstring)."""
    sent = not math.isnan(attempt.send_s)
    arrival = attempt.send_s if sent else attempt.scheduled_s
    output_len = request.output_len
    if attempt.finished and attempt.tokens_received:
        per_sample = max((len(t) for t in attempt.token_times.values()), default=0)
        output_len = max(per_sample, math.ceil(attempt.tokens_received / request.n))
    seen = dataclasses.replace(request, arrival_s=float(arrival), output_len=int(output_len))
    return RequestOutcome(
        seen,
        0,
        math.nan,
        attempt.first_token_s,
        attempt.end_s if attempt.finished else math.nan,
        attempt.cached_tokens or 0,
        0,
        attempt.tokens_received,
        attempt.error,
    )


def token_gaps(attempts: Sequence[Attempt]) -> tuple[np.ndarray, np.ndarray]:
    """Inter-token latencies of every choice's stream: (gap seconds, ones)."""
    gaps = [np.diff(np.asarray(times)) for a in attempts for times in a.token_times.values()]
    values = np.concatenate(gaps) if gaps else np.zeros(0)
    return values, np.ones(values.shape[0], dtype=np.int64)


def observed_block(attempts: Sequence[Attempt], result: ReplayResult, options: ReplayOptions):
    """summary.json's ``observed``: where and how the run was observed, and its errors."""
    sent = [a for a in attempts if not math.isnan(a.send_s)]
    lag = [a.send_s - a.scheduled_s for a in sent]
    cached = [a.cached_tokens for a in attempts if a.cached_tokens is not None]
    reported = [a.prompt_tokens for a in attempts if a.prompt_tokens is not None]
    return {
        "endpoint": options.url,
        "api": options.api,
        "prompt_mode": options.prompt_mode,
        "model": options.model,
        "max_connections": options.max_connections,
        "time_limit_s": options.time_limit_s,
        "request_timeout_s": options.request_timeout_s,
        "hit_time_limit": result.timed_out,
        "wall_s": result.wall_s,
        "num_sent": len(sent),
        "num_completed": sum(a.finished for a in attempts),
        "errors": dict(sorted(Counter(a.error for a in attempts if a.error).items())),
        "send_lag_s": {"mean": _mean(lag), "max": max(lag) if lag else None},
        "server_prompt_tokens": sum(reported) if reported else None,
        "server_cached_prompt_tokens": sum(cached) if cached else None,
    }


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if values else None


def observed_summary(scenario, requests, attempts, result, options, percentiles) -> dict:
    """summary.json of an observed run (sim.output.summary, then ``observed``)."""
    pool = scenario.kv_pool.device_blocks * scenario.cache.block_size
    summary = summarize(
        [outcome_of(r, a) for r, a in zip(requests, attempts, strict=True)],
        StepLog(1),
        total_slots=pool,
        slo_ttft_s=scenario.slo.ttft_s,
        slo_tpot_s=scenario.slo.tpot_s,
        warmup_requests=min(scenario.simulation.warmup_requests, len(requests)),
        block_size=scenario.cache.block_size,
        cost_model={"kind": "observed", "endpoint": options.url},
        token_gaps=token_gaps(attempts),
        metric_percentiles=percentiles,
    )
    # A client sees requests, not the engine: what it cannot know is unknown, not 0.
    summary["num_preemptions"] = None
    summary["kv"]["evicted_blocks"] = None
    summary["observed"] = observed_block(attempts, result, options)
    return summary


def write_observed(
    out: Path,
    scenario,
    requests,
    result: ReplayResult,
    summary,
    *,
    html: bool,
    force: bool,
    argv,
    extra=None,
) -> Path:
    """Write the observed run's folder all at once (sim.run.folders.atomic_folder);
    ``extra(folder)``, if given, adds files of its own (an imported run's replay)."""
    outcomes = [outcome_of(r, a) for r, a in zip(requests, result.attempts, strict=True)]
    steps = StepLog(1)
    with atomic_folder(out, force=force) as partial:
        if extra is not None:
            extra(partial)
        write_outputs(partial, outcomes, steps, summary)
        scenario_json = scenario.model_dump(mode="json")
        (partial / "scenario.json").write_text(
            json.dumps(scenario_json, indent=2, sort_keys=True) + "\n"
        )
        metadata = run_metadata(scenario, argv)
        (partial / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
        _write_attempts(partial / "observed.csv", result.attempts)
        _write_tokens(partial / "tokens.csv", result.attempts)
        if html:
            write_report(
                partial,
                outcomes,
                steps,
                summary,
                f"{scenario.name} (observed)",
                scenario=scenario_json,
                command=metadata["command"],
            )
    return out


def _text(value: Any) -> str:
    if value is None:  # not reported (a count the server did not give)
        return ""
    return repr(value) if isinstance(value, float) else str(value)  # NaN as nan, as elsewhere


def _write_attempts(path: Path, attempts: Sequence[Attempt]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(OBSERVED_COLUMNS)
        for a in attempts:
            writer.writerow(
                [
                    _text(v)
                    for v in (
                        a.req_id,
                        a.scheduled_s,
                        a.send_s,
                        a.first_token_s,
                        a.end_s,
                        a.events,
                        a.completion_tokens,
                        a.prompt_tokens,
                        a.cached_tokens,
                        a.error,
                        a.detail,
                    )
                ]
            )


def _write_tokens(path: Path, attempts: Sequence[Attempt]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        handle.write("req_id,choice,time_s\n")
        for a in attempts:
            for choice, times in sorted(a.token_times.items()):
                handle.writelines(f"{a.req_id},{choice},{t!r}\n" for t in times)
