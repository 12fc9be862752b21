"""Time series for the HTML pages, from the step log's columns and the request table:
rates in time bins, per-replica step series on a common time grid, the prefix hit rate
and swap traffic over time. Pure numpy; nothing here draws.

A step row holds its replica's state after the step, from the step's ``time_s`` until
the replica's next step, so a replica's value at time t is that of its last step at or
before t (before its first step: 0). ``steps`` is the step log's columns by name (a
StepLog's ``columns()``, or steps.csv read back), all of one length.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = [
    "NUM_BINS",
    "binned_rate",
    "cluster_series",
    "hit_rate_over_time",
    "replica_indices",
    "swap_traffic",
    "time_bins",
]

#: Time bins of the rate series (completions/s, hit rate, swap traffic).
NUM_BINS = 120


def replica_indices(steps: Mapping[str, np.ndarray]) -> dict[int, np.ndarray]:
    """Each replica's steps, as indices into the columns, in time order (stable, so
    equal times keep log order)."""
    replicas, times = steps["replica"].astype(np.int64), steps["time_s"]
    result = {}
    for replica in np.unique(replicas).tolist():
        mine = np.flatnonzero(replicas == replica)
        result[replica] = mine[np.argsort(times[mine], kind="stable")]
    return result


def time_bins(start_s: float, end_s: float, num_bins: int = NUM_BINS) -> np.ndarray:
    """``num_bins + 1`` bin edges from ``start_s`` to ``end_s`` (one bin of 1 s when the
    span is empty)."""
    if not end_s > start_s:
        end_s = start_s + 1.0
    return np.linspace(start_s, end_s, num_bins + 1)


def binned_rate(
    times: np.ndarray, edges: np.ndarray, weights: np.ndarray | None = None
) -> np.ndarray:
    """Events (or ``weights``) per second in each bin of ``edges``; NaN times ignored."""
    keep = ~np.isnan(times)
    counts, _ = np.histogram(
        times[keep], bins=edges, weights=None if weights is None else weights[keep]
    )
    return counts / np.diff(edges)


def _value_at(
    times: np.ndarray, values: np.ndarray, grid: np.ndarray, initial: float = 0.0
) -> np.ndarray:
    """The step function (times, values) sampled at ``grid``; ``initial`` before the
    first time."""
    if not times.size:
        return np.full(grid.shape, float(initial))
    index = np.searchsorted(times, grid, side="right") - 1
    return np.where(index >= 0, values[np.maximum(index, 0)], initial)


def cluster_series(
    steps: Mapping[str, np.ndarray], column: str, grid: np.ndarray, initial: float = 0.0
) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """``column`` of every replica sampled on ``grid`` (each replica's last step at or
    before each grid time; ``initial`` before its first step): the sum over the
    replicas that have steps, and each one's series."""
    time, value = steps["time_s"], steps[column].astype(np.float64)
    per_replica = {
        replica: _value_at(time[mine], value[mine], grid, initial)
        for replica, mine in replica_indices(steps).items()
    }
    total = np.sum(list(per_replica.values()), axis=0) if per_replica else np.zeros_like(grid)
    return total, per_replica


def hit_rate_over_time(table: Mapping[str, np.ndarray], edges: np.ndarray) -> np.ndarray:
    """Prefix-cache hit rate per bin: cached prompt tokens over prompt tokens of the
    requests first scheduled in it (summary.json's definition, per bin); NaN for a bin
    where none was scheduled."""
    scheduled = table["first_scheduled_s"]
    keep = ~np.isnan(scheduled)
    cached, _ = np.histogram(
        scheduled[keep], bins=edges, weights=table["cached_prompt_tokens"][keep]
    )
    prompt, _ = np.histogram(scheduled[keep], bins=edges, weights=table["prompt_tokens"][keep])
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(prompt > 0, cached / np.maximum(prompt, 1), np.nan)


def swap_traffic(
    steps: Mapping[str, np.ndarray], edges: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Blocks swapped out and in per second in each bin, all replicas together, from the
    step-to-step change of each replica's ``swapped_blocks`` (a step that swaps blocks
    both out and in shows only their difference)."""
    times, changes = [], []
    swapped = steps["swapped_blocks"].astype(np.float64)
    for mine in replica_indices(steps).values():
        times.append(steps["time_s"][mine])
        changes.append(np.diff(swapped[mine], prepend=0.0))
    if not times:
        zero = np.zeros(edges.size - 1)
        return zero, zero
    time, change = np.concatenate(times), np.concatenate(changes)
    out = binned_rate(time, edges, np.maximum(change, 0.0))
    back = binned_rate(time, edges, np.maximum(-change, 0.0))
    return out, back
