"""inference-perf's stage and summary reports (``stage_N_lifecycle_metrics.json``,
``summary_lifecycle_metrics.json``): the typed model of what a replay reads of them, the
published figures they give, and the conversion of figures timed per SSE line (the
package doc).
"""

from __future__ import annotations

from sim.output.benchmark import CLIENT_STAT_NAMES
from sim.recorded.fields import Count, Published
from sim.recorded.files import Record
from sim.recorded.run import QUANTILES, RecordError, StageFigures

_LATENCIES = {
    "ttft_s": "time_to_first_token",
    "tpot_s": "time_per_output_token",
    "itl_s": "inter_token_latency",
    "e2e_s": "request_latency",
}


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


def figures(report: Report, index: int, where: str) -> StageFigures:
    """One stage's (or the summary's) published figures."""
    ok = report.successes
    load = report.load_summary or LoadSummary()
    latency = {}
    for metric, key in _LATENCIES.items():
        table = getattr(ok.latency, key) if ok.latency else None
        if table is not None:
            values = {q: getattr(table, CLIENT_STAT_NAMES[q]) for q in QUANTILES}
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


def line_timestamps(figures: StageFigures) -> bool:
    itl = figures.latency.get("itl_s", {})
    return "p50" in itl and "mean" in itl and itl["p50"] < 0.1 * itl["mean"]


def per_token(figures: StageFigures, out_len: int | None) -> StageFigures:
    """TPOT scaled from per-line to per-token intervals; the ITL dropped."""
    latency = dict(figures.latency)
    latency.pop("itl_s", None)
    if out_len is not None and out_len > 1 and "tpot_s" in latency:
        scale = (2 * out_len + 1) / (out_len - 1)
        latency["tpot_s"] = {q: v * scale for q, v in latency["tpot_s"].items()}
    else:
        latency.pop("tpot_s", None)  # no known N: no faithful conversion
    return StageFigures(**{**figures.__dict__, "latency": latency})
