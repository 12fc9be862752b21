"""summary.json: what a run measured, from its request outcomes and its step log.

Data in: the engine's records (sim.engine.records): the step log of its StepRecords and
one RequestOutcome per request. Data out: requests.csv, steps.csv and summary.json (all
byte-identical for identical inputs) plus the human tables printed by the CLI.

Conventions (so the numbers mean one thing everywhere):

* A request is *finished* when it has a finish time and no rejection reason; it is
  *rejected* when `rejected_reason` is non-empty.
* Warm-up: requests are ordered by (arrival, req_id); the first `warmup_requests` are
  excluded from every latency, goodput and throughput figure. Counts (requests, finished,
  rejected, preemptions) and the prefix hit rate cover the whole run.
* Output tokens of a finished request are ``output_len * n``; of an unfinished one, what it
  had generated. TPOT is per sample stream, ``(finish - first_token) / (output_len - 1)``
  for ``output_len >= 2``: the n samples of a request decode side by side, so dividing by
  ``output_len * n - 1`` would report a per-token latency n times better than any user sees.
* Duration is the span from the first measured arrival to the last measured finish.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from sim.engine.records import RequestOutcome
from sim.output.benchmark import DEFAULT_PERCENTILES, benchmark_block
from sim.output.requests import request_table
from sim.output.steady import steady_state
from sim.output.steplog import KV_SPLIT_COLUMNS, KV_SPLIT_KEYS, StepLog


def summarize(
    outcomes: Iterable[RequestOutcome],
    steps: StepLog,
    *,
    total_slots: int,
    slo_ttft_s: float,
    slo_tpot_s: float,
    warmup_requests: int = 0,
    num_replicas: int = 1,
    block_size: int = 1,
    peak_used_blocks: Sequence[int] | None = None,
    replica_slots: Sequence[int] | None = None,
    cost_model: Mapping[str, Any] | None = None,
    kv_offload: Mapping[str, Any] | None = None,
    disaggregation: Mapping[str, Any] | None = None,
    token_gaps: tuple[np.ndarray, np.ndarray] | None = None,
    metric_percentiles: Sequence[float] = DEFAULT_PERCENTILES,
) -> dict[str, Any]:
    """The content of summary.json (JSON-ready: Python numbers, None where undefined).

    `token_gaps` are the replicas' inter-token latencies (sim.engine.gaps) and
    `metric_percentiles` the percentiles of summary["benchmark"] (sim.output.benchmark).
    `total_slots` is the KV pool of ONE replica in token slots (`block_size` per block);
    each step's slot split is divided by it and the result averaged over time, weighting
    steps by their duration. `peak_used_blocks`, one per replica, are the allocators' own
    peaks (they see the pool mid-step, the step log only after each step's finished
    sequences are freed); without them the step log's peak is reported. `replica_slots`,
    one per replica, are each one's pool where they differ (prefill and decode pools):
    a step's split is then a share of its own replica's pool.
    Mutates nothing. Raises ValueError on a negative `warmup_requests` or `num_replicas < 1`.
    """
    if warmup_requests < 0 or num_replicas < 1:
        raise ValueError("warmup_requests must be >= 0 and num_replicas >= 1")
    table = request_table(outcomes)
    measured = np.arange(table["req_id"].shape[0]) >= warmup_requests
    duration = _duration_s(table, measured)
    meets = _meets_slo(table, slo_ttft_s, slo_tpot_s)  # every request, warm-up included
    summary: dict[str, Any] = {
        **_request_figures(table, measured, duration, meets, slo_ttft_s, slo_tpot_s),
        "warmup_requests": int(warmup_requests),
        **_pool_figures(
            steps, total_slots, block_size, peak_used_blocks, num_replicas, replica_slots
        ),
    }
    if cost_model is not None:
        summary["cost_model"] = dict(cost_model)
    if kv_offload is not None:  # what each offload tier did (sim.run.runner)
        summary["kv_offload"] = dict(kv_offload)
    if disaggregation is not None:  # the pools and their link (sim.run.pools)
        summary["disaggregation"] = dict(disaggregation)
    summary["steady_state"] = steady_state(
        table,
        steps.column("time_s"),
        steps.column("limit"),
        warmup_requests=warmup_requests,
        met_slo=meets,
        distribution=distribution,
    )
    # Per replica first (its step columns read once and dropped), so the step log's
    # columns are not held through the token gaps' percentiles, a long run's largest
    # transient; the section goes in the summary after the benchmark block all the same.
    slots = replica_slots or [total_slots] * num_replicas
    per_replica = _per_replica(
        table, steps, measured, duration, slots, block_size, peak_used_blocks
    )
    no_gaps = (np.zeros(0), np.zeros(0, dtype=np.int64))
    summary["benchmark"] = benchmark_block(
        table,
        token_gaps or no_gaps,
        slo_ttft_s=slo_ttft_s,
        slo_tpot_s=slo_tpot_s,
        met_slo=meets,
        percentiles=metric_percentiles,
    )
    if per_replica is not None:
        summary["per_replica"] = per_replica
    return summary


def _request_figures(table, measured, duration, meets, slo_ttft_s, slo_tpot_s) -> dict:
    """What the requests did: counts, rejections, throughput, latency distributions,
    goodput against the SLO, preemptions and prefix hits (latency and goodput over the
    ``measured`` requests, counts over all)."""
    done = measured & table["finished"]
    met_slo = meets & measured
    return {
        "num_requests": int(table["req_id"].shape[0]),
        "num_measured": int(measured.sum()),
        "num_finished": int(table["finished"].sum()),
        "num_rejected": int(table["rejected"].sum()),
        "rejected_reasons": dict(
            sorted(Counter(table["rejected_reason"][table["rejected"]]).items())
        ),
        "duration_s": duration,
        "throughput_rps": _rate(done.sum(), duration),
        "throughput_tok_s": _rate(table["output_tokens"][done].sum(), duration),
        "ttft_s": distribution(table["ttft_s"][measured]),
        "tpot_s": distribution(table["tpot_s"][measured]),
        "e2e_s": distribution(table["e2e_s"][measured]),
        "slo_ttft_s": float(slo_ttft_s),
        "slo_tpot_s": float(slo_tpot_s),
        "goodput": _ratio(met_slo.sum(), measured.sum()),
        "goodput_rps": _rate(met_slo.sum(), duration),
        "num_preemptions": int(table["preemptions"].sum()),
        "prefix_hit_rate": _prefix_hit_rate(table, np.ones_like(measured)),
    }


def _pool_figures(steps, total_slots, block_size, peaks, num_replicas, replica_slots) -> dict:
    """What the engine held: its batches, KV pool and the pool's use over time
    (sim.output.steplog's slot split; each step's share of its own replica's pool where
    ``replica_slots`` gives them)."""
    columns = steps.columns(_KV_READS + (("replica",) if replica_slots else ()))
    row_slots = None
    if replica_slots:
        row_slots = np.asarray(replica_slots, dtype=np.float64)[columns["replica"]]
    peak, peak_fraction_of = _max(peaks), total_slots
    if replica_slots and peaks:
        # Pools of different sizes: the peak is that of the replica fullest for its size.
        fullest = max(range(len(peaks)), key=lambda r: peaks[r] / replica_slots[r])
        peak, peak_fraction_of = peaks[fullest], replica_slots[fullest]
    return {
        "mean_batch_size": _mean(steps.column("batch_size")),
        "num_replicas": int(num_replicas),
        "total_slots": int(total_slots),
        "num_blocks": int(total_slots // block_size),
        "block_size": int(block_size),
        "kv": _kv_split(columns, peak_fraction_of, block_size, peak, row_slots),
    }


def _per_replica(table, steps, measured, duration, replica_slots, block_size, peaks):
    """Each replica's figures (sim.output.summary's ``per_replica``), or None for one
    replica; the step log's columns are read once here and dropped on return."""
    replicas = len(replica_slots)
    if replicas == 1:
        return None
    peaks = peaks or [None] * replicas
    columns = steps.columns(("replica", "batch_size", *_KV_READS))
    return [
        _replica_summary(table, columns, r, measured, duration, slots, block_size, peak)
        for r, peak, slots in zip(range(replicas), peaks, replica_slots, strict=True)
    ]


