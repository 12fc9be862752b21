"""Steady state: the measurement window of a run, its stability verdict, what limits it.

A run starts empty and, unless it is cut short, drains after the last arrival; both ends
are transients. Figures a user can trust come from the window in between:

* **Window**: from the end of the warm-up to the last arrival. The warm-up is
  ``simulation.warmup_requests`` arrivals and then, if the run is still filling up, the
  initial transient that the MSER-5 rule finds in ``N(t)`` (below): White's Marginal
  Standard Error Rule truncates the start of a series where dropping it most reduces the
  standard error of the remaining mean, looking at most at the first half. The drain is
  left out: throughput is completions inside the window divided by its length, and
  latencies are those of the requests that arrive inside it.
* **Requests in the system** ``N(t)``: arrived and not yet finished at ``t`` (a rejected
  request leaves at its arrival; one unfinished at the end of the run never leaves),
  sampled at :data:`GRID_POINTS` evenly spaced times from the end of the configured
  warm-up to the last arrival.
* **Verdict**, in this order:

  - ``overloaded``: ``N(t)`` grows over the window. Its least-squares slope ``g``
    (requests per second) must be at least :data:`GROWTH_FRACTION` of the arrival rate,
    and the growth over the window ``g x window`` at least :data:`GROWTH_SIGNIFICANCE`
    times the residual standard deviation of ``N(t)`` around the line and at least
    :data:`MIN_GROWTH_REQUESTS`. A stable queue fluctuates around a level, so its
    fitted growth stays within its own noise; an overloaded one gains
    ``arrival rate - capacity`` requests every second, which ``g`` estimates.
  - ``too short``: not overloaded, but the window is shorter than
    :data:`MIN_WINDOW_LATENCIES` mean end-to-end latencies (a request's time in the
    system is the queue's memory: a window of a few of them is dominated by the start)
    or holds fewer than :data:`MIN_WINDOW_COMPLETIONS` completions. The verdict says how
    many requests would do.
  - ``stable``: otherwise.

* **Limiter**: each step records what kept it from admitting the requests still waiting
  (steps.csv's ``limit``: ``max_num_seqs``, ``token_budget``, ``kv_blocks``, ``policy``,
  or ``none`` when nothing was left waiting). The shares are over the window's steps; the
  dominant one is what to raise first.

Pure functions of the request table and the step log; nothing is mutated.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from sim.engine.records import LIMIT_NAMES

__all__ = [
    "GRID_POINTS",
    "GROWTH_FRACTION",
    "GROWTH_SIGNIFICANCE",
    "MIN_GROWTH_REQUESTS",
    "MIN_WINDOW_COMPLETIONS",
    "MIN_WINDOW_LATENCIES",
    "ADVICE_MARGIN",
    "MSER_BATCH",
    "VERDICTS",
    "in_system",
    "mser_truncation",
    "steady_state",
]

VERDICTS = ("stable", "overloaded", "too short")

#: Overloaded needs requests in the system to grow by at least this fraction of the
#: arrival rate (completions fall 1 % or more short of arrivals) ...
GROWTH_FRACTION = 0.01
#: ... by a total growth over the window of at least this many residual standard
#: deviations of N(t) around its fitted line ...
GROWTH_SIGNIFICANCE = 3.0
#: ... and of at least this many requests (a handful is noise whatever the fit says).
MIN_GROWTH_REQUESTS = 10
#: A stable verdict needs a window of at least this many mean end-to-end latencies ...
MIN_WINDOW_LATENCIES = 20
#: ... holding at least this many completions.
MIN_WINDOW_COMPLETIONS = 200
#: Times at which N(t) is sampled between the configured warm-up and the last arrival.
GRID_POINTS = 255
#: Consecutive samples averaged into one MSER batch (MSER-5).
MSER_BATCH = 5
#: The requests a too-short run is told to use cover this many times the missing window
#: (the warm-up transient found in a longer run is not known in advance).
ADVICE_MARGIN = 1.5


def in_system(table: Mapping[str, np.ndarray], times: np.ndarray) -> np.ndarray:
    """Requests arrived and not yet gone at each of ``times`` (see the module doc)."""
    arrival = np.sort(table["arrival_s"])
    leave = np.where(table["rejected"], table["arrival_s"], table["finish_s"])
    leave = np.sort(leave[~np.isnan(leave)])
    arrived = np.searchsorted(arrival, times, side="right")
    gone = np.searchsorted(leave, times, side="right")
    return (arrived - gone).astype(np.float64)


def mser_truncation(series: np.ndarray, batch: int = MSER_BATCH) -> int:
    """Samples to drop from the start of ``series`` (MSER-``batch``): batch means
    ``b``, then the ``d`` in the first half of the batches minimising
    ``sum((b[d:] - mean(b[d:]))**2) / (len(b) - d)**2``; returned in samples."""
    num_batches = series.shape[0] // batch
    if num_batches < 2:
        return 0
    means = series[: num_batches * batch].reshape(num_batches, batch).mean(axis=1)
    best, best_score = 0, math.inf
    for d in range(num_batches // 2 + 1):
        tail = means[d:]
        score = float(((tail - tail.mean()) ** 2).sum()) / tail.shape[0] ** 2
        if score < best_score:
            best, best_score = d, score
    return best * batch


def steady_state(
    table: Mapping[str, np.ndarray],
    step_times: np.ndarray,
    step_limits: np.ndarray,
    *,
    warmup_requests: int,
    met_slo: np.ndarray,
    distribution: Callable[[np.ndarray], dict],
) -> dict[str, Any]:
    """The ``steady_state`` section of summary.json (JSON-ready).

    ``table`` is :func:`sim.output.requests.request_table` (rows by arrival),
    ``step_times`` and ``step_limits`` the step log's ``time_s`` and ``limit`` columns,
    ``met_slo`` a boolean per table row and ``distribution`` the summary's percentile
    function. Reads its inputs only."""
    arrival = table["arrival_s"]
    if arrival.shape[0] - warmup_requests < 2 or arrival[-1] <= arrival[warmup_requests]:
        return _too_short_without_window(arrival.shape[0], warmup_requests)
    times = np.linspace(arrival[warmup_requests], arrival[-1], GRID_POINTS)
    levels = in_system(table, times)
    cut = mser_truncation(levels)
    times, levels = times[cut:], levels[cut:]
    start, end = float(times[0]), float(times[-1])
    window = end - start
    inside = (arrival >= start) & (np.arange(arrival.shape[0]) >= warmup_requests)
    arrival_rate = (int(inside.sum()) - 1) / window
    finish = table["finish_s"]
    completed = table["finished"] & (finish > start) & (finish <= end)
    growth, residual = _trend(times, levels)
    e2e = table["e2e_s"][inside & table["finished"]]
    section: dict[str, Any] = {
        "window_start_s": start,
        "window_end_s": end,
        "window_s": window,
        "transient_s": start - float(arrival[warmup_requests]),
        "arrivals": int(inside.sum()),
        "arrival_rate_rps": arrival_rate,
        "completions": int(completed.sum()),
        "throughput_rps": float(completed.sum()) / window,
        "throughput_tok_s": float(table["output_tokens"][completed].sum()) / window,
        "goodput": float((inside & met_slo).sum()) / float(inside.sum()),
        "goodput_rps": float((completed & met_slo).sum()) / window,
        "ttft_s": distribution(table["ttft_s"][inside]),
        "tpot_s": distribution(table["tpot_s"][inside]),
        "e2e_s": distribution(table["e2e_s"][inside]),
        "in_system_growth_rps": growth,
        "in_system_start": float(levels[0]),
        "in_system_end": float(levels[-1]),
        "in_system_mean": float(levels.mean()),
        "mean_e2e_s": float(e2e.mean()) if e2e.size else None,
    }
    section.update(_limiters(step_times, step_limits, start, end))
    section.update(_verdict(section, residual, warmup_requests))
    return section


def _trend(times: np.ndarray, levels: np.ndarray) -> tuple[float, float]:
    """Least-squares slope of ``levels`` over ``times`` and the residual standard
    deviation around the line."""
    centred = times - times.mean()
    denominator = float(np.sum(centred * centred))  # not BLAS: the same bits on every machine
    if denominator <= 0:
        return 0.0, 0.0
    slope = float(np.sum(centred * (levels - levels.mean()))) / denominator
    residual = levels - levels.mean() - slope * centred
    return slope, float(residual.std())


def _limiters(times: np.ndarray, limits: np.ndarray, start: float, end: float):
    """Share of the window's steps (started at ``times``) by limit, and the dominant one."""
    codes = limits[(times >= start) & (times <= end)].astype(np.int64)
    counts = np.bincount(codes, minlength=len(LIMIT_NAMES))
    total = int(counts.sum())
    shares = {name: (int(c) / total if total else None) for name, c in zip(LIMIT_NAMES, counts)}
    limited_by = LIMIT_NAMES[int(counts.argmax())] if total else None
    return {"limiters": shares, "limited_by": limited_by}


