"""A benchmark client's aggregates alone: ``vllm bench serve --save-result`` without
``--save-detailed`` (most published vLLM results) or SGLang's ``bench_serving`` without
``--output-details``. ``pagesim import-run vllm-bench|sglang-bench FILE`` takes them when
the file has none of the per-request lists.

What the file gives, and so the replay: the request count (``num_prompts``, else
``completed + failed``), the send process (``request_rate`` and ``burstiness``: gamma gaps
of that shape, cv = 1 / sqrt(burstiness), as vLLM draws them; inf: every request at
once), and the prompt and output lengths as their means only (``total_input_tokens`` and
``total_output_tokens`` over ``completed``): every replayed request has the mean lengths.
What is compared: the whole run's TTFT, TPOT, ITL and E2E at the mean, median, p90 and
p99 the file printed (``{mean,median,p90,p99}_{ttft,tpot,itl,e2el}_ms``; SGLang's
``..._e2e_latency_ms``), the request throughput, and the failures.

What an aggregate comparison cannot show: which requests were slow (no per-request
times), the queue's course over the run, or a length distribution's effect (the replay's
lengths are constant, so its tails come from queueing alone).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from sim.output.benchmark import benchmark_key
from sim.recorded.fields import Count, Elapsed, Published
from sim.recorded.files import Record, parse, parse_value
from sim.recorded.run import QUANTILES, RecordedRun, RecordError, StageFigures


def _send_rate(value: Any) -> Any:
    """``request_rate``: inf (every request at once: the client's default, written as
    "inf", Infinity or null) or a finite rate a client can send at."""
    if value is None or value == "inf" or value == math.inf:
        return math.inf
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"expected inf or a finite rate, got {value!r}"[:120])
    if not 1e-9 <= value <= 1e6:
        raise ValueError(f"expected inf or a rate in [1e-9, 1e6] requests/s, got {value!r}")
    return value


def _unit_burstiness(value: Any) -> Any:
    return 1.0 if value in (None, 0) else value  # 0 or absent: the client's Poisson default


#: A client's send rate: inf, or a finite rate in [1e-9, 1e6] requests/s.
SendRate = Annotated[float, BeforeValidator(_send_rate)]
#: vLLM's burstiness: the gamma shape of the gaps (1: Poisson; 0 or absent: 1).
Burstiness = Annotated[
    float, BeforeValidator(_unit_burstiness), Field(ge=1e-3, le=1e3, allow_inf_nan=False)
]

#: Latency figures as the clients name them (milliseconds): metric -> name in the key.
_METRICS = {
    "ttft_s": ("ttft",),
    "tpot_s": ("tpot",),
    "itl_s": ("itl",),
    "e2e_s": ("e2el", "e2e_latency"),
}


class Aggregates(Record):
    """What an aggregate-only result holds of the run as a whole."""

    num_prompts: Count | None = None
    completed: Count
    failed: Count = 0
    duration: Elapsed | None = None
    total_input_tokens: Count
    total_output_tokens: Count
    request_throughput: Published = None
    output_throughput: Published = None
    request_rate: SendRate = math.inf
    burstiness: Burstiness = 1.0
    max_concurrency: Count | None = None
    model_id: str | None = None


def aggregate_run(raw: dict[str, Any], run: RecordedRun, where: str) -> RecordedRun:
    """``run`` (its engine, model and GPU read) with the aggregates of ``raw`` and the
    workload that regenerates its load (module doc)."""
    figures = parse(Aggregates, raw, where)
    if figures.max_concurrency not in (None, 0):
        raise RecordError(
            f"{where}: max_concurrency: sends waited for a free slot, which an "
            "aggregate-only result cannot replay"
        )
    if figures.completed == 0:
        raise RecordError(f"{where}: completed: no request completed; nothing to compare")
    sent = (
        figures.num_prompts
        if figures.num_prompts is not None
        else (figures.completed + figures.failed)
    )
    if figures.completed + figures.failed > sent:
        raise RecordError(f"{where}: num_prompts: {sent}, fewer than completed + failed")
    prompt = _mean_length(figures.total_input_tokens, figures.completed, where, "input")
    output = _mean_length(figures.total_output_tokens, figures.completed, where, "output")
    whole = StageFigures(
        index=-1,
        rate_rps=None if math.isinf(figures.request_rate) else figures.request_rate,
        duration_s=figures.duration,
        sent=sent,
        failed=sent - figures.completed,
        latency=_latency(raw, where),
        throughput_rps=figures.request_throughput,
        output_tok_s=figures.output_throughput,
    )
    arrival, note = _arrival(figures.request_rate, figures.burstiness)
    notes = (
        note,
        f"aggregates only (no per-request lists): {sent} requests of the mean lengths, "
        f"{prompt} prompt and {output} output tokens; the whole run's figures compared, "
        "not each request's",
    )
    return dataclasses.replace(
        run,
        model=run.model or figures.model_id,
        summary=whole,
        num_requests=sent,
        workload={"arrival": arrival, "input": prompt, "output": output},
        notes=(*run.notes, *notes),
    )


#: The longest mean prompt or output an aggregate may give (tokens): past any model's
#: context, so a replay of it could only be refused.
MAX_MEAN_TOKENS = 1 << 24


def _mean_length(total: int, completed: int, where: str, kind: str) -> int:
    """The mean ``kind`` length over ``completed`` requests, at least 1; RecordError past
    :data:`MAX_MEAN_TOKENS`."""
    mean = max(1, round(total / completed))
    if mean > MAX_MEAN_TOKENS:
        raise RecordError(
            f"{where}: total_{kind}_tokens: {total:,} over {completed:,} completed requests "
            f"is {mean:,} tokens each, more than any model's context ({MAX_MEAN_TOKENS:,})"
        )
    return mean


def _arrival(rate: float, burstiness: float) -> tuple[dict[str, Any], str]:
    if math.isinf(rate):
        return (
            {"kind": "constant", "rate_rps": 1e9},
            "request_rate inf: every request sent at once (1 ns apart)",
        )
    if burstiness == 1.0:
        return {"kind": "poisson", "rate_rps": rate}, f"Poisson arrivals at {rate:g} req/s"
    cv = 1 / math.sqrt(burstiness)
    note = f"gamma arrivals at {rate:g} req/s, burstiness {burstiness:g} (cv {cv:.3g})"
    return {"kind": "gamma", "rate_rps": rate, "cv": cv}, note


def _latency(raw: dict[str, Any], where: str) -> dict[str, dict[str, float]]:
    """The latency figures the file printed, in seconds (a missing one left out)."""
    out: dict[str, dict[str, float]] = {}
    for metric, names in _METRICS.items():
        for stat in QUANTILES:
            for name in names:
                key = benchmark_key(stat, name)
                value = parse_value(Published, raw.get(key), where, key)
                if value is not None:
                    out.setdefault(metric, {})[stat] = value / 1e3
                    break
    if "ttft_s" not in out and "e2e_s" not in out:
        raise RecordError(
            f"{where}: mean_ttft_ms: missing; an aggregate-only result needs "
            "its latency figures (TTFT or E2E at least)"
        )
    return out