def _max(values: Sequence[int] | None) -> int | None:
    return max(values) if values else None


def _duration_s(table: Mapping[str, np.ndarray], measured: np.ndarray) -> float | None:
    finishes = table["finish_s"][measured & table["finished"]]
    if finishes.size == 0:
        return None
    return float(finishes.max() - table["arrival_s"][measured].min())


def _meets_slo(table: Mapping[str, np.ndarray], slo_ttft_s: float, slo_tpot_s: float):
    # A single-token request has no TPOT and so cannot miss the TPOT SLO; NaN TTFT
    # compares False, so an unfinished or rejected request is always a miss.
    tpot_ok = ~(table["tpot_s"] > slo_tpot_s)
    return table["finished"] & (table["ttft_s"] <= slo_ttft_s) & tpot_ok


def distribution(values: np.ndarray) -> dict[str, float | None]:
    values = values[~np.isnan(values)]
    if values.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"mean": float(values.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def _rate(count, duration_s: float | None) -> float | None:
    if duration_s is None or duration_s <= 0:
        return None
    return float(count) / duration_s


def _ratio(numerator, denominator) -> float | None:
    return float(numerator) / float(denominator) if denominator > 0 else None


def _mean(values: np.ndarray) -> float | None:
    return float(values.mean()) if values.size else None


def _prefix_hit_rate(table: Mapping[str, np.ndarray], subset: np.ndarray) -> float | None:
    # Only requests that were ever scheduled had a chance to hit the prefix cache;
    # counting queued or rejected prompts would dilute the rate with non-attempts.
    tried = subset & ~np.isnan(table["first_scheduled_s"])
    return _ratio(table["cached_prompt_tokens"][tried].sum(), table["prompt_tokens"][tried].sum())


def recent_prefix_hit_rate(table: Mapping[str, np.ndarray], last: int) -> float | None:
    """Prefix-cache hits over prompt tokens of the ``last`` requests to be scheduled
    (by first schedule): vLLM's logged figure spans its most recent requests so
    (sim.recorded.engine_log)."""
    scheduled = np.flatnonzero(~np.isnan(table["first_scheduled_s"]))
    order = scheduled[np.argsort(table["first_scheduled_s"][scheduled], kind="stable")]
    recent = np.zeros(len(table["first_scheduled_s"]), dtype=bool)
    recent[order[-last:]] = True
    return _prefix_hit_rate(table, recent)


#: The step log columns _kv_split reads.
_KV_READS = ("used_blocks", "evicted_blocks", "duration_s", *KV_SPLIT_COLUMNS)


def _kv_split(
    columns: Mapping[str, np.ndarray],
    total_slots: int,
    block_size: int,
    peak: int | None,
    row_slots: np.ndarray | None = None,
) -> dict[str, Any]:
    """Duration-weighted mean of each step's slot split / total_slots (/ its own row's
    ``row_slots``, where replicas' pools differ), plus the peak in use (``peak`` blocks if
    given, else the most the step log saw), from the step log's ``columns``."""
    used = columns["used_blocks"]
    if peak is None and used.size:
        peak = int(used.max())
    kv: dict[str, Any] = {
        "peak_used_blocks": peak,
        "peak_used_slots": None if peak is None else peak * block_size,
        "peak_used_fraction": None if peak is None else peak * block_size / total_slots,
        # cached prefix blocks the eviction policy reclaimed (0: the policy never chose)
        "evicted_blocks": int(columns["evicted_blocks"].sum()),
    }
    weights = columns["duration_s"]
    if row_slots is None:
        denominator = float(weights.sum()) * total_slots
    else:
        denominator = float(np.sum(weights * row_slots))
    for key, column in zip(KV_SPLIT_KEYS, KV_SPLIT_COLUMNS):
        slots = columns[column].astype(np.float64)  # int32 counts: exact in float64
        # np.sum, not `slots @ weights`: BLAS sums a dot product in an order that depends
        # on its thread count and the CPU's vector width, so the last digits (and the
        # summary's bytes) would differ between machines.
        kv[key] = float(np.sum(slots * weights)) / denominator if denominator > 0 else None
    return kv


def _replica_summary(table, columns, replica, measured, duration, total_slots, block_size, peak):
    """One replica's figures; ``columns`` are the step log's (StepLog.columns)."""
    mine = table["replica"] == replica
    done = mine & measured & table["finished"]
    its_steps = columns["replica"] == replica
    its_columns = {name: columns[name][its_steps] for name in _KV_READS}
    return {
        "replica": replica,
        "num_finished": int((mine & table["finished"]).sum()),
        "throughput_rps": _rate(done.sum(), duration),
        "throughput_tok_s": _rate(table["output_tokens"][done].sum(), duration),
        "mean_batch_size": _mean(columns["batch_size"][its_steps]),
        "num_preemptions": int(table["preemptions"][mine].sum()),
        "prefix_hit_rate": _prefix_hit_rate(table, mine),
        "kv": _kv_split(its_columns, total_slots, block_size, peak),
    }