def _verdict(section: Mapping[str, Any], residual: float, warmup: int) -> dict[str, Any]:
    window, growth = section["window_s"], section["in_system_growth_rps"]
    rate, done = section["arrival_rate_rps"], section["throughput_rps"]
    grown = growth * window
    if (
        growth >= GROWTH_FRACTION * rate
        and grown >= GROWTH_SIGNIFICANCE * residual
        and grown >= MIN_GROWTH_REQUESTS
    ):
        reason = (
            f"requests in the system grow by {growth:.2f} req/s: {rate:.2f} req/s arrive, "
            f"{done:.2f} req/s complete"
        )
        return {"verdict": "overloaded", "reason": reason, "requests_needed": None}
    needed_s = _min_window_s(section)
    if needed_s is None or window < needed_s:
        needed = _requests_for(warmup, section, needed_s)
        if needed_s is None:
            reason = "no request that arrived in the window finished"
        else:
            reason = f"{_short_of(section)}; about {needed:,} requests would reach a verdict"
        return {"verdict": "too short", "reason": reason, "requests_needed": needed}
    reason = (
        f"requests in the system level off at {section['in_system_mean']:.1f} "
        f"(growth {growth:+.2f} req/s); {rate:.2f} req/s arrive, {done:.2f} req/s complete"
    )
    return {"verdict": "stable", "reason": reason, "requests_needed": None}


