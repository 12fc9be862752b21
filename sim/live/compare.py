"""A simulation against an observed run of the same scenario (``pagesim validate
--observed``): the latency percentiles, the throughput and the stability verdict of
both, and the simulation's relative error ``(simulated - observed) / observed``.

Both sides are summary.json dicts (sim.output.summary): TTFT, TPOT and E2E at the mean,
p50, p90 and p99 over the measured requests, ITL (every token after a stream's first) at
the same from the ``benchmark`` block, requests and output tokens per second, and
``steady_state.verdict``. Nothing here depends on how either run was made.

The MAPE is the mean of the absolute relative errors over :data:`MAPE_FIGURES`: TTFT,
TPOT and E2E at the mean, p50, p90 and p99 and the request throughput, the figures of
the recorded-runs corpus table (sim.recorded.stages.compare), so one run's line here
reads as its row there.
"""

from __future__ import annotations

import datetime
from typing import Any

from sim.output.benchmark import benchmark_key

_LATENCIES = ("ttft_s", "tpot_s", "e2e_s")
_QUANTILES = ("mean", "p50", "p90", "p99")
_THROUGHPUTS = ("throughput_rps", "throughput_tok_s")
#: The figures the MAPE averages over (module doc).
MAPE_FIGURES = (*(f"{m}.{q}" for m in _LATENCIES for q in _QUANTILES), "throughput_rps")

#: What a verdict says about a recording, where it is not plain.
_VERDICTS = {
    "too short": "too short: no window long enough to call the run steady or overloaded; "
    "the whole-run figures above still compare every request",
}


def _relative(simulated, observed) -> float | None:
    if simulated is None or observed is None or not observed:
        return None
    return float((simulated - observed) / observed)


def _row(observed, simulated) -> dict[str, float | None]:
    return {
        "observed": observed,
        "simulated": simulated,
        "rel_error": _relative(simulated, observed),
    }


def _itl_s(summary: dict, key: str) -> float | None:
    value = (summary.get("benchmark") or {}).get(key)
    return None if value is None else value / 1e3


def compare_runs(observed: dict, simulated: dict) -> dict[str, Any]:
    """``{"metrics": {"ttft_s.p50": {observed, simulated, rel_error}, ...}, "verdict":
    {observed, simulated}, "counts": ...}`` from two summaries."""
    metrics = {}
    for metric in _LATENCIES:
        for quantile in _QUANTILES:
            real = (observed.get(metric) or {}).get(quantile)
            model = (simulated.get(metric) or {}).get(quantile)
            metrics[f"{metric}.{quantile}"] = _row(real, model)
    for quantile in _QUANTILES:
        key = benchmark_key(quantile, "itl")  # milliseconds in the benchmark block
        metrics[f"itl_s.{quantile}"] = _row(_itl_s(observed, key), _itl_s(simulated, key))
    for metric in _THROUGHPUTS:
        metrics[metric] = _row(observed.get(metric), simulated.get(metric))
    verdict = {
        side: (summary.get("steady_state") or {}).get("verdict")
        for side, summary in (("observed", observed), ("simulated", simulated))
    }
    counts = {
        side: {key: summary.get(key) for key in ("num_requests", "num_finished", "num_rejected")}
        for side, summary in (("observed", observed), ("simulated", simulated))
    }
    return {"metrics": metrics, "mape": mape(metrics), "verdict": verdict, "counts": counts}


def mape(metrics: dict[str, dict]) -> dict[str, Any]:
    """``{"value", "figures"}``: the mean absolute relative error over the
    :data:`MAPE_FIGURES` both sides have, and how many that was (value None: none)."""
    errors = [
        abs(metrics[name]["rel_error"])
        for name in MAPE_FIGURES
        if name in metrics and metrics[name]["rel_error"] is not None
    ]
    return {"value": sum(errors) / len(errors) if errors else None, "figures": len(errors)}


#: Points of prefix cache hit rate between a recording and its replay past which the
#: replay's prompt sharing is probably not the recording's.
PREFIX_WARN_POINTS = 5.0


