"""Fitting the calibrated cost model (sim.costs.calibrated) to what an endpoint showed
(``pagesim calibrate --observed RUN``).

A client sees requests, not steps, so only some of the model's terms can be told apart:

* **TTFT against prompt length, at low load.** A request sent while nothing else was in
  flight, that got its first token before anything else was sent, had its prompt
  computed alone: its TTFT is one prefill (``ceil(P / budget)`` steps for a prompt of P
  tokens under a token budget) plus the network and the server's own overhead. Fitting
  ``TTFT = a * steps + b * P + c * P (P + 1) / 2`` over such requests gives a fixed cost
  per prefill step, a cost per prompt token and (if the prompt lengths vary enough) one
  per causal attention pair. Under load TTFT is mostly queueing and says nothing of this.
* **ITL against the decode batch.** A gap between two tokens of one stream while no
  other request was waiting for its first token is one decode-only step (or a few): its
  length against how many streams were decoding then (D) gives ``ITL = alpha + beta * D``,
  the decode step time at the batch sizes observed. The mean gap for each D is fitted,
  not the median: tokens of two steps that reach the client in one read make one long
  and one near-zero gap, which moves the median but leaves the mean as it was. Batch
  sizes seen in fewer than :data:`MIN_GAPS` gaps are left out (two bunched gaps can
  average to almost nothing), and each mean weighs by its number of gaps.

Mapped onto the calibrated model: ``tokens = b``, ``prefill_new_pairs = c``, ``seqs =
beta - b`` (a decode's per-sequence cost beyond its one token), and the fixed costs split
between ``step``, ``decode_step`` and ``prefill_chunks`` so that a lone prefill costs
``a`` and a decode step ``alpha``; how they split is a choice, only the two sums are
identified. **Not identifiable from request-level timings**, and left at 0: how a step's
time divides among layers (or between attention and the linear layers: the per-context
terms ``prefill_context``, ``decode_context`` and ``decode_padded`` fold into the
per-token and per-sequence costs at the contexts observed), prefix-cache hits
(``prefill_cached_pairs``), swaps and copies (their costs appear only as preemptions,
which a client cannot see), and mixed prefill+decode steps beyond the sum of the parts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.costs.calibrated import FEATURES, Calibration, CalibrationError
from sim.hil.fit import error_stats, nnls

#: What each coefficient holds after an observed fit (written into the calibration).
IDENTIFIED = {
    "step + prefill_chunks": "fixed cost of a lone prefill step (TTFT intercept, at low load)",
    "tokens": "cost per prompt token (TTFT slope, at low load)",
    "prefill_new_pairs": "cost per causal attention pair (TTFT curvature, if lengths vary)",
    "step + decode_step": "fixed cost of a decode step (ITL intercept)",
    "tokens + seqs": "cost per decoding sequence (ITL slope against the decode batch)",
}
NOT_IDENTIFIED = {
    "per layer": "how a step divides among layers, or attention against linear layers",
    "prefill_context, decode_context, decode_padded": "folded into the per-token and "
    "per-sequence costs at the context lengths observed",
    "prefill_cached_pairs": "prefix-cache hits are not visible in timings",
    "swapped_blocks, copied_blocks": "a client cannot see swaps or copy-on-write",
    "step / decode_step / prefill_chunks split": "only the two fixed sums are identified",
}


#: Batch sizes seen in fewer decode gaps than this are left out of the ITL fit (if any
#: batch size has this many).
MIN_GAPS = 10


@dataclass(frozen=True)
class Timings:
    """What the fit reads from an observed run (seconds on the replay's clock; NaN for
    what did not happen): one entry per request, and every token's arrival."""

    req_id: np.ndarray
    send_s: np.ndarray
    first_token_s: np.ndarray
    end_s: np.ndarray  # the last token's arrival for a request that failed mid-stream
    prompt_tokens: np.ndarray
    token_req: np.ndarray  # per token: its request, its choice, its arrival
    token_choice: np.ndarray
    token_s: np.ndarray


def lone_prefills(t: Timings) -> np.ndarray:
    """Indices of requests whose prefill ran alone: nothing else was in flight from
    their send to their first token."""
    busy_end = np.where(np.isnan(t.end_s), np.inf, t.end_s)
    alone = []
    for i in np.flatnonzero(~np.isnan(t.first_token_s)):
        others = np.arange(t.send_s.shape[0]) != i
        overlap = (t.send_s < t.first_token_s[i]) & (busy_end > t.send_s[i]) & others
        if not overlap.any():
            alone.append(i)
    return np.asarray(alone, dtype=np.int64)


def lone_shortfall(t: Timings) -> str:
    """Why ``t`` cannot calibrate TTFT against prompt length ('' when it can): fewer than
    3 requests ran alone, or they have fewer than 2 prompt lengths."""
    lone = lone_prefills(t)
    lengths = np.unique(t.prompt_tokens[lone]).size
    if lone.size >= 3 and lengths >= 2:
        return ""
    return (
        f"{lone.size} request(s) ran alone ({lengths} prompt length(s)); fitting TTFT "
        "against prompt length needs 3 with 2 lengths or more"
    )