def _short_of(section: Mapping[str, Any]) -> str:
    """What the steady window lacks (it is shorter than ``_min_window_s``), the binding
    requirement first: the arrivals for ``MIN_WINDOW_COMPLETIONS`` completions at the
    window's arrival rate, or ``MIN_WINDOW_LATENCIES`` mean E2E latencies."""
    window, arrivals = section["window_s"], section["arrivals"]
    mean_e2e = section["mean_e2e_s"]
    span = MIN_WINDOW_LATENCIES * mean_e2e
    if window < MIN_WINDOW_COMPLETIONS / section["arrival_rate_rps"]:
        return (
            f"the steady window ({window:,.1f} s) holds {arrivals:,} arrivals and "
            f"{section['completions']:,} completions; a verdict needs "
            f"{MIN_WINDOW_COMPLETIONS:,} requests to arrive and complete in it"
        )
    return (
        f"the steady window ({window:,.1f} s) is shorter than {MIN_WINDOW_LATENCIES} mean "
        f"E2E latencies ({MIN_WINDOW_LATENCIES} x {mean_e2e:,.2f} s = {span:,.1f} s): too "
        "few requests both arrive and finish inside it"
    )


def _min_window_s(section: Mapping[str, Any]) -> float | None:
    """The shortest window that would be long enough (None: nothing finished)."""
    if section["mean_e2e_s"] is None or section["arrival_rate_rps"] <= 0:
        return None
    return max(
        MIN_WINDOW_LATENCIES * section["mean_e2e_s"],
        MIN_WINDOW_COMPLETIONS / section["arrival_rate_rps"],
    )


def _requests_for(warmup: int, section: Mapping[str, Any], window_s: float | None) -> int | None:
    """Requests whose arrivals cover the warm-up, then the transient and ``window_s``
    with a margin, rounded up to two significant figures."""
    rate = section["arrival_rate_rps"]
    if window_s is None or rate <= 0:
        return None
    span = ADVICE_MARGIN * (section["transient_s"] + window_s)
    needed = warmup + math.ceil(rate * span) + 1
    scale = 10 ** max(len(str(needed)) - 2, 0)
    return -(-needed // scale) * scale


def _too_short_without_window(num_requests: int, warmup: int) -> dict[str, Any]:
    return {
        "verdict": "too short",
        "reason": f"{num_requests} requests leave fewer than 2 arrivals after a warm-up of "
        f"{warmup}",
        "requests_needed": None,
        "window_s": None,
        "limiters": {name: None for name in LIMIT_NAMES},
        "limited_by": None,
    }
