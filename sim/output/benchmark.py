"""summary.json's ``benchmark`` block: the run in the names and units of vLLM's
benchmark tooling (``vllm bench serve``), so its users read pagesim's figures as their
own. Flat keys, milliseconds, mean / median / std and the chosen percentiles of TTFT,
TPOT, ITL (inter-token latency) and E2EL (end-to-end latency).

Like ``vllm bench serve`` it covers the whole run, warm-up included, over completed
requests; the steady-state figures elsewhere in summary.json exclude the warm-up and the
initial transient. ITL counts every output token after a sample's first (its gap to the
sample's previous token, preemptions included); TPOT is per request, ``(e2el - ttft) /
(output_len - 1)``, for requests of two or more tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

#: Percentiles reported unless the user picks others (``--metric-percentiles``).
DEFAULT_PERCENTILES = (50.0, 90.0, 99.0)


def benchmark_block(
    table: Mapping[str, np.ndarray],
    token_gaps: tuple[np.ndarray, np.ndarray],
    *,
    slo_ttft_s: float,
    slo_tpot_s: float,
    met_slo: np.ndarray,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
) -> dict[str, Any]:
    """The block from the request table (sim.output.requests), the replicas' token gaps
    (gap seconds, tokens with that gap) and which requests met both SLOs."""
    done = table["finished"]
    finishes = table["finish_s"][done]
    duration = float(finishes.max() - table["arrival_s"].min()) if finishes.size else None
    completed = int(done.sum())
    input_tokens = int(table["prompt_tokens"][done].sum())
    output_tokens = int(table["output_tokens"][done].sum())
    block: dict[str, Any] = {
        "scope": "whole run, warm-up included, completed requests (as vllm bench serve)",
        "duration": duration,
        "completed": completed,
        "total_input_tokens": input_tokens,
        "total_output_tokens": output_tokens,
        "request_throughput": _per_s(completed, duration),
        "request_goodput": _per_s(int((met_slo & done).sum()), duration),
        "output_throughput": _per_s(output_tokens, duration),
        "total_token_throughput": _per_s(input_tokens + output_tokens, duration),
        "goodput_definition": {"ttft_ms": slo_ttft_s * 1e3, "tpot_ms": slo_tpot_s * 1e3},
        "percentiles": [float(p) for p in percentiles],
    }
    ones = np.ones_like
    samples = {
        "ttft": (table["ttft_s"][done], None),
        "tpot": (table["tpot_s"][done & ~np.isnan(table["tpot_s"])], None),
        "itl": token_gaps,
        "e2el": (table["e2e_s"][done], None),
    }
    for metric, (values, counts) in samples.items():
        counts = ones(values, dtype=np.int64) if counts is None else counts
        block.update(_stats_ms(metric, values, counts, percentiles))
    return block


def _per_s(count: int, duration: float | None) -> float | None:
    return count / duration if duration else None


#: pagesim's figure names -> the clients' (vLLM's and SGLang's benchmark, inference-perf).
CLIENT_STAT_NAMES = {"mean": "mean", "p50": "median", "p90": "p90", "p99": "p99"}


def benchmark_key(stat: str, metric: str) -> str:
    """A figure's key in a benchmark block: ("p50", "itl") -> ``median_itl_ms``."""
    return f"{CLIENT_STAT_NAMES.get(stat, stat)}_{metric}_ms"


def percentile_name(p: float) -> str:
    """vLLM's spelling: ``p99``, ``p99.9``."""
    return f"p{int(p)}" if float(p).is_integer() else f"p{p}"


def _stats_ms(
    metric: str, values: np.ndarray, counts: np.ndarray, percentiles: Sequence[float]
) -> dict[str, float | None]:
    keep = counts > 0
    values, counts = values[keep], counts[keep]
    names = [benchmark_key(stat, metric) for stat in ("mean", "p50", "std")]
    names += [f"{percentile_name(p)}_{metric}_ms" for p in percentiles]
    if values.size == 0:
        return dict.fromkeys(names, None)
    total = counts.sum()
    mean = float((values * counts).sum() / total)
    std = float(np.sqrt((counts * (values - mean) ** 2).sum() / total))
    quantiles = weighted_percentiles(values, counts, [50.0, *percentiles])
    figures = [mean, float(quantiles[0]), std, *map(float, quantiles[1:])]
    return {name: figure * 1e3 for name, figure in zip(names, figures, strict=True)}


def weighted_percentiles(
    values: np.ndarray, counts: np.ndarray, percentiles: Sequence[float]
) -> np.ndarray:
    """``np.percentile(np.repeat(values, counts), percentiles)`` (linear interpolation)
    without materialising the repeats: a run's ITL has one entry per token."""
    order = np.argsort(values, kind="stable")
    sorted_values, cumulative = values[order], np.cumsum(counts[order])
    position = np.asarray(percentiles, dtype=np.float64) / 100.0 * (cumulative[-1] - 1)
    below, above = np.floor(position), np.ceil(position)

    def order_statistic(k: np.ndarray) -> np.ndarray:  # the k-th smallest, 0-based
        return sorted_values[np.searchsorted(cumulative, k, side="right")]

    low, high = order_statistic(below), order_statistic(above)
    return low + (high - low) * (position - below)