def build_report(
    scenario,
    observed: dict,
    simulated: dict,
    *,
    run: str,
    cost_model: dict,
    prefix: dict | None = None,
    series: dict | None = None,
) -> dict[str, Any]:
    """validation.json of ``validate --observed`` (JSON-ready); ``prefix``: the prefix
    cache hit rates of both, ``{recorded, replay, over}`` (None: neither known);
    ``series``: the recording's time series against the replay's, time-averaged,
    ``{running, waiting, gen_tok_s: [recorded, simulated]}`` (None: it has none)."""
    report = {
        "kind": "observed",
        "scenario": scenario.name,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "observed_run": run,
        "endpoint": (observed.get("observed") or {}).get("endpoint"),
        "errors": (observed.get("observed") or {}).get("errors", {}),
        "simulated_cost_model": cost_model,
    }
    report.update(compare_runs(observed, simulated))
    report["prefix_hit_rate"] = prefix
    report["series"] = series
    return report


def _ms(seconds: float | None, metric: str) -> str:
    if seconds is None:
        return "n/a"
    return f"{seconds:.3g}" if metric.startswith("throughput") else f"{1e3 * seconds:.2f} ms"


def format_report(report: dict[str, Any]) -> str:
    """The comparison as a markdown table (readable as plain text)."""
    lines = [
        "whole run: every measured request (pagesim compare's latencies: the steady window)",
        "",
        "| metric | observed | simulated | error |",
        "| --- | ---: | ---: | ---: |",
    ]
    for metric, row in report["metrics"].items():
        error = "n/a" if row["rel_error"] is None else f"{100 * row['rel_error']:+.1f}%"
        lines.append(
            f"| {metric} | {_ms(row['observed'], metric)} | "
            f"{_ms(row['simulated'], metric)} | {error} |"
        )
    verdict, counts = report["verdict"], report["counts"]
    real, model = verdict["observed"], verdict["simulated"]
    same = "n/a" if real is None or model is None else ("same" if real == model else "differs")
    lines.append(f"| verdict | {real or 'n/a'} | {model or 'n/a'} | {same} |")
    error = report.get("mape") or {}
    if error.get("value") is not None:
        lines.append(
            f"\nMAPE {100 * error['value']:.1f}% over {error['figures']} figures (TTFT, TPOT "
            "and E2E at mean, p50, p90, p99, and requests/s), as the corpus table counts it"
        )
    for side in sorted({v for v in verdict.values() if v in _VERDICTS}):
        lines.append(f"verdict {_VERDICTS[side]}")
    lines += _prefix_lines(report.get("prefix_hit_rate"))
    if report.get("series"):
        cells = "   ".join(
            f"{name} {a:,.1f} / {b:,.1f}" for name, (a, b) in report["series"].items()
        )
        lines.append(
            f"step level (the engine's own time series, time-averaged; recorded / "
            f"simulated): {cells}"
        )
    observed, simulated = counts["observed"], counts["simulated"]
    errors = ", ".join(f"{k}: {v}" for k, v in report["errors"].items()) or "none"
    lines.append(
        f"\n{report['date']}: finished {observed['num_finished']} observed (endpoint errors: "
        f"{errors}) and {simulated['num_finished']} simulated of {observed['num_requests']} "
        f"requests; simulated with {report['simulated_cost_model'].get('kind')}"
    )
    return "\n".join(lines)


def _prefix_lines(prefix: dict | None) -> list[str]:
    """The prefix cache hit rates of both runs, and a warning when they are far apart."""
    if not prefix or prefix.get("recorded") is None:
        return []
    recorded, replay = prefix["recorded"], prefix.get("replay")
    shown = "n/a" if replay is None else f"{100 * replay:.1f} %"
    lines = [
        f"prefix cache hit rate ({prefix['over']}): recorded {100 * recorded:.1f} %, replay {shown}"
    ]
    if replay is not None and abs(replay - recorded) * 100 > PREFIX_WARN_POINTS:
        lines.append(
            f"warning: the replay's prefix cache hits are {100 * (replay - recorded):+.1f} "
            "points from the recording's: its prompts probably do not share what the real "
            "ones did (import with the prompts' token ids, --prompts, or the workload's "
            "shared-prefix settings)"
        )
    return lines
