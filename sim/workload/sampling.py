"""Random draws of the workload: lengths from a length spec, arrival instants from an
arrival spec. Each draws only from the generator it is given.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.config.arrivals import GammaArrival, PoissonArrival, StagedArrival
from sim.config.workload import (
    LENGTH_PRESETS,
    EmpiricalLength,
    FixedLength,
    LognormalLength,
    Role,
    UniformLength,
)
from sim.inputs.tables import load_length_table


def _lognormal(mean: float, cv: float, size: int, rng: np.random.Generator) -> np.ndarray:
    sigma2 = np.log1p(cv * cv)
    mu = np.log(mean) - sigma2 / 2
    return rng.lognormal(mu, np.sqrt(sigma2), size)


def sample_lengths(
    dist: Any, size: int, rng: np.random.Generator, role: Role = "input", rows=None
) -> np.ndarray:
    """``size`` integer lengths >= 1 (int64). ``rows`` (empirical only) fixes the table
    rows to read, so paired input/output columns stay paired."""
    if isinstance(dist, FixedLength):
        return np.full(size, dist.value, dtype=np.int64)
    if isinstance(dist, UniformLength):
        return rng.integers(dist.min, dist.max, size=size, endpoint=True, dtype=np.int64)
    if isinstance(dist, EmpiricalLength):
        table = load_length_table(dist.resolved_path)
        if rows is None:
            rows = rng.integers(0, table.shape[0], size=size)
        return np.maximum(table[rows, dist.column_for(role)], 1)
    if isinstance(dist, LognormalLength):
        mean, cv = dist.mean, dist.cv
    else:
        mean, cv = LENGTH_PRESETS[dist.name][role]
    # Clipped before the cast: a huge draw must not wrap around to a negative length.
    draws = np.clip(np.rint(_lognormal(mean, cv, size, rng)), 1, 2.0**62)
    return draws.astype(np.int64)


def _gaps(spec: Any, size: int, rng: np.random.Generator) -> np.ndarray:
    if isinstance(spec, PoissonArrival):
        return rng.exponential(1.0 / spec.rate_rps, size)
    if isinstance(spec, GammaArrival):
        shape = 1.0 / (spec.cv * spec.cv)
        return rng.gamma(shape, 1.0 / (spec.rate_rps * shape), size)
    return np.full(size, 1.0 / spec.rate_rps)


def arrival_times(
    spec: Any, rng: np.random.Generator, count: int | None, duration_s: float | None
) -> np.ndarray:
    """Arrival instants (s, increasing) of a synthetic process: ``count`` of them, or all
    before ``duration_s``, whichever ends first. Vectorised in chunks. A staged process
    also ends with its last stage."""
    if isinstance(spec, StagedArrival):
        return _staged_times(spec, rng, count, duration_s)
    if count is not None:
        times = np.cumsum(_gaps(spec, count, rng))
        return times if duration_s is None else times[times < duration_s]
    assert duration_s is not None
    expected = spec.rate_rps * duration_s
    chunk = int(expected + 6 * np.sqrt(expected) + 16)
    times = np.cumsum(_gaps(spec, chunk, rng))
    while times[-1] < duration_s:
        more = times[-1] + np.cumsum(_gaps(spec, chunk, rng))
        times = np.concatenate([times, more])
    return times[times < duration_s]


def _staged_times(
    spec: StagedArrival, rng: np.random.Generator, count: int | None, duration_s: float | None
) -> np.ndarray:
    """Each stage's arrivals at its own rate, offset by its start; ``constant`` stages put
    their first arrival at the stage's start (as a load generator sending on a fixed
    interval does), so a stage of ``r`` req/s for ``d`` s sends ``ceil(r d)`` requests."""
    end = spec.total_duration_s if duration_s is None else min(duration_s, spec.total_duration_s)
    parts = []
    for start, stage in zip(spec.stage_starts(), spec.stages, strict=True):
        if start >= end:
            break
        length = min(stage.duration_s, end - start)
        if spec.process == "constant":
            sends = int(np.ceil(stage.rate_rps * length - 1e-9))
            times = np.arange(sends, dtype=np.float64) / stage.rate_rps
        elif spec.process == "poisson-count":
            times = _fixed_count_times(stage, length, rng)
        else:
            process: Any = (
                GammaArrival(rate_rps=stage.rate_rps, cv=spec.cv)
                if spec.process == "gamma"
                else PoissonArrival(rate_rps=stage.rate_rps)
            )
            times = arrival_times(process, rng, None, length)
        parts.append(start + times[times < length])
        if count is not None and sum(len(p) for p in parts) >= count:
            break
    times = np.concatenate(parts) if parts else np.zeros(0)
    return times if count is None else times[:count]


def _fixed_count_times(stage: Any, length: float, rng: np.random.Generator) -> np.ndarray:
    """``int(rate x duration)`` arrivals whose exponential gaps are scaled to sum to the
    stage's duration (the last one at its end), cut at ``length`` when the run ends
    first: inference-perf's ``constant`` load timer."""
    count = int(stage.rate_rps * stage.duration_s)
    if count == 0:
        return np.zeros(0)
    times = np.cumsum(rng.exponential(1.0, count))
    times *= stage.duration_s / times[-1]
    # The last one a hair (1 ns a second) before the end: the stage's end is the next
    # stage's start, and a run's duration keeps only arrivals strictly before it, also
    # once the stage's start is added.
    times[-1] = stage.duration_s * (1 - 1e-9)
    return times[times < length]