def decode_gaps(t: Timings) -> tuple[np.ndarray, np.ndarray]:
    """(gap seconds, streams decoding) of every token gap during which no request was
    waiting for its first token."""
    order = np.lexsort((t.token_s, t.token_choice, t.token_req))
    req, choice, times = t.token_req[order], t.token_choice[order], t.token_s[order]
    same = (req[1:] == req[:-1]) & (choice[1:] == choice[:-1])
    starts, ends = times[:-1][same], times[1:][same]
    # each stream decodes from its first token to its last
    streams: dict[tuple[int, int], list[float]] = {}
    for r, c, s in zip(req.tolist(), choice.tolist(), times.tolist()):
        span = streams.setdefault((r, c), [s, s])
        span[1] = s
    spans = np.array(list(streams.values())) if streams else np.zeros((0, 2))
    waiting_from, waiting_to = (
        t.send_s,
        np.where(np.isnan(t.first_token_s), np.inf, t.first_token_s),
    )
    gaps, batch = [], []
    for begin, end in zip(starts.tolist(), ends.tolist()):
        if ((waiting_from < end) & (waiting_to > begin)).any():
            continue  # a prefill may have shared these steps
        middle = (begin + end) / 2
        decoding = int(((spans[:, 0] <= middle) & (spans[:, 1] >= end)).sum())
        gaps.append(end - begin)
        batch.append(max(decoding, 1))
    return np.asarray(gaps), np.asarray(batch, dtype=np.int64)


def fit_observed(t: Timings, *, token_budget: int, source: str) -> Calibration:
    """The calibrated model's coefficients from an observed run (module docstring).
    Raises CalibrationError (one line naming ``source``) when the run has too few lone
    prefills or decode gaps to fit."""
    shortfall = lone_shortfall(t)
    if shortfall:
        raise CalibrationError(f"{source}: {shortfall}: observe at a lower arrival rate")
    lone = lone_prefills(t)
    lengths = t.prompt_tokens[lone].astype(np.float64)
    steps = np.ceil(lengths / token_budget)
    prefill = np.column_stack([steps, lengths, lengths * (lengths + 1) / 2])
    ttft = t.first_token_s[lone] - t.send_s[lone]
    a, b, c = nnls(prefill / ttft[:, None], np.ones_like(ttft))
    gaps, batch = decode_gaps(t)
    if gaps.size == 0:
        raise CalibrationError(
            f"{source}: no token gap without a prefill in flight; the ITL fit needs "
            "requests of two output tokens or more"
        )
    sizes = np.unique(batch)
    counts = np.array([np.count_nonzero(batch == d) for d in sizes])
    if (counts >= MIN_GAPS).any():  # a mean of a few gaps is still at the mercy of bunching
        sizes, counts = sizes[counts >= MIN_GAPS], counts[counts >= MIN_GAPS]
    means = np.array([gaps[batch == d].mean() for d in sizes])
    if sizes.size >= 2:  # least squares on the means, each weighted by its number of gaps
        weight = np.sqrt(counts.astype(np.float64))
        decode = np.column_stack([np.ones_like(means), sizes.astype(np.float64)])
        alpha, beta = nnls(decode * weight[:, None], means * weight)
    else:  # one batch size: the whole step is the fixed cost at that size
        alpha, beta = max(float(means[0]) - b * sizes[0], 0.0), b
    coefficients = dict.fromkeys(FEATURES, 0.0)
    seqs = max(beta - b, 0.0)
    step = min(alpha, max(a - seqs, 0.0))
    chunks = max(a - seqs - step, 0.0)
    coefficients.update(
        step=step,
        decode_step=alpha - step,
        prefill_chunks=chunks,
        tokens=b,
        seqs=seqs,
        prefill_new_pairs=c,
    )
    ttft_error = error_stats(prefill @ np.array([a, b, c]), ttft)
    itl_error = error_stats(alpha + beta * sizes, means)
    fit = {
        "method": "observed: TTFT of lone requests vs prompt length; ITL vs decode batch",
        "rows": int(lone.size + gaps.size),
        "ttft_fit": {
            "requests": int(lone.size),
            "prompt_tokens": [int(lengths.min()), int(lengths.max())],
            "intercept_s": a,
            "per_token_s": b,
            "per_pair_s": c,
            "mape": ttft_error["mape"],
        },
        "itl_fit": {
            "gaps": int(gaps.size),
            "batch_sizes": sizes.tolist(),
            "intercept_s": alpha,
            "per_sequence_s": beta,
            "mean_gap_mape": itl_error["mape"],
        },
        "identified": IDENTIFIED,
        "not_identified": NOT_IDENTIFIED,
    }
    for name, value in coefficients.items():
        if not math.isfinite(value) or value < 0:  # nnls keeps them >= 0; a guard on the mapping
            raise CalibrationError(f"{source}: the fit gave {name} = {value!r}")
    return Calibration(coefficients, fit, {})
